package agents

import (
	"os/exec"
	"syscall"
)

// setCLIProcAttr keeps the CLI in the worker's process group (a runtime
// that stops the group stops it and whatever it started) and has the
// kernel kill it if the supervisor dies first.
func setCLIProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
