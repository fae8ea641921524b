//go:build !linux

package harness

import "os/exec"

// setProcAttr keeps the agent in the harness's process group, the default.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr != nil {
		cmd.SysProcAttr.Setpgid = false
	}
}
