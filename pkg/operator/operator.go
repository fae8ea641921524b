// Package operator serves the operator's view of galley under /operator/:
// a JSON API (the workers, one worker's event log from a cursor, and live,
// cancel and revoke) and the console, a small page in the browser that
// uses it. It is apart from kitchn's /v1/ and the harness's /worker/v1/,
// under its own credential, the operator token: kitchn's token does not
// open it, and it opens nothing else. docs/operations.md describes it.
//
// A request is the operator's when it carries "Authorization: Bearer
// <operator token>", or the console's session cookie (HttpOnly,
// SameSite=Strict) that POST /operator/v1/login sets for the token: a
// fresh random id at each login, of which the house's store keeps only
// the hash, until the logout, the session's lifetime (on the server's
// clock) or a new operator token, whichever comes first. An action or
// login made with the cookie must also carry the header X-Galley-Operator
// and, when the browser sends one, an Origin of this host: a page of
// another site can send neither. Attempts at the token (logins, wrong
// bearer tokens) are throttled per client address and in all, counted in
// the store.
package operator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
)

// Prefix is where the operator's routes live.
const Prefix = contract.OperatorPrefix

// Routes under Prefix.
const (
	PathLogin   = contract.PathOperatorLogin
	PathLogout  = Prefix + "v1/logout"
	PathSession = Prefix + "v1/session"
	PathWorkers = Prefix + "v1/workers"
	PathConsole = Prefix + "console"
)

// CSRFHeader must be present on every POST authenticated by the cookie.
const CSRFHeader = "X-Galley-Operator"

// MaxWait bounds a long poll on a worker's events.
const MaxWait = contract.AwaitCap

const cookieName = "galley_operator"

// Service is what the operator reads and acts through.
type Service interface {
	OperatorWorkers(ctx context.Context) ([]store.Resource, error)
	OperatorCancel(ctx context.Context, handle string) error
	RevokeWorkerCredential(ctx context.Context, handle string) error
}

// Events is the workers' event logs.
type Events interface {
	eventlog.Log
	LastEvent(ctx context.Context, worker string) (store.Event, bool, error)
}

// Handler serves the operator's routes.
type Handler struct {
	token       []byte
	fingerprint string // of the token, in each session it issues
	svc         Service
	events      Events
	sessions    Sessions
	limit       *limiter
	bell        service.Doorbell
	log         *slog.Logger
	now         func() time.Time
	mux         *http.ServeMux
	// heartbeat is how often an idle stream sends a comment, so that
	// proxies keep it open and a gone client is noticed.
	heartbeat time.Duration
	// pollOnly: the deployment cannot stream (API Gateway in front of
	// Lambda buffers a response whole), so the stream route is refused and
	// the console follows by long poll.
	pollOnly bool
	// drained ends when the server shuts down (Drain).
	drained context.Context
	drain   context.CancelFunc
}

// Option configures a Handler.
type Option func(*Handler)

// WithClock sets the clock that sessions expire and login windows turn by
// (tests).
func WithClock(now func() time.Time) Option { return func(h *Handler) { h.now = now } }

// WithPollOnly serves no Server-Sent Events: the stream route answers 404
// naming the long poll, and the session tells the console to long poll.
// For a deployment behind API Gateway and Lambda, which answers a
// request only once its handler returns.
func WithPollOnly() Option { return func(h *Handler) { h.pollOnly = true } }

// Live modes the session answers (SessionAnswer.Live).
const (
	LiveStream = "sse"  // GET .../stream, Server-Sent Events
	LivePoll   = "poll" // GET .../events?after=N&wait=S, a long poll
)

// SessionAnswer answers GET PathSession: how the console follows a
// worker's events here.
type SessionAnswer struct {
	OK   bool   `json:"ok"`
	Live string `json:"live"`
}

// Drain answers every held event poll at once, as its deadline would
// (empty), and ends every event stream: the process is shutting down.
func (h *Handler) Drain() { h.drain() }

