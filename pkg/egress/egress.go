// Package egress is galley's egress proxy: the one way an agent's traffic
// leaves its sandbox, to the hosts of the house's allowlist and nowhere
// else. It is Stripe's smokescreen (package smokescreen, used as a library)
// behind a small front that authenticates the client and picks its rules.
//
// One Proxy serves in two places. Per worker, the harness serves it on a
// listener in the agent's network namespace (the agent's HTTP_PROXY and
// HTTPS_PROXY name it) and may chain it to an upstream egress proxy
// (WithUpstream). On AWS it is a small service of the stack (RunService,
// `galley-worker egress-proxy`) that serves only the harnesses
// (RequireHarness).
//
// What it enforces, for CONNECT tunnels and plain-HTTP proxy requests:
//
//   - The destination is a host name on the allowlist (HostList), on one of
//     the proxy's ports (443 and 80 unless WithPorts says otherwise). An IP
//     address as the destination is refused: an agent must not reach a
//     listener standing for an arbitrary host by its address.
//   - After resolving, smokescreen refuses every address that is not
//     public: loopback, private (RFC 1918, fc00::/7), link-local (with the
//     instance and ECS metadata addresses 169.254.169.254 and
//     169.254.170.2), CGNAT, IPv6 forms embedding IPv4, and the proxy's own
//     address and port.
//   - Roles. A client without credentials is the agent (RoleAgent): the
//     allowlist, public addresses only. A client presenting
//     Proxy-Authorization Basic with user HarnessUser and the harness's
//     secret is the harness (RoleHarness): the allowlist as the agent has
//     it, and besides its own destinations (WithHarness), which alone may
//     resolve to a private address (on aws-local and in a VPC the
//     harness's API, git host and queue are private addresses). Any other
//     credential is refused with 407, and under RequireHarness so is a
//     client without one.
//   - Each decision (role, host, port, the address resolved, the reason)
//     goes to OnDecision's callback and to the slog logger, never with a
//     credential; smokescreen's own logging is bridged to the same logger.
//   - Budgets (Limits): connections per client address and in all
//     (package connlimit), concurrent CONNECT tunnels, idle tunnels and
//     connections closed, request headers and bodies read within a time,
//     DNS answers awaited within a time.
package egress

import (
	"crypto/sha256"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/sirupsen/logrus"
	"github.com/stripe/goproxy"
	"github.com/stripe/smokescreen/pkg/smokescreen"
	acl "github.com/stripe/smokescreen/pkg/smokescreen/acl/v1"
	"github.com/stripe/smokescreen/pkg/smokescreen/conntrack"
	"github.com/stripe/smokescreen/pkg/smokescreen/metrics"
)

// Role is what a client of the proxy may reach.
type Role string

const (
	// RoleAgent is a client without credentials: the allowlist only.
	RoleAgent Role = "agent"
	// RoleHarness is a client with the harness's credential: the allowlist
	// and the harness's own destinations.
	RoleHarness Role = "harness"
)

// HarnessUser is the user name of the harness's Proxy-Authorization
// (Basic; the password is the harness's secret).
const HarnessUser = "galley-harness"

// MinSecretLen is the shortest harness secret New accepts.
const MinSecretLen = 16

// DefaultPorts are the destination ports allowed unless WithPorts says
// otherwise.
var DefaultPorts = []int{443, 80}

// Decision is one request's answer, as the worker's event log records it.
// Allowed is the policy's answer: a connection that then fails is
// answered 502 (504 when it timed out) and not reported again.
type Decision struct {
	Role    Role   // "" when the client was refused before it had one (a missing or wrong credential)
	Client  string // the client's address (ip:port)
	Method  string // CONNECT, or the plain-HTTP request's method
	Host    string // the destination host as asked, normalized (lower case, no trailing dot)
	Port    int    // the destination port; 0 when none could be read
	Addr    string // the address resolved (ip:port), when there is one
	Allowed bool
	Reason  string
}

// Fields are the decision as an event's short facts (store.Event.Fields):
// role, client, method, host, port, addr (when resolved), allowed, reason.
func (d Decision) Fields() map[string]string {
	f := map[string]string{
		"role": string(d.Role), "client": d.Client, "method": d.Method, "host": d.Host,
		"port": strconv.Itoa(d.Port), "allowed": strconv.FormatBool(d.Allowed), "reason": d.Reason,
	}
	if d.Addr != "" {
		f["addr"] = d.Addr
	}
	return f
}

// Proxy is an egress proxy; Serve runs it on a listener.
type Proxy struct {
	o          options
	log        *slog.Logger
	harnessKey [sha256.Size]byte // SHA-256 of the expected Proxy-Authorization value; zero without the harness role
	hasHarness bool
	upstream   *upstream

	// general serves every role's allowlist with public addresses only;
	// harnessOnly serves the harness's own destinations, which may be
	// private. The front picks one per request (ServeHTTP), and each
	// checks again that the request is its to allow.
	general, harnessOnly *rules

	tunnels  *smokescreen.TunnelLimiter
	tracker  *conntrack.Tracker
	inflight sync.Map // trace id → *exchange
	nextID   atomic.Uint64

	mu      sync.Mutex
	srv     *http.Server
	limited *connlimit.Listener
	closed  bool
}

