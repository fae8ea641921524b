package api

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/workerapi"
)

// MaxBody bounds every request body. The largest legitimate body is a
// launch with a 64 KiB brief, JSON-escaped.
const MaxBody = 1 << 20

// Effects performs and looks up effects.
type Effects interface {
	Apply(ctx context.Context, call protocol.EffectCall, arrived time.Time) (json.RawMessage, error)
	Lookup(ctx context.Context, call protocol.EffectCall) (protocol.LookupAnswer, json.RawMessage, error)
}

// Reads answers the descriptor and the worker and resource reads.
type Reads interface {
	Descriptor() protocol.Descriptor
	Observe(ctx context.Context, r protocol.Resource) (protocol.Observation, error)
	Inventory(ctx context.Context) (protocol.Inventory, error)
	Usage(ctx context.Context, r protocol.Resource) (protocol.UsageAnswer, error)
}

// Mailbox serves the coordinator mailbox.
type Mailbox interface {
	Next(ctx context.Context, run, coordinator string) (protocol.MailboxAnswer, error)
	Acknowledge(ctx context.Context, run, coordinator, batch string) (protocol.MailboxAnswer, error)
	Await(ctx context.Context, run, coordinator string, wait time.Duration) (protocol.MailboxAnswer, error)
	Adopt(ctx context.Context, run, coordinator string) (fenced bool, err error)
}

// Workers serves the harness's calls.
type Workers interface {
	// AuthenticateWorkerCall answers the worker a call's credential names,
	// if it is that worker's current credential, the worker was not
	// released, and the call's DPoP proof is fresh and signed by the key
	// the credential is bound to.
	AuthenticateWorkerCall(ctx context.Context, token string, proof dpop.Request) (string, error)
	WorkerSelf(ctx context.Context, handle string) (workerapi.Self, error)
	WorkerReady(ctx context.Context, handle, evidence string) error
	WorkerPost(ctx context.Context, handle string, req workerapi.PostRequest) (workerapi.PostAnswer, error)
	WorkerInbox(ctx context.Context, handle string, after int64, wait time.Duration) (workerapi.InboxAnswer, error)
	WorkerWake(ctx context.Context, handle string) (workerapi.WakeGrant, error)
	WorkerWait(ctx context.Context, handle string, after int64, wait time.Duration) error
	WorkerUsage(ctx context.Context, handle string, report protocol.UsageReport) error
	// WorkerExitReport is the harness's exit report, taken once.
	WorkerExitReport(ctx context.Context, handle string, code int, reason string) error
	ExchangeBootstrap(ctx context.Context, handle, code, claim string, proof dpop.Request) (string, error)
	// WorkerEvents records what the harness saw in the worker's event log.
	WorkerEvents(ctx context.Context, handle string, evs []workerapi.HarnessEvent) error
	// WorkerPark records that the worker's harness parked it
	// (docs/parking.md); the same parking again answers the same.
	WorkerPark(ctx context.Context, handle string, req workerapi.ParkRequest) error
}

// Authenticator checks kitchn's bearer token.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) bool
}

// StaticToken authenticates one token in constant time.
type StaticToken []byte

func (t StaticToken) Authenticate(_ context.Context, token string) bool {
	return len(t) > 0 && subtle.ConstantTimeCompare(t, []byte(token)) == 1
}

// Handler serves the route groups it was given. Every /v1/ request is
// authenticated before it is routed: without kitchn's token it is 401
// whatever its path, and only with it does an unserved /v1/ path answer
// 404. Other paths (the worker routes) are routed at once and check their
// own credentials.
type Handler struct {
	mux       *http.ServeMux
	auth      Authenticator
	log       *slog.Logger
	now       func() time.Time
	arrival   func(*http.Request) time.Time
	requestID func(*http.Request) string
}

// Option configures a Handler.
type Option func(*Handler)

// WithAuthenticator sets the bearer-token check for /v1/ paths. Without
// one, every /v1/ request is refused.
func WithAuthenticator(a Authenticator) Option { return func(h *Handler) { h.auth = a } }

// WithLogger sets the request log.
func WithLogger(l *slog.Logger) Option { return func(h *Handler) { h.log = l } }

// WithClock sets the clock that stamps arrivals.
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithArrival takes a request's arrival time from elsewhere, such as API
// Gateway's request time, one clock for all function instances.
func WithArrival(f func(*http.Request) time.Time) Option { return func(h *Handler) { h.arrival = f } }

// WithRequestID names requests in logs, such as by the Lambda request id.
func WithRequestID(f func(*http.Request) string) Option { return func(h *Handler) { h.requestID = f } }

// WithEffects serves POST /v1/effects and /v1/effects/lookup.
func WithEffects(e Effects) Option {
	return func(h *Handler) {
		h.kitchnRoute(contract.RouteEffects, h.effects(e))
		h.kitchnRoute(contract.RouteLookup, h.lookup(e))
	}
}

// WithReads serves the descriptor, observe, inventory and usage.
func WithReads(r Reads) Option {
	return func(h *Handler) {
		h.kitchnRoute(contract.RouteDescriptor, h.descriptor(r))
		h.kitchnRoute(contract.RouteObserve, h.observe(r))
		h.kitchnRoute(contract.RouteInventory, h.inventory(r))
		h.kitchnRoute(contract.RouteUsage, h.usage(r))
	}
}

// WithMailbox serves the deliveries and adopt routes.
func WithMailbox(m Mailbox) Option {
	return func(h *Handler) {
		h.kitchnRoute(contract.RouteNext, h.mailbox(m, "next"))
		h.kitchnRoute(contract.RouteAcknowledge, h.mailbox(m, "acknowledge"))
		h.kitchnRoute(contract.RouteAwait, h.mailbox(m, "await"))
		h.kitchnRoute(contract.RouteAdopt, h.adopt(m))
	}
}

