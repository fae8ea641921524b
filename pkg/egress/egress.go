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
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/sirupsen/logrus"
	"github.com/stripe/goproxy"
	"github.com/stripe/smokescreen/pkg/smokescreen"
	acl "github.com/stripe/smokescreen/pkg/smokescreen/acl/v1"
	"github.com/stripe/smokescreen/pkg/smokescreen/conntrack"
	"github.com/stripe/smokescreen/pkg/smokescreen/hostport"
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

// connectDial dials a CONNECT tunnel's destination through smokescreen's
// dialer, and only the destination that was decided on: goproxy would
// otherwise dial a proxy named in the process's environment.
func connectDial(h *goproxy.ProxyHttpServer) func(*goproxy.ProxyCtx, string, string) (net.Conn, error) {
	return func(pctx *goproxy.ProxyCtx, network, addr string) (net.Conn, error) {
		sctx, _ := pctx.UserData.(*smokescreen.SmokescreenContext)
		if sctx == nil || sctx.Decision == nil || sctx.Decision.OutboundHost != addr {
			return nil, fmt.Errorf("refused to dial %s: not the destination decided on (is HTTPS_PROXY set in the proxy's environment?)", addr)
		}
		ctx := context.WithValue(context.Background(), goproxy.ProxyContextKey, pctx)
		return h.Tr.DialContext(ctx, network, addr)
	}
}

// dial connects to the destination smokescreen decided on and resolved,
// or through the upstream when chained.
func (p *Proxy) dial(ctx context.Context, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	if p.upstream != nil {
		c, err = p.upstream.dial(ctx, network, addr, timeout)
	} else {
		d := net.Dialer{Timeout: timeout}
		c, err = d.DialContext(ctx, network, addr)
	}
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return nil, &dialFailure{err.Error()}
	}
	return c, err
}

// dialFailure is a connection that failed other than by timing out. It is
// not a net.Error on purpose: smokescreen v0.1.0 answers such a net.Error
// with the text "<nil>" (a shadowed variable in rejectResponse), and an
// error of its own with its text, 500, which rewriteRejection makes 502.
type dialFailure struct{ msg string }

func (e *dialFailure) Error() string { return dialFailurePrefix + e.msg }

const (
	dialFailurePrefix = "could not connect: "
	unexpectedPrefix  = "An unexpected error occurred: " // smokescreen's text for an error it does not know
)

// rewriteRejection is smokescreen's RejectResponseHandlerWithCtx: a refusal
// is 403 (smokescreen answers 407, which means "credentials needed" here),
// and a failed connection 502.
func rewriteRejection(_ *smokescreen.SmokescreenContext, resp *http.Response) {
	switch msg := resp.Header.Get("X-Smokescreen-Error"); {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		resp.StatusCode, resp.Status = http.StatusForbidden, "403 Forbidden"
	case resp.StatusCode == http.StatusInternalServerError && strings.HasPrefix(msg, unexpectedPrefix+dialFailurePrefix):
		msg = strings.TrimPrefix(msg, unexpectedPrefix)
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header.Set("X-Smokescreen-Error", msg)
		resp.Body = io.NopCloser(strings.NewReader(msg + "\n"))
		resp.ContentLength = int64(len(msg) + 1)
	}
}

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

func basicAuth(secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(HarnessUser+":"+secret))
}

// exchange is one request's facts, kept while the front serves it so that
// the decision smokescreen logs can be told apart and completed.
type exchange struct {
	role     Role
	client   string
	method   string
	host     string
	port     int
	reported atomic.Bool
}

type exchangeKey struct{}

// traceHeader is smokescreen's trace id header, which it copies into each
// log entry of the request: the front sets it to find the exchange.
const traceHeader = "X-Smokescreen-Trace-ID"

func roleFromRequest(r *http.Request) (string, error) {
	if ex, ok := r.Context().Value(exchangeKey{}).(*exchange); ok {
		return string(ex.role), nil
	}
	return "", smokescreen.MissingRoleError("no role for this request")
}

// ServeHTTP is the front: it answers health checks, authenticates the
// client, and hands the request to the rules of its role and destination.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ex := &exchange{client: r.RemoteAddr, method: r.Method}
	if r.Method != http.MethodConnect && !r.URL.IsAbs() {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			io.WriteString(w, "ok\n")
			return
		}
		p.report(ex, Decision{Reason: "not a proxy request"})
		http.Error(w, "this is an egress proxy: send CONNECT host:port or an absolute URL", http.StatusBadRequest)
		return
	}
	ex.host, ex.port = target(r)
	role, refusal := p.authenticate(r)
	if refusal != "" {
		p.report(ex, Decision{Reason: refusal})
		w.Header().Set("Proxy-Authenticate", `Basic realm="galley egress"`)
		w.Header().Set("Connection", "close")
		http.Error(w, refusal, http.StatusProxyAuthRequired)
		return
	}
	ex.role = role
	// The credential goes no further, and a client may not pick the
	// proxy's upstream.
	r.Header.Del("Proxy-Authorization")
	r.Header.Del(goproxy.PerRequestHTTPSProxyHeaderKey)
	id := strconv.FormatUint(p.nextID.Add(1), 36)
	r.Header.Set(traceHeader, id)
	p.inflight.Store(id, ex)
	defer p.inflight.Delete(id)

	rs := p.general
	if role == RoleHarness {
		if _, ok := p.o.harness.match(ex.host, ex.port, p.o.ports); ok {
			rs = p.harnessOnly
		}
	}
	rs.handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
	if !ex.reported.Load() {
		p.report(ex, Decision{Role: role, Reason: "the proxy reached no decision"})
	}
}

