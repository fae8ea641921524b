//go:build !linux

package harness

import "os/exec"

// wrap is Linux's alone (agent-exec, namespaces, uid switching, Landlock):
// elsewhere chooseJail confines no agent, so there is nothing to wrap. An
// agent asked to be confined is never started unconfined.
func (j *jail) wrap(*exec.Cmd) {
	if j.mode != ConfineNone {
		panic("harness: confinement " + string(j.mode) + " is implemented on Linux only")
	}
}
