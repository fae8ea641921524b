// Package fakeapi is an in-memory fake of galley's worker-facing API served
// over real HTTP (httptest), so that the worker-API client and the harness
// are exercised on the wire. It records every accepted call in order, lets a
// test enqueue inbox items, settle the worker and inject failed answers, and
// lets a test wait for a condition without sleeping.
//
// Its worker states follow galley's: starting, ready after /ready,
// awaiting-reply after a question until a reply arrives, settled on
// worker-done (with its outcome), on exited (failed) or on Settle. It takes
// a parking as galley does (its number in turn, its state a bounded JSON
// object, the same report again answered alike), keeps a parked worker
// awaiting-reply until the test resumes it (Resume), and voids the parked
// harness's credential then.
package fakeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// MaxWait caps one inbox long poll.
const MaxWait = 30 * time.Second

// Call is one accepted call, in the order galley received it. Exactly one
// of the request fields is set, by Path.
type Call struct {
	Path   string
	Ready  *workerapi.ReadyRequest
	Post   *workerapi.PostRequest
	PostID string // the id answered to Post
	Usage  *workerapi.UsageRequest
	Exited *workerapi.ExitedRequest
	Park   *workerapi.ParkRequest
}

// Snapshot is the fake's state at one moment.
type Snapshot struct {
	Calls   []Call
	State   string
	Outcome string
	// Attempts counts every request per path, refused ones included.
	Attempts map[string]int
	// Refused counts requests answered 401 for a wrong token.
	Refused int
	// Events are the harness events received, in order (apart from
	// Calls: they are best effort and come at any time).
	Events []workerapi.HarnessEvent
}

// Posts returns the posted rows in order.
func (s Snapshot) Posts() []workerapi.PostRequest {
	var out []workerapi.PostRequest
	for _, c := range s.Calls {
		if c.Post != nil {
			out = append(out, *c.Post)
		}
	}
	return out
}

// Count returns how many accepted calls went to path.
func (s Snapshot) Count(path string) int {
	n := 0
	for _, c := range s.Calls {
		if c.Path == path {
			n++
		}
	}
	return n
}

// Server is the fake. Create it with New and Close it when done.
type Server struct {
	URL string

	srv   *httptest.Server
	token string

	mu       sync.Mutex
	self     workerapi.Self
	calls    []Call
	inbox    []workerapi.InboxItem
	nextID   int
	faults   map[string][]int
	attempts map[string]int
	refused  int
	events   []workerapi.HarnessEvent
	closing  bool
	changed  chan struct{} // closed and replaced on every change
	// park is the latest parking (its state compacted), parked whether
	// it is not resumed yet.
	park   *workerapi.ParkRequest
	parked bool
}

// Option configures a fake.
type Option func(*options)

type options struct{ noAgentUID bool }

// WithoutAgentUID serves a Self with no agent uid, as galley did before it
// allocated them (the harness then hashes the handle).
func WithoutAgentUID() Option { return func(o *options) { o.noAgentUID = true } }

// New starts a fake serving the worker described by self, accepting only
// "Bearer <token>". A self with no agent uid gets one drawn at random from
// the service's range, as the service allocates every worker's from an
// offset of its own deployment: the harness ends every process of its
// agent's uid, so two fakes in tests running at once (in one process or
// in two runs side by side) must not share one.
func New(self workerapi.Self, token string, opts ...Option) *Server {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if self.State == "" {
		self.State = protocol.StateStarting
	}
	if self.AgentUID == 0 && !o.noAgentUID {
		self.AgentUID = workerapi.AgentUIDBase + rand.Uint32N(workerapi.AgentUIDEnd-workerapi.AgentUIDBase)
	}
	s := &Server{
		token:    token,
		self:     self,
		faults:   map[string][]int{},
		attempts: map[string]int{},
		changed:  make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+workerapi.PathSelf, s.handleSelf)
	mux.HandleFunc("POST "+workerapi.PathReady, s.handleReady)
	mux.HandleFunc("POST "+workerapi.PathPost, s.handlePost)
	mux.HandleFunc("POST "+workerapi.PathInbox, s.handleInbox)
	mux.HandleFunc("POST "+workerapi.PathWake, s.handleWake)
	mux.HandleFunc("POST "+workerapi.PathWait, s.handleWait)
	mux.HandleFunc("POST "+workerapi.PathUsage, s.handleUsage)
	mux.HandleFunc("POST "+workerapi.PathExited, s.handleExited)
	mux.HandleFunc("POST "+workerapi.PathEvents, s.handleEvents)
	mux.HandleFunc("POST "+workerapi.PathPark, s.handlePark)
	s.srv = httptest.NewServer(s.guard(mux))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closing = true // ends long polls so Close does not wait for them
	s.notifyLocked()
	s.mu.Unlock()
	s.srv.Close()
}

