//go:build !linux

package agents

import "os/exec"

// setCLIProcAttr keeps the CLI in the worker's process group.
func setCLIProcAttr(*exec.Cmd) {}
