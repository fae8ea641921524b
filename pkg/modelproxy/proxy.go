// Package modelproxy serves one agent's model API and forwards each call
// to the house's provider (its public API, or the operator's gateway)
// with the house's key, so that the key never reaches the agent: the agent
// holds only a per-worker token that works at this proxy alone and ends
// with the worker (Close).
//
// It counts the worker's tokens from the provider's own answers (never
// from what the CLI says), per model, while forwarding them byte for byte,
// and enforces a budget (tokens and/or dollars) before each call: at the
// cap a call is refused in the provider's error shape, with a message
// naming galley and the cap, and a status the CLIs do not retry.
//
// Two families: Anthropic's Messages API (claude) and OpenAI's Responses
// API (codex). docs/agents.md "The model proxy" describes what is served,
// the counting, the cap and its overshoot.
package modelproxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/galley-run/galley/pkg/prices"
)

// Defaults of the bounds.
const (
	// DefaultMaxBody is a request body's bound: Anthropic's own request
	// size limit for the Messages API (32 MB).
	DefaultMaxBody = 32 << 20
	// DefaultMaxConcurrent bounds the calls in flight; past it a call is
	// refused 429 (claude retries it; codex, which makes one call at a
	// time, does not).
	DefaultMaxConcurrent = 8
	// DefaultHeaderTimeout bounds the wait for an answer's headers (the
	// request's upload included): a non-streaming answer comes whole, and
	// the providers' SDKs give those 10 minutes.
	DefaultHeaderTimeout = 10 * time.Minute
	// DefaultIdleTimeout bounds a silence within an answer's body; a
	// stream has no total time limit (the providers send pings).
	DefaultIdleTimeout = 5 * time.Minute
	// drainLimit bounds what is read of an answer the agent stopped
	// reading, to count its usage.
	drainLimit = 64 << 20
	// peekLimit is how much of a request body is read before forwarding
	// to learn its model (the CLIs send it first).
	peekLimit = 64 << 10
)

// Proxy is one worker's model proxy: an http.Handler.
type Proxy struct {
	family        Family
	upstream      *url.URL
	houseKey      string
	token         []byte
	maxBody       int64
	headerTimeout time.Duration
	idleTimeout   time.Duration
	log           *slog.Logger
	rp            *httputil.ReverseProxy
	meter         *meter
	slots         chan struct{}

	closed atomic.Bool
	ctx    context.Context // ends at Close: in-flight calls end with the worker
	cancel context.CancelFunc

	unauthorized, notFound, capRefused atomic.Int64
}

type settings struct {
	upstream      string
	transport     http.RoundTripper
	budget        Budget
	prices        map[string]prices.Price
	maxBody       int64
	maxConcurrent int
	headerTimeout time.Duration
	idleTimeout   time.Duration
	onUsage       func(Totals)
	onCap         func(Refusal)
	log           *slog.Logger
	from          *Totals
}

// Option sets an optional setting of New.
type Option func(*settings)

// WithUpstream sets the base URL calls are forwarded to (default: the
// family's public API, DefaultUpstream). The agent-facing path is
// appended: /v1/messages for Anthropic; for OpenAI the path after the
// agent's /v1 (so an upstream https://gw.example/openai/v1 gets
// /openai/v1/responses).
func WithUpstream(base string) Option { return func(s *settings) { s.upstream = base } }

// WithTransport sets the transport of upstream calls (the harness routes
// them through its egress proxy). Default: a clone of
// http.DefaultTransport.
func WithTransport(rt http.RoundTripper) Option { return func(s *settings) { s.transport = rt } }

// WithBudget sets the worker's cap.
func WithBudget(b Budget) Option { return func(s *settings) { s.budget = b } }

// WithPrices sets the price table (default: prices.All()).
func WithPrices(t map[string]prices.Price) Option { return func(s *settings) { s.prices = t } }

// WithMaxBody bounds a request body (default DefaultMaxBody).
func WithMaxBody(n int64) Option { return func(s *settings) { s.maxBody = n } }

// WithMaxConcurrent bounds the calls in flight (default
// DefaultMaxConcurrent).
func WithMaxConcurrent(n int) Option { return func(s *settings) { s.maxConcurrent = n } }

// WithTimeouts sets the header timeout and the idle timeout within an
// answer (defaults DefaultHeaderTimeout, DefaultIdleTimeout).
func WithTimeouts(header, idle time.Duration) Option {
	return func(s *settings) { s.headerTimeout, s.idleTimeout = header, idle }
}

// OnUsage is called after each counted call with the running totals (for
// usage reports and the event log). Calls are serialized, in the order
// the totals were reached; a hook must not block for long (it holds up
// the next count): hand the totals off.
func OnUsage(f func(Totals)) Option { return func(s *settings) { s.onUsage = f } }

