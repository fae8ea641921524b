package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// probeNamespace makes a network namespace and leaves it at once: whether
// this process may give its agents one.
func probeNamespace() error {
	return inNetNamespace(nil, func() error { return nil })
}

// inNetNamespace runs f on a thread of its own inside the network
// namespace ns (a new one when ns is nil), then returns the thread to
// this process's namespace. Sockets f makes belong to ns for their whole
// life, whichever thread later uses them. A thread that cannot return is
// never given back to the Go scheduler: it ends with its goroutine.
func inNetNamespace(ns *os.File, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer own.Close()
		if ns == nil {
			err = unix.Unshare(unix.CLONE_NEWNET)
		} else {
			err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET)
		}
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("entering a network namespace: %w", err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			// Still locked: this thread dies with the goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("returning to the harness's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// loopbackUp brings up lo in the calling thread's network namespace (a new
// namespace's loopback is down).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// namespaceCloneFlag is what the agent's first process is started with
// under NetNamespace: a network namespace of its own, made by the kernel
// as the harness (root) clones it, before it takes the agent's uid.
const namespaceCloneFlag = syscall.CLONE_NEWNET

// viewUnshareFlag gives agent-exec a mount namespace of its own (Go makes
// its mounts private), in which it makes the agent's view (agentView).
const viewUnshareFlag = syscall.CLONE_NEWNS

// attach makes the agent's network once its first process (pid, held
// before it executes anything) exists: under NetNamespace it brings up
// the loopback of that process's namespace and binds there every listener
// handed out by listen. It refuses a process that shares the harness's
// namespace: the agent would reach everything the harness does.
func (n *agentNet) attach(pid int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mode != NetNamespace || n.attached {
		return nil
	}
	n.attached = true
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("opening the agent's network namespace: %w", err)
	}
	defer ns.Close()
	var agentNS, ownNS unix.Stat_t
	if err := unix.Fstat(int(ns.Fd()), &agentNS); err != nil {
		return err
	}
	if err := unix.Stat("/proc/self/ns/net", &ownNS); err != nil {
		return err
	}
	if agentNS.Ino == ownNS.Ino && agentNS.Dev == ownNS.Dev {
		return errors.New("the agent's first process shares the harness's network namespace")
	}
	bound := make([]net.Listener, 0, len(n.deferred))
	err = inNetNamespace(ns, func() error {
		if err := loopbackUp(); err != nil {
			return err
		}
		for _, d := range n.deferred {
			ln, err := net.Listen("tcp", d.addr.String())
			if err != nil {
				return fmt.Errorf("listening for %s in the agent's network: %w", d.name, err)
			}
			bound = append(bound, ln)
		}
		return nil
	})
	if err != nil {
		for _, ln := range bound {
			ln.Close()
		}
		return err
	}
	var errs []error
	for i, d := range n.deferred {
		if err := d.attach(bound[i]); err != nil { // it closed bound[i]
			errs = append(errs, fmt.Errorf("the %s server closed before the agent's network was made", d.name))
		}
	}
	return errors.Join(errs...)
}
