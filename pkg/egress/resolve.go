package egress

import (
	"context"
	"net"

	"github.com/sirupsen/logrus"
	"github.com/stripe/smokescreen/pkg/smokescreen"
)

// resolvedField and reasonField carry an allowed decision's address and
// reason from UpstreamProxySelector, which sees them, to the decision's
// log entry. (For a plain-HTTP request smokescreen logs the decision after
// the response, and a dial that resolved again has overwritten the
// reason by then.)
const (
	resolvedField = "galley_resolved_addr"
	reasonField   = "galley_reason"
)

// noteResolved is smokescreen's UpstreamProxySelector, called once a
// request is allowed and resolved: it records the address (none when
// chained: the upstream resolves) and the reason, and selects no upstream
// (chaining dials through ProxyDialTimeout, which keeps smokescreen's
// tunnel accounting and idle timeouts).
func (p *Proxy) noteResolved(sctx *smokescreen.SmokescreenContext, d *smokescreen.ACLDecision) string {
	f := logrus.Fields{reasonField: d.Reason}
	if d.ResolvedAddr != nil && p.upstream == nil {
		f[resolvedField] = d.ResolvedAddr.String()
	}
	sctx.Logger = sctx.Logger.WithFields(f)
	return ""
}

// resolver is what smokescreen resolves destinations with before its
// address checks: the configured DNS server or the system's; but a proxy
// chained to an upstream resolves nothing itself. It decides by name (the
// allowlist) and asks the upstream for the name, which resolves it and
// refuses a private or loopback address there, where the connection
// leaves from: a worker task's own resolver may have no answer for a name
// the egress service can reach (aws-local's containers have no resolver
// at all), and its answer would not be where the connection goes anyway.
func (p *Proxy) resolver() smokescreen.Resolver {
	if p.upstream != nil {
		return resolvedUpstream{}
	}
	return newResolver(p.o.resolver)
}

// resolvedUpstream answers every name with one public placeholder address,
// which passes smokescreen's address checks and is never dialed: the
// chained dial asks the upstream for the name (upstream.dial).
type resolvedUpstream struct{}

// upstreamPlaceholder is a global unicast address of the IETF's protocol
// assignments block (192.0.0.0/24), which no host answers.
var upstreamPlaceholder = net.IPv4(192, 0, 0, 9)

func (resolvedUpstream) LookupPort(ctx context.Context, network, service string) (int, error) {
	return net.DefaultResolver.LookupPort(ctx, network, service)
}

func (resolvedUpstream) LookupIP(context.Context, string, string) ([]net.IP, error) {
	return []net.IP{upstreamPlaceholder}, nil
}

func newResolver(addr string) *net.Resolver {
	if addr == "" {
		return &net.Resolver{}
	}
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
}