// target is the request's destination as smokescreen reads it.
func target(r *http.Request) (string, int) {
	var hp hostport.HostPort
	var err error
	if r.Method == http.MethodConnect {
		hp, err = hostport.New(r.Host, false)
	} else {
		hp, err = hostport.NewWithScheme(r.Host, r.URL.Scheme, false)
	}
	if err != nil {
		h := r.Host
		if len(h) > 256 {
			h = h[:256]
		}
		return h, 0
	}
	return normalizeHost(hp.Host), hp.Port
}

// authenticate returns the client's role, or why it is refused.
func (p *Proxy) authenticate(r *http.Request) (Role, string) {
	creds := r.Header.Values("Proxy-Authorization")
	switch {
	case len(creds) == 0 && p.o.requireHarness:
		return "", "this egress proxy serves only the harness: credentials required"
	case len(creds) == 0:
		return RoleAgent, ""
	case !p.hasHarness:
		return "", "this egress proxy takes no credentials"
	case len(creds) > 1:
		return "", "more than one Proxy-Authorization header"
	}
	// Compare digests, in constant time: neither the secret nor its
	// length shows in the time taken.
	got := sha256.Sum256([]byte(creds[0]))
	if subtle.ConstantTimeCompare(got[:], p.harnessKey[:]) != 1 {
		return "", "wrong egress proxy credentials"
	}
	return RoleHarness, ""
}

// report completes d with the exchange's facts and hands it on, once.
func (p *Proxy) report(ex *exchange, d Decision) {
	if ex.reported.Swap(true) {
		return
	}
	d.Client, d.Method, d.Host, d.Port = ex.client, ex.method, ex.host, ex.port
	if d.Role == "" {
		d.Role = ex.role
	}
	if p.o.onDecision != nil {
		p.o.onDecision(d)
	}
	p.log.Info("egress decision", "allowed", d.Allowed, "role", string(d.Role), "host", d.Host, "port", d.Port,
		"addr", d.Addr, "reason", d.Reason, "method", d.Method, "client", d.Client)
}

// Serve serves the proxy on ln until Shutdown or Close, under the
// connection bounds of Limits.Conns. A Proxy serves one listener.
func (p *Proxy) Serve(ln net.Listener) error {
	lim := p.o.limits
	limited := connlimit.Wrap(ln, lim.Conns, p.log)
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.BodyTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	limited.Install(srv)
	p.mu.Lock()
	switch {
	case p.closed:
		p.mu.Unlock()
		ln.Close()
		return nil
	case p.srv != nil:
		p.mu.Unlock()
		return errors.New("egress: the proxy is already serving")
	}
	p.srv, p.limited = srv, limited
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		// smokescreen refuses a destination that is this proxy itself.
		p.general.cfg.Port, p.harnessOnly.cfg.Port = uint16(a.Port), uint16(a.Port)
	}
	p.mu.Unlock()
	err := srv.Serve(writeIdleListener{Listener: limited, idle: lim.IdleTimeout})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, waits for the requests in progress until ctx
// ends, and closes every tunnel.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	srv := p.srv
	p.closed = true
	p.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	p.closeTunnels()
	return err
}

// Close closes the listener, every connection and every tunnel at once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	srv := p.srv
	p.closed = true
	p.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close()
	}
	p.closeTunnels()
	return err
}

// closeTunnels closes the destination side of each tunnel; goproxy then
// closes the client's side.
func (p *Proxy) closeTunnels() {
	p.tracker.Range(func(k, _ any) bool {
		if ic, ok := k.(*conntrack.InstrumentedConn); ok {
			ic.Close()
		}
		return true
	})
}

// writeIdleListener gives each connection a write deadline of idle from
// every write: a client that stops reading a plain-HTTP response cannot
// hold its connection for longer (tunnels have smokescreen's idle
// timeout, which bounds reads too).
type writeIdleListener struct {
	net.Listener
	idle time.Duration
}

func (l writeIdleListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeIdleConn{Conn: c, idle: l.idle}, nil
}

type writeIdleConn struct {
	net.Conn
	idle time.Duration
}

func (c *writeIdleConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// NetConn is the connection beneath, for connlimit.
func (c *writeIdleConn) NetConn() net.Conn { return c.Conn }

// portList is ports for a reason text.
func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}
