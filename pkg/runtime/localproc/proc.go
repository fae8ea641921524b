//go:build unix

package localproc

import (
	"errors"
	"fmt"
	"syscall"
)

// procInfo is what the runtime reads about a live process.
type procInfo struct {
	start  string // start time since boot, in clock ticks; "" where unknown
	pgid   int
	zombie bool // ended, not yet reaped by its parent
}

type reapResult int

const (
	reapRunning reapResult = iota
	reapExited             // reaped here now; status tells how it ended
	reapGone               // not a child of this process, or reaped already
)

// reap collects pid's exit status if it is this process's child and has
// ended, without blocking. Only ever a given pid: waiting for any child
// would steal other code's children from os/exec.
func reap(pid int) (reapResult, syscall.WaitStatus) {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return reapGone, ws
		case got == 0:
			return reapRunning, ws
		}
		return reapExited, ws
	}
}

// describe says how a reaped process ended.
func describe(ws syscall.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("exit status %d", ws.ExitStatus())
	case ws.Signaled():
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("wait status %#x", uint32(ws))
}

// groupExists reports whether process group pgid has any member.
func groupExists(pgid int) bool {
	err := syscall.Kill(-pgid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
