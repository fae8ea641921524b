//go:build unix && !linux

package localproc

import "syscall"

// procStat tells only whether the process exists: without /proc there is no
// start time, so pid reuse goes unnoticed on these systems.
func procStat(pid int) (info procInfo, ok bool) {
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return procInfo{}, false
	}
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return procInfo{}, false
	}
	return procInfo{pgid: pgid}, true
}

// findLeaderByEnv cannot read other processes' environments here.
func findLeaderByEnv(string) (int, bool) { return 0, false }
