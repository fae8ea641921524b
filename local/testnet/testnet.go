// Package testnet stands in for the internet in tests of what an agent
// may reach: a network namespace of its own (a "host beyond"), joined to
// this machine by a veth pair, holding a public-looking address (from
// 203.0.113.0/24, TEST-NET-3: never routed on the internet) and
// listeners there. From this machine's own network the host is reached
// like any host of the internet; from an agent's namespace, or a worker
// container whose firewall refuses it, it is not. It needs root and
// iproute2.
package testnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Host is the host beyond: its namespace, its address and the listeners
// opened in it.
type Host struct {
	// Addr is the host's address, reached from this machine's namespace.
	Addr net.IP

	ns   string // the namespace's name (ip netns)
	veth string // this machine's end of the pair
	mu   sync.Mutex
	lns  []net.Listener
}

// ErrUnavailable says the host cannot be made here (not root, no
// iproute2, no namespaces).
var ErrUnavailable = errors.New("testnet: cannot make a host beyond here")

// New makes a host beyond with an address 203.0.113.<n> that no other
// host beyond on this machine has (tests side by side, two runs at once:
// n is drawn, and drawn again when taken). Each pair is a point-to-point
// link with a /32 route and no address on this machine's end, so hosts
// beyond share nothing.
func New() (*Host, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("%w: needs root", ErrUnavailable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("%w: no ip command (Debian: apt-get install iproute2)", ErrUnavailable)
	}
	var last error
	for try := 0; try < 32; try++ {
		h, err := newHost()
		if err == nil {
			return h, nil
		}
		last = err
		if !errors.Is(err, errTaken) {
			return nil, err
		}
	}
	return nil, last
}

var errTaken = errors.New("testnet: the address is taken")

func newHost() (*Host, error) {
	var b [5]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:4])
	n := 2 + int(b[4])%253
	h := &Host{Addr: net.IPv4(203, 0, 113, byte(n)).To4(), ns: "galley-inet-" + id, veth: "gin" + id}
	ok := false
	defer func() {
		if !ok {
			h.Close()
		}
	}()
	peer := "gip" + id
	addr := h.Addr.String()
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.veth, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", h.ns},
		{"link", "set", h.veth, "up"},
		{"route", "add", addr + "/32", "dev", h.veth},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.ns, "addr", "add", addr + "/32", "dev", peer},
		{"-n", h.ns, "link", "set", peer, "up"},
		// The host answers anyone: its replies leave by the pair.
		{"-n", h.ns, "route", "add", "default", "dev", peer},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			if args[0] == "route" && strings.Contains(string(out), "File exists") {
				return nil, errTaken
			}
			return nil, fmt.Errorf("%w: ip %s: %v: %s", ErrUnavailable, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	ok = true
	return h, nil
}

// Listen opens a TCP listener on the host beyond at port (0: any).
func (h *Host) Listen(port int) (net.Listener, error) {
	var ln net.Listener
	err := h.in(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(h.Addr.String(), fmt.Sprint(port)))
		return err
	})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.lns = append(h.lns, ln)
	h.mu.Unlock()
	return ln, nil
}

// in runs f on a thread inside the host's namespace; sockets f makes stay
// there.
func (h *Host) in(f func() error) error {
	ns, err := os.Open("/var/run/netns/" + h.ns)
	if err != nil {
		return err
	}
	defer ns.Close()
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
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := f()
		if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, err) // the thread stays locked and ends with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Close closes the listeners and removes the namespace (and with it the
// pair and the route).
func (h *Host) Close() error {
	h.mu.Lock()
	for _, ln := range h.lns {
		ln.Close()
	}
	h.lns = nil
	h.mu.Unlock()
	var errs []error
	if out, err := exec.Command("ip", "link", "del", h.veth).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", h.veth, err, strings.TrimSpace(string(out))))
	}
	if out, err := exec.Command("ip", "netns", "del", h.ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", h.ns, err, strings.TrimSpace(string(out))))
	}
	return errors.Join(errs...)
}