// OnCapReached is called once, the first time the cap refuses a call
// (the harness escalates to the coordinator).
func OnCapReached(f func(Refusal)) Option { return func(s *settings) { s.onCap = f } }

// CountingFrom starts the count at t, a count an earlier proxy of the same
// worker reached (a parked worker's, resumed: docs/parking.md), so that
// the totals, and the budget's check against them, go on from there. The
// cap's escalation is not made again when t holds a refusal.
func CountingFrom(t Totals) Option { return func(s *settings) { s.from = &t } }

// WithLogger sets the logger (default: discard). Nothing secret is logged.
func WithLogger(l *slog.Logger) Option { return func(s *settings) { s.log = l } }

// minTokenBytes is the least a per-worker token may hold.
const minTokenBytes = 24

// NewToken draws a per-worker token: 32 random bytes, URL-safe base64,
// with a prefix that says what it is.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "galley-model-" + base64.RawURLEncoding.EncodeToString(b), nil
}

// New makes a proxy for one worker: it accepts token alone and forwards
// with houseKey.
func New(f Family, houseKey, token string, opts ...Option) (*Proxy, error) {
	s := settings{maxBody: DefaultMaxBody, maxConcurrent: DefaultMaxConcurrent,
		headerTimeout: DefaultHeaderTimeout, idleTimeout: DefaultIdleTimeout}
	for _, o := range opts {
		o(&s)
	}
	if _, ok := DefaultUpstream[f]; !ok {
		return nil, fmt.Errorf("modelproxy: unknown family %q", f)
	}
	if houseKey == "" {
		return nil, errors.New("modelproxy: no house key")
	}
	if len(token) < minTokenBytes {
		return nil, fmt.Errorf("modelproxy: a per-worker token needs at least %d bytes", minTokenBytes)
	}
	if token == houseKey {
		return nil, errors.New("modelproxy: the per-worker token is the house key")
	}
	if s.upstream == "" {
		s.upstream = DefaultUpstream[f]
	}
	up, err := url.Parse(s.upstream)
	if err != nil || (up.Scheme != "https" && up.Scheme != "http") || up.Host == "" || up.RawQuery != "" || up.Fragment != "" || up.User != nil {
		return nil, fmt.Errorf("modelproxy: the upstream must be an http(s) base URL without query or credentials")
	}
	up.Path = strings.TrimSuffix(up.Path, "/")
	up.RawPath = ""
	if s.maxBody <= 0 || s.maxConcurrent <= 0 || s.headerTimeout <= 0 || s.idleTimeout <= 0 {
		return nil, errors.New("modelproxy: bounds and timeouts must be positive")
	}
	if s.budget.Tokens < 0 || s.budget.MicroUSD < 0 {
		return nil, errors.New("modelproxy: a budget is not negative")
	}
	if s.from != nil {
		if err := s.from.valid(f); err != nil {
			return nil, err
		}
	}
	if s.prices == nil {
		s.prices = prices.All()
	}
	if s.transport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = s.headerTimeout
		tr.MaxIdleConnsPerHost = s.maxConcurrent
		s.transport = tr
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{family: f, upstream: up, houseKey: houseKey, token: []byte(token), maxBody: s.maxBody,
		headerTimeout: s.headerTimeout, idleTimeout: s.idleTimeout, log: s.log,
		meter: newMeter(f, s.prices, s.budget, s.onUsage, s.onCap, s.from), slots: make(chan struct{}, s.maxConcurrent)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      s.transport,
		FlushInterval:  -1, // streams go through as they come
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BufferPool:     copyBuffers{},
	}
	return p, nil
}

// Close ends the token: every later request is refused 401, and calls in
// flight are cut. The totals stay readable.
func (p *Proxy) Close() error {
	p.closed.Store(true)
	p.cancel()
	return nil
}

// Totals returns the worker's usage so far.
func (p *Proxy) Totals() Totals { return p.meter.Totals() }

// Family is the API the proxy serves.
func (p *Proxy) Family() Family { return p.family }

func (p *Proxy) authorized(r *http.Request) bool {
	got := p.family.agentToken(r.Header)
	ok := subtle.ConstantTimeCompare([]byte(got), p.token) == 1
	return ok && !p.closed.Load()
}

// callKey carries a call's state from ServeHTTP to the reverse proxy's
// hooks.
type callKey struct{}

// call is one forwarded request.
type call struct {
	route    route
	model    string // the request's, when read
	watchdog *time.Timer
	agent    *http.ResponseController
}

// touch restarts the idle timer (bytes arrived from the provider) and
// gives the agent as long to take them: an agent that stops reading holds
// its call no longer than a silent provider would.
func (c *call) touch(d time.Duration) {
	c.watchdog.Reset(d)
	_ = c.agent.SetWriteDeadline(time.Now().Add(d))
}