// WithWorkers serves the harness's /worker/v1/ routes.
func WithWorkers(w Workers) Option {
	return func(h *Handler) { h.workerRoutes(w) }
}

// WithService serves every route from one service.
func WithService(s *service.Service) Option {
	return func(h *Handler) {
		for _, o := range []Option{WithEffects(s), WithReads(s), WithMailbox(s), WithWorkers(s)} {
			o(h)
		}
	}
}

// New returns a Handler.
func New(opts ...Option) *Handler {
	h := &Handler{mux: http.NewServeMux(), log: slog.Default(), now: time.Now}
	// An authenticated request for a /v1/ path no group serves, or with a
	// method its path is not served with, is 404: what API Gateway's
	// catch-all route answers through a function that serves other routes,
	// so that the shapes agree. "/v1" has its own pattern, or the mux
	// would redirect it to "/v1/".
	h.mux.HandleFunc(contract.KitchnPrefix, noRoute)
	h.mux.HandleFunc(kitchnRoot, noRoute)
	for _, o := range opts {
		o(h)
	}
	if h.arrival == nil {
		h.arrival = func(*http.Request) time.Time { return h.now() }
	}
	if h.requestID == nil {
		h.requestID = func(r *http.Request) string { return newRequestID() }
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	start := time.Now()
	ctx := withRequestLog(r.Context(), &requestLog{})
	r = r.WithContext(ctx)
	// kitchn's token is checked before anything else is done with a /v1/
	// request, routing included: the protocol's 401 or 403 "before doing
	// anything else", and no answer tells a caller without the token which
	// paths exist.
	if !isKitchnPath(r.URL.Path) || h.authenticate(rec, r) {
		h.mux.ServeHTTP(rec, r)
	}
	rl := requestLogFrom(ctx)
	// Typed attributes in a fixed array: the request line is written for
	// every call, so it should cost no boxing and one allocation at most.
	var buf [8]slog.Attr
	attrs := append(buf[:0], slog.String("id", h.requestID(r)), slog.String("method", r.Method),
		slog.String("path", r.URL.Path), slog.Int("status", rec.status),
		slog.Float64("ms", float64(time.Since(start).Microseconds())/1000))
	if rl.key != "" {
		attrs = append(attrs, slog.String("key", rl.key))
	}
	if rl.answer != "" {
		attrs = append(attrs, slog.String("answer", rl.answer))
	}
	if rl.err != nil {
		attrs = append(attrs, slog.String("err", rl.err.Error()))
	}
	level := slog.LevelInfo
	if rec.status >= 500 {
		level = slog.LevelError
	}
	h.log.LogAttrs(ctx, level, "request", attrs...)
}

// kitchnRoute serves one of kitchn's routes. ServeHTTP has authenticated
// the request by the time it is routed here, which holds only for paths
// under /v1/: a route elsewhere would be served without kitchn's token.
func (h *Handler) kitchnRoute(r contract.Route, fn http.HandlerFunc) {
	if !strings.HasPrefix(r.Path, contract.KitchnPrefix) {
		panic("api: kitchn's route " + r.Pattern() + " is not under " + contract.KitchnPrefix + ", where requests are authenticated")
	}
	h.mux.HandleFunc(r.Pattern(), fn)
}

// kitchnRoot is the prefix of kitchn's routes without its slash.
var kitchnRoot = strings.TrimSuffix(contract.KitchnPrefix, "/")

// isKitchnPath reports whether p is a /v1/ path, or one that cleans to it
// ("//v1/descriptor", "/worker/../v1/descriptor"): the mux would answer
// those with a redirect, which is an answer too.
func isKitchnPath(p string) bool {
	under := func(p string) bool { return p == kitchnRoot || strings.HasPrefix(p, contract.KitchnPrefix) }
	return under(p) || under(path.Clean("/"+p))
}

// authenticate checks kitchn's bearer token; when it is missing or wrong,
// it answers 401 and reports false. Both cases are 401 (RFC 6750: a
// token that is invalid, not one that lacks a permission), with a Bearer
// challenge, whatever the path.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) bool {
	token, ok := bearer(r)
	if ok && h.auth != nil && h.auth.Authenticate(r.Context(), token) {
		return true
	}
	msg := "token refused"
	if !ok {
		msg = "missing bearer token"
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="galley"`)
	writeJSON(w, r, http.StatusUnauthorized, errorJSON{Error: msg})
	return false
}

// noRoute answers an authenticated request no route serves.
func noRoute(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusNotFound, errorJSON{Error: "no such route"})
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	const p = "Bearer "
	if len(v) <= len(p) || !strings.EqualFold(v[:len(p)], p) {
		return "", false
	}
	return strings.TrimSpace(v[len(p):]), true
}

// readBody reads a bounded body. A declared length over the bound is
// refused before reading anything.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBody {
		return nil, galleyerr.Errorf(galleyerr.TooLarge, "body exceeds %d bytes", MaxBody)
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return nil, galleyerr.E(galleyerr.Malformed, "could not read body", err)
	}
	if len(b) > MaxBody {
		return nil, galleyerr.Errorf(galleyerr.TooLarge, "body exceeds %d bytes", MaxBody)
	}
	return b, nil
}

// fail answers err through the route's mapping and logs it.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error, answer func(error) (int, any)) {
	status, body := answer(err)
	rl := requestLogFrom(r.Context())
	rl.err = err
	if o, ok := body.(protocol.EffectOutcome); ok {
		rl.answer = o.Status + " " + o.Reason
	}
	if e := galleyerr.As(err); status == http.StatusTooManyRequests && e != nil && e.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfterSeconds))
	}
	writeJSON(w, r, status, body)
}
