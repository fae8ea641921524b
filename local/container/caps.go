package container

import (
	"fmt"
	"slices"
	"strings"
)

// dockerDefaults are the capabilities Docker (moby's oci/caps) gives a
// container unless dropped; Fargate starts from the same set.
var dockerDefaults = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

// allCaps are the capability names ECS takes (KernelCapabilities).
var allCaps = []string{
	"AUDIT_CONTROL", "AUDIT_WRITE", "BLOCK_SUSPEND", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH",
	"FOWNER", "FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN",
	"MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "SETFCAP",
	"SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE", "SYS_NICE",
	"SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG",
	"WAKE_ALARM",
}

// capBits are the kernel's capability numbers (linux/capability.h).
var capBits = map[string]uint{
	"CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5,
	"SETGID": 6, "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10,
	"NET_BROADCAST": 11, "NET_ADMIN": 12, "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15,
	"SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18, "SYS_PTRACE": 19, "SYS_PACCT": 20,
	"SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24, "SYS_TIME": 25,
	"SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
	"SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35,
	"BLOCK_SUSPEND": 36,
}

// DockerDefaults returns Docker's default capability set, sorted.
func DockerDefaults() []string { return slices.Clone(dockerDefaults) }

// Known reports whether name (without CAP_) is a capability ECS takes.
func Known(name string) bool { return slices.Contains(allCaps, name) }

// Capabilities applies ECS's rule (KernelCapabilities, as Docker applies
// CapAdd and CapDrop) to Docker's defaults: add ALL gives the defaults
// minus drop; drop ALL gives exactly add; otherwise drop, then add. Names
// may carry a CAP_ prefix and any case. The result is sorted.
func Capabilities(add, drop []string) ([]string, error) {
	norm := func(xs []string) ([]string, error) {
		var out []string
		for _, x := range xs {
			x = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(x)), "CAP_")
			if x != "ALL" && !Known(x) {
				return nil, fmt.Errorf("unknown capability %q", x)
			}
			out = append(out, x)
		}
		return out, nil
	}
	a, err := norm(add)
	if err != nil {
		return nil, err
	}
	d, err := norm(drop)
	if err != nil {
		return nil, err
	}
	var set []string
	switch {
	case slices.Contains(a, "ALL"):
		// ECS's documented rule: the defaults, less the drops.
		for _, c := range dockerDefaults {
			if !slices.Contains(d, c) {
				set = append(set, c)
			}
		}
	case slices.Contains(d, "ALL"):
		set = a
	default:
		for _, c := range dockerDefaults {
			if !slices.Contains(d, c) {
				set = append(set, c)
			}
		}
		set = append(set, a...)
	}
	slices.Sort(set)
	return slices.Compact(set), nil
}

// Mask is the capability bit mask of names, as /proc/<pid>/status shows
// CapEff.
func Mask(names []string) uint64 {
	var m uint64
	for _, n := range names {
		if b, ok := capBits[n]; ok {
			m |= 1 << b
		}
	}
	return m
}
