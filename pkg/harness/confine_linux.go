package harness

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// canSwitchUser reports whether this process holds, in its effective
// set, every capability of UIDCapabilities; if not, which it lacks and
// the operation each would have allowed.
func canSwitchUser() (bool, string) {
	caps, ok := effectiveCaps()
	if !ok {
		return false, "cannot read this process's capabilities"
	}
	var missing []string
	for _, c := range UIDCapabilities {
		if caps&(1<<c.Bit) == 0 {
			missing = append(missing, "CAP_"+c.Name+" (to "+c.Why+")")
		}
	}
	if len(missing) > 0 {
		return false, "the harness may not switch users: it lacks " + strings.Join(missing, ", ")
	}
	return true, ""
}

// effectiveCaps is this process's effective capability set.
func effectiveCaps() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return caps, err == nil
		}
	}
	return 0, false
}

// Landlock's system calls (the same numbers on every architecture) and
// constants (linux/landlock.h).
const (
	sysLandlockCreateRuleset = 444
	sysLandlockAddRule       = 445
	sysLandlockRestrictSelf  = 446

	landlockCreateRulesetVersion = 1
	landlockRulePathBeneath      = 1
	landlockRuleNetPort          = 2 // ABI 4

	llNetConnectTCP = 1 << 1 // ABI 4 (LANDLOCK_ACCESS_NET_CONNECT_TCP)

	llExecute    = 1 << 0
	llWriteFile  = 1 << 1
	llReadFile   = 1 << 2
	llReadDir    = 1 << 3
	llRemoveDir  = 1 << 4
	llRemoveFile = 1 << 5
	llMakeChar   = 1 << 6
	llMakeDir    = 1 << 7
	llMakeReg    = 1 << 8
	llMakeSock   = 1 << 9
	llMakeFifo   = 1 << 10
	llMakeBlock  = 1 << 11
	llMakeSym    = 1 << 12
	llRefer      = 1 << 13 // ABI 2
	llTruncate   = 1 << 14 // ABI 3
	llIoctlDev   = 1 << 15 // ABI 5

	llScopeAbstractUnixSocket = 1 << 0 // ABI 6
	llScopeSignal             = 1 << 1 // ABI 6

	prSetNoNewPrivs = 38
	oPath           = 0x200000 // O_PATH, which package syscall lacks
)

