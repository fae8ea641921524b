package harness

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropCapabilities leaves the calling process (and whatever it executes)
// without any capability: every one dropped from the bounding set, the
// ambient set cleared, and the effective, permitted and inheritable sets
// emptied. An agent that runs as root (Landlock as root) keeps root's uid
// but none of root's powers: it cannot read another root process's
// environment or memory (the kernel then wants the reader's capabilities
// to cover the target's, or CAP_SYS_PTRACE), nor ptrace, mount, change
// its network, or override file permissions. With no_new_privs and an
// empty bounding set, no program it executes gets any back.
func dropCapabilities() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return err
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	return unix.Capset(&hdr, &data[0])
}