// logFirst is how many of each kind of refusal are logged: the agent
// chooses how many it makes.
const logFirst = 8

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := p.family
	agent := http.NewResponseController(w)
	// The request, body included, within the header timeout (a body
	// trickled in holds a slot no longer).
	_ = agent.SetReadDeadline(time.Now().Add(p.headerTimeout))
	_ = agent.SetWriteDeadline(time.Time{})
	defer func() {
		// A kept-alive connection's next request starts without them.
		_ = agent.SetReadDeadline(time.Time{})
		_ = agent.SetWriteDeadline(time.Time{})
	}()
	if !p.authorized(r) {
		if p.unauthorized.Add(1) <= logFirst {
			p.log.Warn("model proxy: a request without the worker's token refused", "method", r.Method, "path", r.URL.Path)
		}
		msg := "invalid x-api-key"
		if f == OpenAI {
			msg = "Incorrect API key provided."
		}
		f.writeError(w, http.StatusUnauthorized, errAuth, msg)
		return
	}
	rt, ok := f.routeOf(r)
	if !ok {
		if p.notFound.Add(1) <= logFirst {
			p.log.Info("model proxy: no such endpoint", "method", r.Method, "path", r.URL.Path, "websocket", isWebSocket(r))
		}
		f.writeError(w, http.StatusNotFound, errNotFound, "galley's model proxy does not serve "+r.Method+" "+r.URL.Path)
		return
	}
	if r.ContentLength > p.maxBody {
		f.writeError(w, http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("the request body is over %d bytes", p.maxBody))
		return
	}
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		f.writeError(w, http.StatusTooManyRequests, errBusy, "galley's model proxy has too many calls in flight for this worker")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, p.maxBody)
	c := &call{route: rt, agent: agent}
	if rt.billed {
		model, body, err := peekModel(r.Body)
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				f.writeError(w, http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("the request body is over %d bytes", p.maxBody))
				return
			}
			f.writeError(w, http.StatusBadRequest, errBadBody, "the request body could not be read")
			return
		}
		r.Body, c.model = body, model
		if why := p.meter.admit(model); why != "" {
			if p.capRefused.Add(1) <= logFirst {
				p.log.Warn("model proxy: a call refused at the cap", "model", model, "why", why)
			}
			f.writeError(w, f.capStatus(), errBudget, why)
			return
		}
	}
	// The call outlives the agent's connection (an answer the agent stops
	// reading is still read for its usage) but not the worker (Close),
	// nor a silence past the timeouts.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()
	defer cancel()
	c.watchdog = time.AfterFunc(p.headerTimeout, cancel)
	defer c.watchdog.Stop()
	ctx = context.WithValue(ctx, callKey{}, c)
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	c := pr.In.Context().Value(callKey{}).(*call)
	pr.Out.URL.Path, pr.Out.URL.RawPath = c.route.upstreamPath, ""
	pr.SetURL(p.upstream)
	p.family.setHouseKey(pr.Out.Header, p.houseKey)
	// The transport asks for (and undoes) its own compression: the proxy
	// reads the answer for its usage.
	pr.Out.Header.Del("Accept-Encoding")
}

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		p.family.writeError(w, http.StatusRequestEntityTooLarge, errTooLarge, fmt.Sprintf("the request body is over %d bytes", p.maxBody))
		return
	}
	var ne net.Error
	status, msg := http.StatusBadGateway, "galley's model proxy could not reach the provider"
	if errors.Is(err, context.Canceled) || errors.As(err, &ne) && ne.Timeout() {
		status, msg = http.StatusGatewayTimeout, "galley's model proxy ended the call: the provider did not answer in time, or the worker ended"
	}
	p.log.Warn("model proxy: upstream call failed", "path", r.URL.Path, "err", err)
	p.family.writeError(w, status, errUpstream, msg)
}

// peekModel reads the start of a request body (up to peekLimit, or until
// its top-level model is read) and returns the model and a body that
// still holds every byte.
func peekModel(body io.ReadCloser) (string, io.ReadCloser, error) {
	s := newFieldScanner("model")
	var head bytes.Buffer
	buf := make([]byte, 4096)
	for head.Len() < peekLimit && s.value("model") == nil {
		n, err := body.Read(buf[:min(len(buf), peekLimit-head.Len())])
		head.Write(buf[:n])
		_, _ = s.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, err
		}
	}
	var model string
	if raw := s.value("model"); raw != nil {
		_ = jsonString(raw, &model)
	}
	return model, struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head.Bytes()), body), body}, nil
}

// copyBuffers lends the reverse proxy its copy buffers, rather than one
// allocated per call.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