// landlockABI is the kernel's Landlock ABI version, 0 when Landlock is
// absent or disabled.
func landlockABI() int {
	v, _, errno := syscall.RawSyscall(sysLandlockCreateRuleset, 0, 0, landlockCreateRulesetVersion)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// handledFS is every file-system right the kernel's ABI knows: all are
// denied outside the rules.
func handledFS(abi int) uint64 {
	r := uint64(llExecute | llWriteFile | llReadFile | llReadDir | llRemoveDir | llRemoveFile | llMakeChar |
		llMakeDir | llMakeReg | llMakeSock | llMakeFifo | llMakeBlock | llMakeSym)
	if abi >= 2 {
		r |= llRefer
	}
	if abi >= 3 {
		r |= llTruncate
	}
	if abi >= 5 {
		r |= llIoctlDev
	}
	return r
}

// Rights granted beneath a read-only and a read-write folder.
const (
	roRights   = llExecute | llReadFile | llReadDir
	fileRights = llExecute | llWriteFile | llReadFile | llTruncate | llIoctlDev
)

// landlockRestrict puts the calling thread in a new Landlock domain with rw
// (every right) and ro (read and execute) folders, paths that do not exist
// skipped; with fsRules false the domain leaves the file system alone.
// With netPorts non-nil (ABI 4 and later) the domain may connect over TCP
// only to those ports (binding stays free: an agent's tests may serve on
// loopback). With ABI 6 the domain is also scoped: no signal to, and no
// abstract unix socket of, a process outside it.
func landlockRestrict(fsRules bool, rw, ro []string, netPorts []int) error {
	abi := landlockABI()
	if abi == 0 {
		return errors.New("the kernel has no Landlock")
	}
	if netPorts != nil && abi < 4 {
		return fmt.Errorf("Landlock ABI %d has no network rules (they need ABI 4)", abi)
	}
	var handled uint64
	if fsRules {
		handled = handledFS(abi)
	}
	attr := struct{ fs, net, scoped uint64 }{fs: handled}
	size := uintptr(8)
	if netPorts != nil {
		attr.net = llNetConnectTCP
		size = 16
	}
	if abi >= 6 {
		attr.scoped = llScopeAbstractUnixSocket | llScopeSignal
		size = 24
	}
	fd, _, errno := syscall.RawSyscall(sysLandlockCreateRuleset, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer syscall.Close(int(fd))
	add := func(path string, rights uint64) error {
		pfd, err := syscall.Open(path, oPath|syscall.O_CLOEXEC, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		defer syscall.Close(pfd)
		var st syscall.Stat_t
		if err := syscall.Fstat(pfd, &st); err != nil {
			return err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			rights &= fileRights
		}
		// struct landlock_path_beneath_attr is packed: u64, then s32.
		var pb [12]byte
		*(*uint64)(unsafe.Pointer(&pb[0])) = rights & handled
		*(*int32)(unsafe.Pointer(&pb[8])) = int32(pfd)
		if _, _, errno := syscall.RawSyscall6(sysLandlockAddRule, fd, landlockRulePathBeneath, uintptr(unsafe.Pointer(&pb[0])), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule %s: %w", path, errno)
		}
		return nil
	}
	if fsRules {
		for _, p := range rw {
			if err := add(p, handled); err != nil {
				return err
			}
		}
		for _, p := range ro {
			if err := add(p, roRights); err != nil {
				return err
			}
		}
		// /dev/null, /dev/tty and the like are written, not only read.
		if err := add("/dev", llReadFile|llWriteFile|llReadDir|llIoctlDev); err != nil {
			return err
		}
	}
	for _, port := range netPorts {
		// struct landlock_net_port_attr: u64 allowed_access, u64 port.
		np := struct{ access, port uint64 }{llNetConnectTCP, uint64(port)}
		if _, _, errno := syscall.RawSyscall6(sysLandlockAddRule, fd, landlockRuleNetPort, uintptr(unsafe.Pointer(&np)), 0, 0, 0); errno != 0 {
			return fmt.Errorf("landlock_add_rule port %d: %w", port, errno)
		}
	}
	if _, _, errno := syscall.RawSyscall(sysLandlockRestrictSelf, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

// RunAgentExec is the agent-exec subcommand: it runs in the agent's
// process (already under the agent's uid with ConfineUser), sets
// no_new_privs (no setuid program or file capability can give the agent
// back what it lost), enters the Landlock domain the flags describe, and
// executes the agent. Arguments:
//
//	[--nproc <n>] [--wait-fd <fd>] [--hide <mode>:<dir>]... [--expose rw|ro:<path>]... [--uid <uid> --gid <gid>]
//	[--rw <dir>]... [--ro <dir>]... [--net-landlock] [--connect <port>]... -- <program> <argv0> <args>...
//
// --nproc sets RLIMIT_NPROC (soft and hard) to n: the agent's uid may then
// run at most n processes (threads) at once, which bounds a fork flood.
// --wait-fd makes it wait, before anything else, for one byte on fd: the
// harness sends it once it has put this process in the agent's cgroup, and
// closes fd without it when it could not. --hide and --expose make the
// agent's view of the file system in its own mount namespace (agentView),
// as root, and --uid and --gid then make it the agent. Run as root still, it drops every
// capability before the agent runs (dropCapabilities). --net-landlock limits the
// agent's TCP connections to the --connect ports (NetLandlock).
//
// It returns only on failure, with an exit code.
func RunAgentExec(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "galley agent-exec: "+format+"\n", a...)
		return 126
	}
	var rw, ro []string
	var nproc uint64
	var netPorts []int
	var view agentView
	uid, gid := -1, -1
	i := 0
	for ; i < len(args) && args[i] != "--"; i += 2 {
		if args[i] == "--net-landlock" {
			if netPorts == nil {
				netPorts = []int{}
			}
			i-- // a flag without a value
			continue
		}
		if i+1 >= len(args) {
			return fail("flag %s needs a value", args[i])
		}
		switch args[i] {
		case "--rw":
			rw = append(rw, args[i+1])
		case "--ro":
			ro = append(ro, args[i+1])
		case "--wait-fd":
			fd, err := strconv.Atoi(args[i+1])
			if err != nil || fd < 3 {
				return fail("--wait-fd needs a descriptor above 2")
			}
			f := os.NewFile(uintptr(fd), "gate")
			b := make([]byte, 1)
			n, _ := f.Read(b)
			f.Close()
			if n != 1 {
				return fail("the harness did not put the agent in its cgroup; not starting it")
			}
		case "--connect":
			port, err := strconv.Atoi(args[i+1])
			if err != nil || port <= 0 || port > 65535 {
				return fail("--connect needs a TCP port")
			}
			netPorts = append(netPorts, port)
		case "--nproc":
			n, err := strconv.ParseUint(args[i+1], 10, 32)
			if err != nil || n == 0 {
				return fail("--nproc needs a positive number")
			}
			nproc = n
		case "--hide":
			h, err := parseHide(args[i+1])
			if err != nil {
				return fail("%v", err)
			}
			view.hide = append(view.hide, h)
		case "--expose":
			e, err := parseExpose(args[i+1])
			if err != nil {
				return fail("%v", err)
			}
			view.expose = append(view.expose, e)
		case "--uid", "--gid":
			n, err := strconv.Atoi(args[i+1])
			if err != nil || n <= 0 {
				return fail("%s needs a positive id", args[i])
			}
			if args[i] == "--uid" {
				uid = n
			} else {
				gid = n
			}
		default:
			return fail("unknown flag %q", args[i])
		}
	}
	if i+2 >= len(args) {
		return fail("no program and argv[0] after --")
	}
	if (uid < 0) != (gid < 0) {
		return fail("--uid and --gid go together")
	}
	if len(view.hide)+len(view.expose) > 0 {
		if err := view.apply(); err != nil {
			return fail("making the agent's view of the file system: %v", err)
		}
	}
	if nproc > 0 {
		if err := setNproc(nproc); err != nil {
			return fail("setrlimit(RLIMIT_NPROC): %v", err)
		}
	}
	if uid > 0 {
		if err := switchUser(uid, gid); err != nil {
			return fail("taking the agent's uid: %v", err)
		}
	}
	prog, argv := args[i+1], args[i+2:]
	// no_new_privs and the Landlock domain are per thread: both must be on
	// the thread that calls execve, which keeps them across it.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); errno != 0 {
		return fail("prctl(PR_SET_NO_NEW_PRIVS): %v", errno)
	}
	// Capabilities, like no_new_privs and the domain, are per thread.
	if os.Geteuid() == 0 {
		// An agent that runs as root (Landlock as root) keeps none of
		// root's capabilities: it could otherwise read every root
		// process's environment and memory, the harness's and galley
		// serve's included, where the provider keys are.
		if err := dropCapabilities(); err != nil {
			return fail("dropping the agent's capabilities: %v", err)
		}
	}
	if len(rw)+len(ro) > 0 || netPorts != nil {
		if err := landlockRestrict(len(rw)+len(ro) > 0, rw, ro, netPorts); err != nil {
			return fail("%v", err)
		}
	}
	err := syscall.Exec(prog, argv, os.Environ())
	return fail("exec %s: %v", filepath.Base(prog), err)
}
