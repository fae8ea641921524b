package egress

import "github.com/galley-run/galley/pkg/connlimit"

// AllowTestAddress lets the address rules through addr (ip:port), which
// they refuse otherwise: the tests' servers listen on loopback, which
// smokescreen refuses, and a public or private address of the machine is
// not there on every machine. It exists only in the package's tests: no
// option of the production code reaches the field.
func AllowTestAddress(addr string) Option {
	return func(o *options) { o.testAllow = append(o.testAllow, addr) }
}

// ConnStats are the proxy's connection counts (package connlimit).
func (p *Proxy) ConnStats() connlimit.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.limited == nil {
		return connlimit.Stats{}
	}
	return p.limited.Stats()
}

// ActiveTunnels is the number of CONNECT tunnels open.
func (p *Proxy) ActiveTunnels() int64 { return p.tunnels.ActiveCount() }