// New returns the handler for one operator token. sessions keeps the
// console's sessions and login tallies: the house's store, shared by every
// process that serves the operator.
func New(token []byte, svc Service, events Events, sessions Sessions, bell service.Doorbell, log *slog.Logger, opts ...Option) *Handler {
	if log == nil {
		log = slog.Default()
	}
	h := &Handler{token: token, fingerprint: tokenFingerprint(token), svc: svc, events: events, sessions: sessions, bell: bell,
		log: log, now: time.Now, mux: http.NewServeMux(), heartbeat: 15 * time.Second}
	h.drained, h.drain = context.WithCancel(context.Background())
	for _, o := range opts {
		o(h)
	}
	h.limit = &limiter{tallies: sessions, now: h.now}
	// The page at /operator/ and at /operator/console: an HTTP API's
	// greedy route takes no empty path, so on AWS /operator redirects to
	// the second (the page's relative links resolve the same from both).
	h.mux.HandleFunc("GET "+Prefix+"{$}", h.static("index.html"))
	h.mux.HandleFunc("GET "+PathConsole, h.static("index.html"))
	h.mux.HandleFunc("GET "+Prefix+"app.js", h.static("app.js"))
	h.mux.HandleFunc("GET "+Prefix+"app.css", h.static("app.css"))
	h.mux.HandleFunc("POST "+PathLogin, h.login)
	h.mux.HandleFunc("POST "+PathLogout, h.logout)
	h.mux.HandleFunc("GET "+PathSession, h.authed(false, func(w http.ResponseWriter, r *http.Request) {
		live := LiveStream
		if h.pollOnly {
			live = LivePoll
		}
		writeJSON(w, http.StatusOK, SessionAnswer{OK: true, Live: live})
	}))
	h.mux.HandleFunc("GET "+PathWorkers, h.authed(false, h.workers))
	h.mux.HandleFunc("GET "+PathWorkers+"/{handle}/events", h.authed(false, h.poll))
	h.mux.HandleFunc("GET "+PathWorkers+"/{handle}/stream", h.authed(false, h.stream))
	h.mux.HandleFunc("POST "+PathWorkers+"/{handle}/cancel", h.authed(true, h.act(func(ctx context.Context, handle string) error {
		return h.svc.OperatorCancel(ctx, handle)
	})))
	h.mux.HandleFunc("POST "+PathWorkers+"/{handle}/revoke", h.authed(true, h.act(func(ctx context.Context, handle string) error {
		return h.svc.RevokeWorkerCredential(ctx, handle)
	})))
	h.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorJSON{"no such route"})
	})
	return h
}

// Owns reports whether a request for p is the operator's: p is under
// Prefix, also once cleaned (so "/operator/../v1/x" is not).
func Owns(p string) bool {
	return strings.HasPrefix(p, Prefix) && strings.HasPrefix(path.Clean(p)+"/", Prefix) || p == contract.PathOperator
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	if r.URL.Path == contract.PathOperator {
		http.Redirect(w, r, PathConsole, http.StatusFound)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) act(do func(ctx context.Context, handle string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := do(r.Context(), r.PathValue("handle")); err != nil {
			h.fail(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
	}
}

type errorJSON struct {
	Error string `json:"error"`
}

// fail answers an error by its kind; the message is the error's own safe
// one.
func (h *Handler) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch galleyerr.KindOf(err) {
	case galleyerr.NotFound:
		status = http.StatusNotFound
	case galleyerr.Malformed:
		status = http.StatusBadRequest
	case galleyerr.Invalid, galleyerr.Conflict, galleyerr.InFlight:
		status = http.StatusConflict
	case galleyerr.RateLimited, galleyerr.Unavailable:
		status = http.StatusServiceUnavailable
	}
	msg := "internal error"
	var ge *galleyerr.Error
	if errors.As(err, &ge) && ge.Msg != "" {
		msg = ge.Msg
	}
	if status == http.StatusInternalServerError {
		h.log.Error("operator request failed", "err", err)
	}
	writeJSON(w, status, errorJSON{msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
