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
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
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

// sameSite checks what a cookie-authenticated POST must carry: the custom
// header (a cross-site form cannot send one, and a cross-site script
// cannot without a CORS preflight galley never answers) and, when sent,
// an Origin of this host.
func sameSite(r *http.Request) bool {
	if r.Header.Get(CSRFHeader) == "" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return false
	}
	// Behind API Gateway and Lambda the request's Host is the gateway's
	// domain name, without a port; the Host header the client sent is
	// kept in the headers (with the port, where there is one: aws-local).
	return u.Host == r.Host || u.Host == r.Header.Get("Host")
}

func (h *Handler) authed(action bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		how, ref, err := h.auth(r)
		switch {
		case err != nil:
			h.unavailable(w, "the operator's credentials cannot be checked now; try again", err)
			return
		case ref != nil:
			ref.write(w)
			return
		case how == refused:
			w.Header().Set("WWW-Authenticate", `Bearer realm="galley operator"`)
			writeJSON(w, http.StatusUnauthorized, errorJSON{"the operator token or session is missing, wrong or ended"})
			return
		}
		if action && how == byCookie && !sameSite(r) {
			writeJSON(w, http.StatusForbidden, errorJSON{"a console action needs the " + CSRFHeader + " header and this site's Origin"})
			return
		}
		next(w, r)
	}
}

// WorkerView is one row of the worker list.
type WorkerView struct {
	Handle     string       `json:"handle"`
	State      string       `json:"state"`
	Outcome    string       `json:"outcome,omitempty"`
	Released   bool         `json:"released,omitempty"`
	Created    time.Time    `json:"created"`
	AgeSeconds int64        `json:"ageSeconds"`
	Agent      string       `json:"agent,omitempty"`
	Model      string       `json:"model,omitempty"`
	Branch     string       `json:"branch,omitempty"`
	Run        string       `json:"run"`
	Task       string       `json:"task"`
	Role       string       `json:"role,omitempty"`
	Tokens     *TokensView  `json:"tokens,omitempty"`
	Cost       *CostView    `json:"cost,omitempty"`
	LastEvent  *store.Event `json:"lastEvent,omitempty"`
}

// TokensView is a worker's token counts so far; nil is unknown.
type TokensView struct {
	Input      *int64 `json:"input,omitempty"`
	Output     *int64 `json:"output,omitempty"`
	CacheRead  *int64 `json:"cacheRead,omitempty"`
	CacheWrite *int64 `json:"cacheWrite,omitempty"`
}

// CostView is a worker's cost so far in millionths of a US dollar.
type CostView struct {
	MicroUSD int64  `json:"microUsd"`
	Basis    string `json:"basis"`
}

// WorkersAnswer answers GET PathWorkers.
type WorkersAnswer struct {
	Workers []WorkerView `json:"workers"`
}

func (h *Handler) workers(w http.ResponseWriter, r *http.Request) {
	views, err := h.List(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, WorkersAnswer{Workers: views})
}

// List builds the worker list, newest first. The last events are read
// 16 at a time.
func (h *Handler) List(ctx context.Context) ([]WorkerView, error) {
	rs, err := h.svc.OperatorWorkers(ctx)
	if err != nil {
		return nil, err
	}
	now := h.now()
	views := make([]WorkerView, len(rs))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, res := range rs {
		wk := res.Worker
		v := WorkerView{Handle: res.Handle, State: wk.State, Outcome: wk.Outcome, Released: res.Released,
			Created: res.Created, AgeSeconds: int64(now.Sub(res.Created) / time.Second), Branch: wk.Branch,
			Run: wk.Run, Task: wk.Task, Role: wk.Role}
		if wk.Agent != nil {
			v.Agent, v.Model = wk.Agent.Agent, wk.Agent.Model
		}
		if u := wk.Usage; u != nil {
			if u.Model != "" {
				v.Model = u.Model
			}
			if t := u.Tokens; t != nil {
				v.Tokens = &TokensView{Input: t.Input, Output: t.Output, CacheRead: t.CacheRead, CacheWrite: t.CacheWrite}
			}
			if c := u.Cost; c != nil {
				v.Cost = &CostView{MicroUSD: c.Amount, Basis: c.Basis}
			}
		}
		views[len(rs)-1-i] = v
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if e, ok, err := h.events.LastEvent(ctx, views[i].Handle); err == nil && ok {
				views[i].LastEvent = &e
			}
		}(len(rs) - 1 - i)
	}
	wg.Wait()
	return views, nil
}

