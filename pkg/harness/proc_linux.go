package harness

import (
	"os/exec"
	"syscall"
)

// setProcAttr keeps the agent in the harness's process group (no Setpgid),
// so that a runtime stopping the group stops both, and has the kernel kill
// the agent if the harness dies first.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
