package egress

import (
	"log/slog"
	"slices"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
)

// Limits bound what one Proxy holds for its clients. Zero values take the
// defaults (DefaultLimits).
type Limits struct {
	// Conns bounds the connections held per client address and in all
	// (package connlimit: at a bound the oldest idle connection is closed
	// for the new one, or the new one is closed when all are busy; a
	// CONNECT tunnel counts as busy). Total is at most a quarter of the
	// open-file limit: each connection may hold another to its
	// destination.
	Conns connlimit.Limits
	// Tunnels bounds the concurrent CONNECT tunnels (at most Conns.Total);
	// one more is answered 429.
	Tunnels int
	// IdleTimeout closes a tunnel, a kept-alive connection or a response
	// to a client that stopped reading, after this long without traffic.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the time to send a request's header, and
	// BodyTimeout the time to send a plain-HTTP request whole.
	ReadHeaderTimeout time.Duration
	BodyTimeout       time.Duration
	// DNSTimeout bounds a resolution, ConnectTimeout a connection to the
	// destination (or the upstream proxy).
	DNSTimeout     time.Duration
	ConnectTimeout time.Duration
}

// DefaultLimits are a per-worker proxy's: one agent, a few hundred
// connections at most.
var DefaultLimits = Limits{
	Conns:             connlimit.Limits{PerPeer: 256, Total: 512},
	Tunnels:           256,
	IdleTimeout:       5 * time.Minute,
	ReadHeaderTimeout: 10 * time.Second,
	BodyTimeout:       10 * time.Minute,
	DNSTimeout:        5 * time.Second,
	ConnectTimeout:    10 * time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.Conns.PerPeer <= 0 && l.Conns.Total <= 0 {
		l.Conns = d.Conns
	}
	pick := func(v *time.Duration, def time.Duration) {
		if *v <= 0 {
			*v = def
		}
	}
	if l.Tunnels <= 0 {
		l.Tunnels = d.Tunnels
	}
	pick(&l.IdleTimeout, d.IdleTimeout)
	pick(&l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	pick(&l.BodyTimeout, d.BodyTimeout)
	pick(&l.DNSTimeout, d.DNSTimeout)
	pick(&l.ConnectTimeout, d.ConnectTimeout)
	// Each client connection may hold one to its destination besides:
	// both must fit in half the open-file limit (connlimit keeps a plain
	// server's connections within half), so the clients' at most a
	// quarter of it.
	if soft, _, err := connlimit.NoFile(); err == nil && soft >= 64 {
		quarter := int(min(soft/4, 1<<20))
		if l.Conns.Total <= 0 {
			l.Conns.Total = connlimit.DefaultTotal
		}
		l.Conns.Total = min(l.Conns.Total, quarter)
	}
	if l.Conns.Total > 0 {
		l.Tunnels = min(l.Tunnels, l.Conns.Total)
	}
	return l
}

// Option is a setting of New.
type Option func(*options)

type options struct {
	allow          HostList
	harness        HostList
	secret         string
	requireHarness bool
	upstream       string
	upstreamSecret string
	resolver       string
	ports          []int
	limits         Limits
	onDecision     func(Decision)
	log            *slog.Logger
	// testAllow are addresses (ip:port) the address rules let through
	// although they are not public: set only by the package's tests
	// (export_test.go), whose servers listen on loopback.
	testAllow []string
}

// WithAllowlist sets the hosts every client may reach (the agent's
// allowlist). Without it, the agent reaches nothing.
func WithAllowlist(l HostList) Option { return func(o *options) { o.allow = l } }

// WithHarness enables the harness role: a client authenticating with
// secret (user HarnessUser) may also reach destinations, which alone may
// resolve to a private address.
func WithHarness(secret string, destinations HostList) Option {
	return func(o *options) { o.secret, o.harness = secret, destinations }
}

// RequireHarness refuses, with 407, every client that is not the harness:
// the service mode, where an agent could reach the proxy directly.
func RequireHarness() Option { return func(o *options) { o.requireHarness = true } }

// WithUpstream sends everything the proxy allows on through the egress
// proxy at upstream (http://host:port), authenticated as the harness with
// secret; the upstream applies its own rules again.
func WithUpstream(upstream, secret string) Option {
	return func(o *options) { o.upstream, o.upstreamSecret = upstream, secret }
}

// WithResolver makes the proxy resolve names through the DNS server at
// addr (host:port, UDP with TCP for long answers) instead of the system's
// resolver.
func WithResolver(addr string) Option { return func(o *options) { o.resolver = addr } }

// WithPorts sets the destination ports allowed (DefaultPorts otherwise).
func WithPorts(ports ...int) Option { return func(o *options) { o.ports = slices.Clone(ports) } }

// WithLimits sets the proxy's budgets; zero fields keep their defaults.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// OnDecision calls f with each decision, on the request's goroutine before
// the client has its answer; f is called concurrently and must not block
// for long.
func OnDecision(f func(Decision)) Option { return func(o *options) { o.onDecision = f } }

// WithLogger sets where the proxy logs (each decision, and smokescreen's
// and goproxy's lines). Without it nothing is logged.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }
