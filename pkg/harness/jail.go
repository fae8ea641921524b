package harness

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/safepath"
	"github.com/galley-run/galley/pkg/workspace"
)

// jail is one agent's confinement: the mode applied, the agent's uid
// under ConfineUser, and the home and temporary folder made for it.
type jail struct {
	mode     Confinement
	why      string
	uid, gid int
	exe      string // galley-worker, whose agent-exec starts the agent
	base     string // holds home and tmp; removed when the agent has ended
	// workspace is the agent's worktree (enter).
	workspace string
	home      string
	tmp       string
	rw, ro    []string
	nproc     uint64 // the agent's RLIMIT_NPROC, 0 for none
	// group is the agent's cgroup, nil where none could be made (groupWhy
	// says why); gateR and gateW hold agent-exec until the harness has put
	// it in the group.
	group        *agentGroup
	groupWhy     string
	groupName    string // made by enter, under ConfineUser and ConfineLandlock
	maxPids      uint64
	maxMemory    int64
	gateR, gateW *os.File
	// net is the agent's network: made in a namespace of its own by the
	// clone that starts agent-exec, or limited by Landlock's TCP rules.
	net *agentNet
	// visible are the folders (and files) the agent runs from beside its
	// worktree, home and tmp: what its view shows under a hidden folder
	// (agentView) and, under Landlock, what it may read and execute.
	visible []string
	ended   bool // endJail ran
	endErr  error
}

// chooseJail decides the confinement of this run's agent: Config.Confine,
// with auto resolved against the workspace and this executable.
func (h *harness) chooseJail() (*jail, error) {
	j := &jail{mode: h.cfg.Confine}
	if j.mode == "" || j.mode == ConfineNone {
		j.mode = ConfineNone
		return j, nil
	}
	j.exe = h.cfg.ConfineExe
	if j.exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		j.exe = exe
	}
	if j.mode == ConfineAuto {
		e := ChooseConfinement(filepath.Dir(h.cfg.Workspace), j.exe)
		j.mode, j.why = e.Mode, e.Why
	}
	switch j.mode {
	case ConfineUser, ConfineLandlock, ConfineNone:
	default:
		return nil, errors.New("unknown confinement " + string(j.mode) + " (auto, uid, landlock or none)")
	}
	if j.mode == ConfineUser {
		if ok, msg := canSwitchUser(); !ok {
			return nil, errors.New("uid confinement: " + msg)
		}
		uid, err := AgentUIDOf(h.self)
		if err != nil {
			return nil, errors.New("uid confinement: " + err.Error())
		}
		j.uid, j.gid = uid, uid
		// A worktree an earlier agent owned goes back to the harness
		// before galley's git runs there: git refuses (safe.directory) a
		// repository another uid owns, and galley never waives that.
		// Whatever of that agent still runs on this machine (its harness
		// was killed before it could end it) is ended first, so that
		// nothing changes the worktree while galley works in it.
		if fi, err := os.Lstat(h.cfg.Workspace); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) >= AgentUIDBase && int(st.Uid) != j.uid {
				ctx, cancel := context.WithTimeout(h.ctx, endPatience)
				err := endUID(ctx, int(st.Uid))
				cancel()
				if err != nil {
					_ = workspace.MarkNotReusable(h.cfg.Workspace, err.Error())
					return nil, fmt.Errorf("ending the worktree's previous agent: %w", err)
				}
			}
			if err := chownTree(h.cfg.Workspace, os.Geteuid(), os.Getegid()); err != nil {
				return nil, needs("CHOWN", "taking the worktree back from its previous agent", err)
			}
		}
	}
	if j.mode == ConfineUser || j.mode == ConfineLandlock {
		n, err := agentMaxProcs()
		if err != nil {
			return nil, err
		}
		j.nproc = n
		if j.maxMemory, err = agentMaxMemory(); err != nil {
			return nil, err
		}
		j.maxPids, j.groupName = n, groupName(h.self.Handle)
		if j.mode == ConfineLandlock {
			// The agent shares the harness's uid, whose threads (galley
			// serve's, every harness's) RLIMIT_NPROC counts too: the
			// budget comes on top of what runs now.
			j.nproc += uint64(threadsOf(os.Getuid()))
		}
	}
	if j.mode == ConfineLandlock && landlockABI() == 0 {
		return nil, errors.New("landlock confinement: the kernel has no Landlock")
	}
	return j, nil
}

