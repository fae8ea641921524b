package egresstest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/egress/egresstest"
)

func resolver(addr string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
}

func TestDNSAnswersFromItsMap(t *testing.T) {
	// Forty addresses do not fit a 512-byte UDP answer: the resolver is
	// told so (TC) and asks again over TCP.
	many := make([]string, 40)
	for i := range many {
		many[i] = fmt.Sprintf("192.0.2.%d", i+1)
	}
	d := egresstest.StartDNS(t, map[string][]string{
		"one.galley.test":  {"192.0.2.7", "2001:db8::7"},
		"many.galley.test": many,
		"none.galley.test": nil,
	})
	d.Silence("silent.galley.test")
	r := resolver(d.Addr)
	ctx := context.Background()

	ips, err := r.LookupIP(ctx, "ip", "ONE.galley.test")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, ip := range ips {
		got = append(got, ip.String())
	}
	slices.Sort(got)
	if want := []string{"192.0.2.7", "2001:db8::7"}; !slices.Equal(got, want) {
		t.Errorf("one.galley.test = %v, want %v", got, want)
	}
	if ips, err := r.LookupIP(ctx, "ip4", "many.galley.test"); err != nil || len(ips) != 40 {
		t.Errorf("many.galley.test = %d addresses, %v; want 40 over TCP", len(ips), err)
	}
	if ips, err := r.LookupIP(ctx, "ip4", "none.galley.test"); err == nil {
		t.Errorf("none.galley.test = %v, want no address", ips)
	}
	var dnsErr *net.DNSError
	if _, err := r.LookupIP(ctx, "ip4", "unknown.galley.test"); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("unknown.galley.test: %v, want not found", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := r.LookupIP(tctx, "ip4", "silent.galley.test"); !errors.As(err, &dnsErr) || !dnsErr.IsTimeout {
		t.Errorf("silent.galley.test: %v, want a timeout", err)
	}
	if d.Queries("one.galley.test") == 0 || d.Queries("never.galley.test") != 0 {
		t.Errorf("query counts: one %d, never %d", d.Queries("one.galley.test"), d.Queries("never.galley.test"))
	}
}