// Snapshot returns a copy of the current state.
func (s *Server) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Server) snapshotLocked() Snapshot {
	att := make(map[string]int, len(s.attempts))
	for k, v := range s.attempts {
		att[k] = v
	}
	return Snapshot{
		Calls:    append([]Call(nil), s.calls...),
		State:    s.self.State,
		Outcome:  s.self.Outcome,
		Attempts: att,
		Refused:  s.refused,
		Events:   append([]workerapi.HarnessEvent(nil), s.events...),
	}
}

// Wait blocks until cond holds for a snapshot, or ctx ends.
func (s *Server) Wait(ctx context.Context, cond func(Snapshot) bool) (Snapshot, error) {
	for {
		s.mu.Lock()
		snap := s.snapshotLocked()
		ch := s.changed
		s.mu.Unlock()
		if cond(snap) {
			return snap, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return snap, fmt.Errorf("fakeapi: condition not met: %w", ctx.Err())
		}
	}
}

// Message enqueues a message-worker body and returns its sequence.
func (s *Server) Message(body string) int64 {
	return s.enqueue(workerapi.InboxItem{Kind: workerapi.ItemMessage, Body: body})
}

// Reply enqueues a reply to the question with that id; an awaiting-reply
// worker becomes ready again.
func (s *Server) Reply(question, body string) int64 {
	return s.enqueue(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: question, Body: body})
}

func (s *Server) enqueue(item workerapi.InboxItem) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	item.Seq = int64(len(s.inbox) + 1)
	s.inbox = append(s.inbox, item)
	if item.Kind == workerapi.ItemReply && s.self.State == protocol.StateAwaitingReply && !s.parked {
		s.self.State = protocol.StateReady
	}
	s.notifyLocked()
	return item.Seq
}

// Settle settles the worker with outcome, as a cancel does.
func (s *Server) Settle(outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(outcome)
}

func (s *Server) settleLocked(outcome string) {
	if s.self.State == protocol.StateSettled {
		return // a settled worker never changes state again
	}
	s.self.State, s.self.Outcome = protocol.StateSettled, outcome
	s.notifyLocked()
}

// FailNext makes the next requests to path answer these statuses, one each,
// before the path answers normally again.
func (s *Server) FailNext(path string, statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[path] = append(s.faults[path], statuses...)
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// guard checks the token and injected faults before any handler.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.attempts[r.URL.Path]++
		if !s.authorized(r) {
			s.refused++
			s.notifyLocked()
			s.mu.Unlock()
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if q := s.faults[r.URL.Path]; len(q) > 0 {
			status := q[0]
			s.faults[r.URL.Path] = q[1:]
			s.notifyLocked()
			s.mu.Unlock()
			http.Error(w, `{"error":"injected"}`, status)
			return
		}
		s.notifyLocked()
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, `{"error":"malformed"}`, http.StatusBadRequest)
		return false
	}
	return true
}

func answer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) record(c Call) {
	s.calls = append(s.calls, c)
	s.notifyLocked()
}

