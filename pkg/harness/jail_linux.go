//go:build linux

package harness

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// wrap makes cmd start the agent confined: through agent-exec (which sets
// no_new_privs and, under Landlock, enters the domain), under the agent's
// uid, gid and no supplementary group, with its own home and tmp.
func (j *jail) wrap(cmd *exec.Cmd) {
	if j.mode == ConfineNone {
		return
	}
	// exec.Cmd keeps the last of duplicate variables.
	cmd.Env = append(cmd.Env, "HOME="+j.home, "TMPDIR="+j.tmp)
	args := []string{j.exe, AgentExecCommand}
	if j.nproc > 0 {
		args = append(args, "--nproc", strconv.FormatUint(j.nproc, 10))
	}
	if j.gateR != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, j.gateR)
		args = append(args, "--wait-fd", strconv.Itoa(2+len(cmd.ExtraFiles)))
	}
	for _, d := range j.rw {
		args = append(args, "--rw", d)
	}
	for _, d := range j.ro {
		args = append(args, "--ro", d)
	}
	if j.netMode() == NetLandlock {
		args = append(args, "--net-landlock")
		for _, p := range j.net.connectPorts() {
			args = append(args, "--connect", strconv.Itoa(p))
		}
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if j.ownView() {
		// agent-exec starts as root in a mount namespace of its own,
		// makes the agent's view there and then takes the agent's uid.
		for _, h := range systemHidden {
			args = append(args, "--hide", h.flag())
		}
		for _, p := range []string{j.workspace, j.base} {
			args = append(args, "--expose", exposedPath{path: p, rw: true}.flag())
		}
		for _, p := range j.visible {
			if p == filepath.Dir(j.exe) {
				// galley-worker alone of its folder: the folder may be
				// closed to others, the program is not.
				p = j.exe
			}
			args = append(args, "--expose", exposedPath{path: p}.flag())
		}
		if j.mode == ConfineUser {
			args = append(args, "--uid", strconv.Itoa(j.uid), "--gid", strconv.Itoa(j.gid))
		}
		cmd.SysProcAttr.Unshareflags |= viewUnshareFlag
		cmd.SysProcAttr.Cloneflags |= namespaceCloneFlag
	} else if j.mode == ConfineUser {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(j.uid), Gid: uint32(j.gid), Groups: []uint32{}}
	}
	args = append(append(args, "--", cmd.Path), cmd.Args...)
	cmd.Path, cmd.Args = j.exe, args
}