// rules is one smokescreen configuration and the proxy it builds.
type rules struct {
	cfg     *smokescreen.Config
	handler *goproxy.ProxyHttpServer
}

// New makes a proxy from its options, refusing a bad setting with an error
// of kind galleyerr.Invalid that says which.
func New(opts ...Option) (*Proxy, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.limits = o.limits.withDefaults()
	if o.ports == nil {
		o.ports = slices.Clone(DefaultPorts)
	}
	for _, p := range o.ports {
		if p < 1 || p > 65535 {
			return nil, galleyerr.Errorf(galleyerr.Invalid, "egress port %d is not from 1 to 65535", p)
		}
	}
	p := &Proxy{o: o, log: o.log}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.secret != "" && len(o.secret) < MinSecretLen:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the egress proxy's harness secret must have at least %d characters", MinSecretLen)
	case o.secret == "" && o.harness.Len() > 0:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "the harness's egress destinations need the harness secret")
	case o.secret == "" && o.requireHarness:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "an egress proxy that serves only the harness needs the harness secret")
	}
	if o.secret != "" {
		p.harnessKey = sha256.Sum256([]byte(basicAuth(o.secret)))
		p.hasHarness = true
	}
	if o.upstream != "" {
		up, err := newUpstream(o.upstream, o.upstreamSecret, o.resolver)
		if err != nil {
			return nil, err
		}
		p.upstream = up
	}
	// goproxy sends a CONNECT through the proxy the process's environment
	// names (read on each request), which would skip this proxy's address
	// rules and the upstream's authentication. connectDial refuses such a
	// dial; refuse here too, at start, with a clear reason.
	for _, name := range []string{"HTTPS_PROXY", "https_proxy"} {
		if os.Getenv(name) != "" {
			return nil, galleyerr.Errorf(galleyerr.Invalid, "the egress proxy cannot run in a process whose environment sets %s (its library would route through that proxy); unset it, and give the harness's clients their proxy explicitly (HarnessProxyURL)", name)
		}
	}
	if o.resolver != "" {
		if _, _, err := net.SplitHostPort(o.resolver); err != nil {
			return nil, galleyerr.Errorf(galleyerr.Invalid, "the egress proxy's DNS server %q is not host:port", o.resolver)
		}
	}

	logger := &logrus.Logger{
		Out:       io.Discard,
		Formatter: discardFormatter{},
		Hooks:     logrus.LevelHooks{},
		Level:     logrus.InfoLevel,
	}
	logger.AddHook(logBridge{p})
	noMetrics := metrics.NewNoOpMetricsClient()
	p.tracker = conntrack.NewTracker(o.limits.IdleTimeout, noMetrics, logger, atomic.Value{}, nil)
	p.tunnels = smokescreen.NewTunnelLimiter(o.limits.Tunnels, nil)
	var err error
	if p.general, err = p.newRules(generalDecider{p}, false, logger, noMetrics); err != nil {
		return nil, err
	}
	if p.harnessOnly, err = p.newRules(harnessDecider{p}, true, logger, noMetrics); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Proxy) newRules(decider acl.Decider, allowPrivate bool, logger *logrus.Logger, noMetrics metrics.MetricsClientInterface) (*rules, error) {
	lim := p.o.limits
	cfg := &smokescreen.Config{
		Resolver:        p.resolver(),
		Log:             logger,
		EgressACL:       decider,
		RoleFromRequest: roleFromRequest,
		ConnectTimeout:  lim.ConnectTimeout,
		MetricsClient:   noMetrics,
		Network:         "ip",
		IdleTimeout:     lim.IdleTimeout,
		DNSTimeout:      lim.DNSTimeout,
		// Plain-HTTP requests share a pool of connections to their
		// destinations; it is small.
		TransportMaxIdleConns:        32,
		TransportMaxIdleConnsPerHost: 4,
		// Only the harness's own destinations may be private: RFC 1918
		// and fc00::/7. Loopback, link-local (the metadata services) and
		// CGNAT stay refused for every role.
		UnsafeAllowPrivateRanges:     allowPrivate,
		MaxConcurrentConnectTunnels:  lim.Tunnels,
		TunnelLimiter:                p.tunnels,
		ConnTracker:                  p.tracker,
		LocalIPs:                     localIPs(),
		UpstreamProxySelector:        p.noteResolved,
		RejectResponseHandlerWithCtx: rewriteRejection,
		ProxyDialTimeout:             p.dial,
	}
	if len(p.o.testAllow) > 0 {
		if err := cfg.SetAllowAddresses(p.o.testAllow); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := smokescreen.BuildProxy(cfg)
	h.Logger = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	// Never a proxy from the environment, always verified TLS for a
	// plain-HTTP request to an https URL, and the client's encoding passed
	// through untouched.
	h.Tr.Proxy = nil
	h.Tr.TLSClientConfig = nil
	h.Tr.DisableCompression = true
	h.Tr.MaxResponseHeaderBytes = 1 << 20
	h.KeepAcceptEncoding = true
	h.ConnectDial = nil
	h.ConnectDialContext = connectDial(h)
	return &rules{cfg: cfg, handler: h}, nil
}

// localIPs are the machine's addresses, for smokescreen's refusal of a
// connection to the proxy itself.
func localIPs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips
}