func (s *Server) handleSelf(w http.ResponseWriter, r *http.Request) {
	var req workerapi.SelfRequest
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	self := s.self
	s.mu.Unlock()
	answer(w, self)
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	var req workerapi.ReadyRequest
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	s.record(Call{Path: workerapi.PathReady, Ready: &req})
	if s.self.State == protocol.StateStarting {
		s.self.State = protocol.StateReady
		if s.self.Resume != nil && s.questionOpenLocked() {
			// Resumed in its ask: its agent waits on that question again.
			s.self.State = protocol.StateAwaitingReply
		}
	}
	s.mu.Unlock()
	answer(w, workerapi.Ack{})
}

func (s *Server) handlePost(w http.ResponseWriter, r *http.Request) {
	var req workerapi.PostRequest
	if !decode(w, r, &req) {
		return
	}
	switch req.Kind {
	case protocol.MsgQuestion, protocol.MsgEscalation, protocol.MsgHeartbeat, protocol.MsgStatus:
		if req.Outcome != "" {
			http.Error(w, `{"error":"outcome only on worker-done"}`, http.StatusBadRequest)
			return
		}
	case protocol.MsgWorkerDone:
		switch req.Outcome {
		case protocol.OutcomeSucceeded, protocol.OutcomeFailed, protocol.OutcomeCancelled:
		default:
			http.Error(w, `{"error":"bad outcome"}`, http.StatusBadRequest)
			return
		}
	default:
		http.Error(w, `{"error":"bad kind"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("msg-%d", s.nextID)
	s.record(Call{Path: workerapi.PathPost, Post: &req, PostID: id})
	switch {
	case req.Kind == protocol.MsgQuestion && s.self.State != protocol.StateSettled:
		s.self.State = protocol.StateAwaitingReply
	case req.Kind == protocol.MsgWorkerDone:
		s.settleLocked(req.Outcome)
	}
	s.mu.Unlock()
	answer(w, workerapi.PostAnswer{ID: id})
}

func (s *Server) handleInbox(w http.ResponseWriter, r *http.Request) {
	var req workerapi.InboxRequest
	if !decode(w, r, &req) {
		return
	}
	if ans, ok := s.waitItems(r.Context(), req.After, time.Duration(req.WaitMs)*time.Millisecond); ok {
		answer(w, ans)
	}
}

// handleWake grants the wait through this server (WakeGalley), as the
// local server does.
func (s *Server) handleWake(w http.ResponseWriter, r *http.Request) {
	if !decode(w, r, &workerapi.WakeRequest{}) {
		return
	}
	answer(w, workerapi.WakeGrant{Kind: workerapi.WakeGalley})
}

func (s *Server) handleWait(w http.ResponseWriter, r *http.Request) {
	var req workerapi.WaitRequest
	if !decode(w, r, &req) {
		return
	}
	if _, ok := s.waitItems(r.Context(), req.After, time.Duration(req.WaitMs)*time.Millisecond); ok {
		answer(w, workerapi.Ack{})
	}
}

// waitItems holds up to wait (at most MaxWait) for inbox items after
// after; ok is false when the request ended first.
func (s *Server) waitItems(ctx context.Context, after int64, wait time.Duration) (workerapi.InboxAnswer, bool) {
	deadline := time.NewTimer(min(wait, MaxWait))
	defer deadline.Stop()
	for {
		s.mu.Lock()
		var items []workerapi.InboxItem
		if after >= 0 && after < int64(len(s.inbox)) {
			items = append(items, s.inbox[after:]...)
		}
		settled := s.self.State == protocol.StateSettled
		ans := workerapi.InboxAnswer{Items: items, Settled: settled}
		if settled {
			ans.Outcome = s.self.Outcome
		}
		ch, closing := s.changed, s.closing
		s.mu.Unlock()
		if len(items) > 0 || settled || closing {
			return ans, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return workerapi.InboxAnswer{Items: []workerapi.InboxItem{}}, true
		case <-ctx.Done():
			return workerapi.InboxAnswer{}, false
		}
	}
}

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	var req workerapi.UsageRequest
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	s.record(Call{Path: workerapi.PathUsage, Usage: &req})
	s.mu.Unlock()
	answer(w, workerapi.Ack{})
}

func (s *Server) handleExited(w http.ResponseWriter, r *http.Request) {
	var req workerapi.ExitedRequest
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	s.record(Call{Path: workerapi.PathExited, Exited: &req})
	s.settleLocked(protocol.OutcomeFailed)
	s.mu.Unlock()
	answer(w, workerapi.Ack{})
}

// handlePark takes a parking as galley does: the worker awaits its
// coordinator, Self says which parking landed. A settled worker's is
// refused 409; a parking out of turn, a state that is not a JSON object or
// is larger than workerapi.MaxParkState, or another report under a number
// already taken, 400; the same report again answers 200 and changes
// nothing.
func (s *Server) handlePark(w http.ResponseWriter, r *http.Request) {
	var req workerapi.ParkRequest
	if !decode(w, r, &req) {
		return
	}
	var state bytes.Buffer
	if len(req.State) > workerapi.MaxParkState || json.Compact(&state, req.State) != nil || state.Len() == 0 || state.Bytes()[0] != '{' {
		http.Error(w, `{"error":"a parking's state must be a JSON object of at most 16 KiB"}`, http.StatusBadRequest)
		return
	}
	if req.Parking < 1 || req.Read < 0 {
		http.Error(w, `{"error":"bad parking number or inbox cursor"}`, http.StatusBadRequest)
		return
	}
	req.State = state.Bytes()
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.self.State == protocol.StateSettled:
		http.Error(w, `{"error":"worker has settled"}`, http.StatusConflict)
		return
	case s.park != nil && req.Parking == s.self.Parked:
		if req.Read != s.park.Read || !bytes.Equal(req.State, s.park.State) {
			http.Error(w, `{"error":"this parking was reported with another inbox cursor or state"}`, http.StatusBadRequest)
			return
		}
		answer(w, workerapi.Ack{}) // a retry of this report
		return
	case req.Parking != s.self.Parked+1:
		http.Error(w, `{"error":"parking out of turn"}`, http.StatusBadRequest)
		return
	}
	s.record(Call{Path: workerapi.PathPark, Park: &req})
	s.park, s.parked = &req, true
	s.self.Parked, s.self.State, s.self.Resume = req.Parking, protocol.StateAwaitingReply, nil
	answer(w, workerapi.Ack{})
}

// ErrNotParked is Resume's answer for a worker that is not parked.
var ErrNotParked = errors.New("fakeapi: the worker is not parked")

// Resume resumes the parked worker as galley does on a reply or message:
// it is starting, Self's resume holds its parking's number and state, and
// the credential the parked harness held is void from now on: only token,
// the resumed harness's, is accepted.
func (s *Server) Resume(token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.parked || s.self.State == protocol.StateSettled {
		return ErrNotParked
	}
	s.parked, s.token = false, token
	s.self.State = protocol.StateStarting
	s.self.Resume = &workerapi.Resume{Parking: s.park.Parking, State: s.park.State}
	s.notifyLocked()
	return nil
}

// questionOpenLocked reports whether the worker asked a question no reply
// in its inbox answers.
func (s *Server) questionOpenLocked() bool {
	open := map[string]bool{}
	for _, c := range s.calls {
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			open[c.PostID] = true
		}
	}
	for _, it := range s.inbox {
		if it.Kind == workerapi.ItemReply {
			delete(open, it.Question)
		}
	}
	return len(open) > 0
}

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	var req workerapi.EventsRequest
	if !decode(w, r, &req) {
		return
	}
	s.mu.Lock()
	s.events = append(s.events, req.Events...)
	s.notifyLocked()
	s.mu.Unlock()
	answer(w, workerapi.Ack{})
}

// authorized checks the credential as galley does: under the DPoP scheme,
// with a valid proof for this call (its replay cache aside), or, from a
// client without a proof key, as a bearer token.
func (s *Server) authorized(r *http.Request) bool {
	switch r.Header.Get("Authorization") {
	case "Bearer " + s.token:
		return r.Header.Get(dpop.Header) == ""
	case dpop.Scheme + " " + s.token:
		_, err := dpop.Verify(r.Header.Get(dpop.Header), r.Method, r.URL.Path, s.token, time.Now())
		return err == nil
	}
	return false
}