// enter gives the prepared workspace, a fresh home and a fresh temporary
// folder to the agent: owned by its uid and mode 0700 under ConfineUser,
// the only writable folders of its Landlock domain under ConfineLandlock.
func (j *jail) enter(workspace string, agentEnv []string, binDir, cli string) error {
	if j.mode == ConfineNone {
		return nil
	}
	var cliPath string
	if cli != "" {
		var err error
		if cliPath, err = FindProgram(binDir, cli); err != nil {
			return fmt.Errorf("the %s CLI: %w", cli, err)
		}
		if j.mode == ConfineUser {
			// In a view of its own the folders above it are shown to the
			// agent; without one they must be searchable by all.
			if err := runnableByOthers(cliPath, !j.ownView()); err != nil {
				return fmt.Errorf("the agent's uid cannot run the %s CLI at %s: %w", cli, cliPath, err)
			}
		}
	}
	// The pids limit binds where RLIMIT_NPROC does not: an agent that
	// runs as root (Landlock as root) is exempt from the rlimit.
	var err error
	if j.group, err = newAgentGroup(j.groupName, j.maxPids, j.maxMemory); err != nil {
		j.groupWhy = err.Error()
	}
	// agent-exec waits at the gate until its group is entered and its
	// network made: nothing of the agent runs before.
	if j.group != nil || j.netMode() == NetNamespace {
		if j.gateR, j.gateW, err = os.Pipe(); err != nil {
			return err
		}
	}
	base, err := os.MkdirTemp("", "galley-agent-")
	if err != nil {
		return err
	}
	j.base, j.home, j.tmp = base, filepath.Join(base, "home"), filepath.Join(base, "tmp")
	for _, d := range []string{j.home, j.tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	switch j.mode {
	case ConfineUser:
		for _, d := range []string{base, j.home, j.tmp} {
			if err := os.Lchown(d, j.uid, j.gid); err != nil {
				return needs("CHOWN", "giving the agent its home and tmp", err)
			}
		}
		ws, err := safepath.Open(workspace)
		if err != nil {
			return err
		}
		defer ws.Close()
		if err := ws.ChownTree(".", j.uid, j.gid); err != nil {
			return needs("CHOWN", "giving the worktree to the agent's uid", err)
		}
		if err := ws.Chmod(".", 0o700); err != nil {
			return needs("FOWNER", "closing the agent's worktree to others (chmod 0700 of a folder the agent owns)", err)
		}
	}
	j.visible = landlockReadOnly(workspace, j.exe, binDir, cliPath, agentEnv)
	j.workspace = workspace
	if j.mode == ConfineLandlock {
		j.rw = []string{workspace, j.home, j.tmp}
		j.ro = j.visible
	}
	return nil
}

// ownView reports whether the agent gets a mount namespace of its own
// (agentView): where it gets a network namespace, so where the harness
// may make namespaces (root, outside a container).
func (j *jail) ownView() bool { return j.mode != ConfineNone && j.netMode() == NetNamespace }

// systemDirs are the folders a Landlocked agent may read and execute
// beneath: the system's programs, libraries and settings, and /proc and
// /sys (which the kernel guards per process itself).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
	"/nix", "/proc", "/sys", "/run/systemd/resolve"}

// landlockReadOnly lists the read-only folders of a Landlock domain: the
// system's, galley-worker's, the agent binaries', the folders the agent's
// CLI (cliPath, when it has one) runs from (programDirs: where its links
// lead, its node_modules), each absolute PATH entry and the certificate
// files named in the environment, never one that holds the workspaces (so
// never the data folder nor /) or lies among them.
func landlockReadOnly(workspace, exe, binDir, cliPath string, env []string) []string {
	ro := slices.Clone(systemDirs)
	ro = append(ro, filepath.Dir(exe))
	if binDir != "" {
		ro = append(ro, binDir)
	}
	if cliPath != "" {
		ro = append(ro, programDirs(cliPath)...)
	}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			ro = append(ro, filepath.SplitList(v)...)
		case "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS":
			ro = append(ro, v)
		}
	}
	wsParent := filepath.Dir(workspace)
	var out []string
	for _, d := range ro {
		if !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if rel, err := filepath.Rel(d, wsParent); err == nil && !strings.HasPrefix(rel, "..") {
			continue // d holds the workspaces
		}
		if rel, err := filepath.Rel(wsParent, d); err == nil && !strings.HasPrefix(rel, "..") {
			continue // d lies in a workspace (another worker's, perhaps)
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// netMode is the agent's network confinement (NetOpen without one).
func (j *jail) netMode() AgentNetwork {
	if j.net == nil {
		return NetOpen
	}
	return j.net.mode
}

// endPatience bounds how long ending an agent's processes may take.
const endPatience = 30 * time.Second

// started puts the agent's first process, agent-exec, in its cgroup,
// makes its network (agentNet.attach) and then lets it go on to execute
// the agent: everything the agent runs is in the group, and in its
// network, from its first instruction. When that fails agent-exec is
// let go without the byte it waits for, and ends without running the
// agent.
func (j *jail) started(pid int) error {
	if j.gateW == nil {
		return nil
	}
	j.gateR.Close()
	defer func() { j.gateW.Close(); j.gateR, j.gateW = nil, nil }()
	if j.group != nil {
		if err := j.group.add(pid); err != nil {
			return err
		}
	}
	if j.net != nil {
		if err := j.net.attach(pid); err != nil {
			return err
		}
	}
	_, err := j.gateW.Write([]byte{1})
	return err
}

// groupDesc says which cgroup holds the agent, or why none does.
func (j *jail) groupDesc() string {
	if j.group == nil {
		if j.groupWhy == "" {
			return "none"
		}
		return "none: " + j.groupWhy
	}
	return strings.Join(j.group.dirs, " ")
}

// closeGate closes the gate of an agent that did not start.
func (j *jail) closeGate() {
	for _, f := range []*os.File{j.gateR, j.gateW} {
		if f != nil {
			f.Close()
		}
	}
	j.gateR, j.gateW = nil, nil
}

// end ends what of the agent still runs, from the harness, outside
// the agent's uid and group, so nothing the agent runs can stop it: every
// process of its cgroup (one that left the process group, forked anew or
// fights back; under Landlock too), then under ConfineUser every process
// of its uid. It checks that none remains, and answers an error if some
// does.
func (j *jail) end(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endPatience)
	defer cancel()
	var errs []error
	if j.group != nil {
		errs = append(errs, j.group.end(ctx))
	}
	if j.mode == ConfineUser && j.uid != 0 {
		errs = append(errs, endUID(ctx, j.uid))
	}
	return errors.Join(errs...)
}

// leave removes the agent's home and tmp once it has ended.
func (j *jail) leave() error {
	j.closeGate()
	if j.mode == ConfineNone || j.base == "" {
		return nil
	}
	parent, err := safepath.Open(filepath.Dir(j.base))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := parent.RemoveAll(filepath.Base(j.base)); err != nil {
		return needs("FOWNER", "removing the agent's home and tmp", err)
	}
	return nil
}

// needs names the capability an operation of the uid confinement needed
// when it was not permitted.
func needs(capName, op string, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%s needs CAP_%s, which this harness lacks: %w", op, capName, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// chownTree gives dir and everything beneath it to uid:gid through
// package safepath: never following a symbolic link at any component (the
// link itself changes owner), and refusing a hard link to a file uid does
// not own.
func chownTree(dir string, uid, gid int) error {
	d, err := safepath.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.ChownTree(".", uid, gid)
}
