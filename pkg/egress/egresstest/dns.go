// Package egresstest holds what tests of the egress proxy need besides the
// proxy: a small real DNS server (DNS) that answers from a map, over UDP
// and TCP on one loopback port, so that a test gives the proxy
// (egress.WithResolver) names that stand for its own listeners, for
// private addresses or for the metadata service, through the same
// resolver code the proxy uses in production.
package egresstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is a DNS server answering A and AAAA questions from its map: a name
// in the map gets its addresses of the question's family (none is an empty
// answer), a silenced name gets no reply at all, and any other name is
// NXDOMAIN.
type DNS struct {
	// Addr is the server's host:port, for UDP and TCP alike.
	Addr string

	udp net.PacketConn
	tcp net.Listener

	mu       sync.Mutex
	names    map[string][]netip.Addr
	silenced map[string]bool
	queries  map[string]int
}

// StartDNS starts a server answering names (a name, any case, with or
// without its trailing dot → its addresses) and stops it when the test
// ends.
func StartDNS(t testing.TB, names map[string][]string) *DNS {
	t.Helper()
	d := &DNS{names: map[string][]netip.Addr{}, silenced: map[string]bool{}, queries: map[string]int{}}
	for name, addrs := range names {
		d.Set(name, addrs...)
	}
	// The TCP listener takes the UDP socket's port, which another program
	// may hold: try a few.
	var err error
	for range 20 {
		if d.udp, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if d.tcp, err = net.Listen("tcp", d.udp.LocalAddr().String()); err == nil {
			break
		}
		d.udp.Close()
	}
	if err != nil {
		t.Fatalf("egresstest: no port free for UDP and TCP: %v", err)
	}
	d.Addr = d.udp.LocalAddr().String()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.serveUDP() }()
	go func() { defer wg.Done(); d.serveTCP() }()
	t.Cleanup(func() {
		d.udp.Close()
		d.tcp.Close()
		wg.Wait()
	})
	return d
}

func key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// Set maps name to addrs (IPv4 or IPv6 addresses), replacing what it had.
// It panics on an address that does not parse: a test's mistake.
func (d *DNS) Set(name string, addrs ...string) {
	as := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		as[i] = netip.MustParseAddr(a)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.names[key(name)] = as
}

// Silence makes the server ignore questions about name, as a server that
// is down or filtered would: the resolver waits for its timeout.
func (d *DNS) Silence(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.silenced[key(name)] = true
}

// Queries is the number of questions asked about name so far.
func (d *DNS) Queries(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.queries[key(name)]
}

func (d *DNS) serveUDP() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp, ok := d.answer(buf[:n], 512); ok {
			d.udp.WriteTo(resp, from)
		}
	}
}

func (d *DNS) serveTCP() {
	for {
		c, err := d.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go d.serveTCPConn(c)
	}
}

// serveTCPConn answers length-prefixed messages (RFC 1035, 4.2.2) until
// the client closes or is idle for 10 s.
func (d *DNS) serveTCPConn(c net.Conn) {
	defer c.Close()
	for {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp, ok := d.answer(msg, 65535)
		if !ok {
			continue
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

// answer builds the reply to msg, truncated (TC set, no answers) when it
// would exceed limit bytes; ok is false for a silenced name or a message
// that is not a question.
func (d *DNS) answer(msg []byte, limit int) (resp []byte, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	name := key(q.Name.String())
	d.mu.Lock()
	d.queries[name]++
	addrs, known := d.names[name]
	silenced := d.silenced[name]
	d.mu.Unlock()
	if silenced {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	build := func(withAnswers bool) ([]byte, error) {
		b := dnsmessage.NewBuilder(nil, rh)
		b.EnableCompression()
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		if err := b.Question(q); err != nil {
			return nil, err
		}
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if !withAnswers {
				break
			}
			rrh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
			var err error
			switch {
			case q.Type == dnsmessage.TypeA && a.Is4():
				err = b.AResource(rrh, dnsmessage.AResource{A: a.As4()})
			case q.Type == dnsmessage.TypeAAAA && a.Is6():
				err = b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
			if err != nil {
				return nil, err
			}
		}
		return b.Finish()
	}
	resp, err = build(true)
	if err == nil && len(resp) > limit {
		rh.Truncated = true
		resp, err = build(false)
	}
	return resp, err == nil
}
