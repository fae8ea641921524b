package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
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

func (h *Handler) effects(e Effects) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := h.arrival(r)
		rl := requestLogFrom(r.Context())
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, effectAnswer)
			return
		}
		call, err := protocol.DecodeEffectCall(body)
		if err == nil {
			rl.key = call.Request.Key
			if hk := r.Header.Get("Idempotency-Key"); hk != "" && hk != call.Request.Key {
				err = galleyerr.Errorf(galleyerr.Invalid, "Idempotency-Key header differs from request.key")
			}
		}
		var receipt json.RawMessage
		if err == nil {
			receipt, err = e.Apply(r.Context(), call, arrived)
		}
		if err != nil {
			h.fail(w, r, err, effectAnswer)
			return
		}
		rl.answer = protocol.StatusApplied
		writeRaw(w, http.StatusOK, appliedBody(receipt))
	}
}

func (h *Handler) lookup(e Effects) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeEffectCall(body)
		if galleyerr.Is(galleyerr.Malformed, err) {
			h.fail(w, r, err, readAnswer)
			return
		}
		rl := requestLogFrom(r.Context())
		if err != nil {
			// galley never applies a request it refuses on its face, so
			// its key was not applied by it and never will be.
			rl.answer = protocol.StatusAbsent
			writeJSON(w, r, http.StatusOK, protocol.LookupAnswer{Status: protocol.StatusAbsent})
			return
		}
		rl.key = call.Request.Key
		ans, receipt, err := e.Lookup(r.Context(), call)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		rl.answer = ans.Status
		if ans.Status == protocol.StatusApplied {
			writeRaw(w, http.StatusOK, appliedBody(receipt))
			return
		}
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) descriptor(rd Reads) http.HandlerFunc {
	// The descriptor never changes while the process runs: encode it once.
	body := sync.OnceValues(func() ([]byte, error) { return protocol.EncodeDescriptor(rd.Descriptor()) })
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := body()
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeRaw(w, http.StatusOK, b)
	}
}

func (h *Handler) observe(rd Reads) http.HandlerFunc {
	return workerRead(h, func(ctx context.Context, res protocol.Resource) (any, error) { return rd.Observe(ctx, res) })
}

func (h *Handler) usage(rd Reads) http.HandlerFunc {
	return workerRead(h, func(ctx context.Context, res protocol.Resource) (any, error) { return rd.Usage(ctx, res) })
}

func workerRead(h *Handler, read func(context.Context, protocol.Resource) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeWorkerCall(body)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		ans, err := read(r.Context(), call.Worker)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) inventory(rd Reads) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		inv, err := rd.Inventory(r.Context())
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, r, http.StatusOK, inv)
	}
}

func (h *Handler) mailbox(m Mailbox, op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeMailboxCall(body, op)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		var ans protocol.MailboxAnswer
		switch op {
		case "next":
			ans, err = m.Next(r.Context(), call.Run, call.Coordinator)
		case "acknowledge":
			ans, err = m.Acknowledge(r.Context(), call.Run, call.Coordinator, call.Delivery)
		case "await":
			ans, err = m.Await(r.Context(), call.Run, call.Coordinator, time.Duration(*call.WaitMs)*time.Millisecond)
		}
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		requestLogFrom(r.Context()).answer = ans.Status
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) adopt(m Mailbox) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeMailboxCall(body, "adopt")
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		fenced, err := m.Adopt(r.Context(), call.Run, call.Coordinator)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		if fenced {
			requestLogFrom(r.Context()).answer = protocol.MailFenced
		}
		writeRaw(w, http.StatusOK, protocol.EncodeAdoptAnswer(fenced))
	}
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

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type requestLog struct {
	key, answer string
	err         error
}

type logKey struct{}

func withRequestLog(ctx context.Context, rl *requestLog) context.Context {
	return context.WithValue(ctx, logKey{}, rl)
}

func requestLogFrom(ctx context.Context) *requestLog {
	if rl, ok := ctx.Value(logKey{}).(*requestLog); ok {
		return rl
	}
	return &requestLog{}
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var errNoWorkerToken = errors.New("missing worker credential")