// EventsAnswer answers a poll: the events after the cursor, and Next, the
// cursor to ask from next (the last event's number, or the cursor itself).
type EventsAnswer struct {
	Events []store.Event `json:"events"`
	Next   int64         `json:"next"`
}

// pollLimit bounds one answer's events.
const pollLimit = 200

// cursor reads the cursor of a request: Last-Event-ID (a reconnecting
// EventSource) first, then ?after.
func cursor(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, galleyerr.Errorf(galleyerr.Malformed, "the cursor must be a number of 0 or more")
	}
	return n, nil
}

// poll answers the worker's events after the cursor, holding up to ?wait
// seconds (at most MaxWait) for one: the long poll of a deployment that
// cannot stream (API Gateway in front of Lambda), woken by the doorbell.
func (h *Handler) poll(w http.ResponseWriter, r *http.Request) {
	handle := r.PathValue("handle")
	after, err := cursor(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	wait := time.Duration(0)
	if v := r.URL.Query().Get("wait"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 {
			h.fail(w, galleyerr.Errorf(galleyerr.Malformed, "wait must be a number of seconds"))
			return
		}
		wait = min(time.Duration(s*float64(time.Second)), MaxWait)
	}
	es, err := h.Wait(r.Context(), handle, after, wait)
	if err != nil {
		h.fail(w, err)
		return
	}
	next := after
	if len(es) > 0 {
		next = es[len(es)-1].Seq
	}
	if es == nil {
		es = []store.Event{}
	}
	writeJSON(w, http.StatusOK, EventsAnswer{Events: es, Next: next})
}

// Wait answers the worker's events after the cursor (a reset event first
// when some were dropped), holding up to wait for one, or until Drain. It
// listens before it reads, so an append between the read and the wait
// rings.
func (h *Handler) Wait(ctx context.Context, handle string, after int64, wait time.Duration) ([]store.Event, error) {
	var l service.Listener
	if wait > 0 && h.bell != nil {
		var err error
		if l, err = h.bell.Listen(ctx, eventlog.Topic(handle)); err != nil {
			h.log.Warn("cannot listen for a worker's events; polling once", "worker", handle, "err", err)
			l = nil
		} else {
			defer l.Close()
		}
	}
	deadline := h.now().Add(wait)
	for {
		es, err := eventlog.Read(ctx, h.events, handle, after, pollLimit)
		if err != nil || len(es) > 0 || wait <= 0 {
			return es, err
		}
		left := deadline.Sub(h.now())
		if left <= 0 || h.drained.Err() != nil {
			return nil, nil
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		undrain := context.AfterFunc(h.drained, cancel) // Drain ends the wait as the deadline would
		if l != nil {
			err = l.Wait(wctx)
		} else {
			<-wctx.Done()
			err = wctx.Err()
		}
		undrain()
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		_ = err // a ring, or the deadline: read again either way
	}
}

// stream serves the worker's events as Server-Sent Events from the
// cursor (Last-Event-ID, or ?after), then live: each event's id is its
// number, so a reconnecting EventSource resumes exactly after the last one
// it received. It ends when its credential no longer opens the API.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	if h.pollOnly {
		writeJSON(w, http.StatusNotFound, errorJSON{"this deployment cannot stream: long poll " + PathWorkers + "/{handle}/events?after=N&wait=25"})
		return
	}
	handle := r.PathValue("handle")
	after, err := cursor(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	checked := h.now() // the credential was checked as the request came in
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	// Tell the browser how soon to reconnect after a drop.
	fmt.Fprint(w, "retry: 1000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	ctx := r.Context()
	for {
		// A stream outlives no session: the credential is checked again
		// every heartbeat, so a logout, an expiry or a new token ends it.
		if h.now().Sub(checked) >= h.heartbeat {
			if how, _, _ := h.auth(r); how == refused {
				return
			}
			checked = h.now()
		}
		es, err := h.Wait(ctx, handle, after, h.heartbeat)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("a worker's event stream failed", "worker", handle, "err", err)
			}
			return
		}
		for _, e := range es {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b)
			after = e.Seq
		}
		if len(es) == 0 {
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err := rc.Flush(); err != nil || h.drained.Err() != nil {
			// A drained stream ends: the browser's EventSource reconnects
			// to whatever serves next.
			return
		}
	}
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
