package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
)

// fake is a small in-memory service that keeps the protocol's rules, with
// a toy scripted agent behind launches, and knobs that break one rule at a
// time. It stands in for galley only so that the checks themselves can be
// tested: a check must pass against it and fail against each break.
type fake struct {
	t  *testing.T
	mu sync.Mutex

	// knobs, each breaking one rule
	foreignReceipt bool // receipts name another backend
	respaceLookup  bool // lookup re-encodes the receipt with other spacing
	ownerless      bool // the inventory lists owner null
	noCancel       bool // cancel is applied but the worker does not settle
	rowsNoWorker   bool // mailbox rows leave out the worker
	resealEachRead bool // every read seals a new batch id
	noFencing      bool // adoption fences nobody
	ackAnyBatch    bool // acknowledging any id consumes the current batch
	awaitNoWake    bool // await looks only at its start and its end

	answers map[string][]byte // key -> the effect answer first sent
	owners  map[string]string // resource JSON -> owner key
	order   []string          // resources in creation order
	workers map[string]*fakeWorker
	runs    map[string]*fakeRun
	changed chan struct{} // closed and replaced whenever a mailbox changes
	seq     int
	calls   []*http.Request
	bodies  [][]byte
}

type fakeWorker struct {
	obs   protocol.Observation
	run   string
	inbox chan string
	stop  chan struct{}
	// stopped is set when stop is closed: the script may have moved obs on
	// since, and stop must close once.
	stopped bool
}

type fakeRun struct {
	msgs     []protocol.MailMessage // every message, in the order posted
	consumed int                    // messages before this are acknowledged
	batchID  string                 // the sealed batch, or ""
	batchN   int                    // how many messages it holds
	reader   string                 // the adopted coordinator, or ""
	seen     map[string]bool        // coordinators that called
	fenced   map[string]bool        // superseded coordinators
}

func newFake(t *testing.T) *fake {
	f := &fake{
		t: t, answers: map[string][]byte{}, owners: map[string]string{},
		workers: map[string]*fakeWorker{}, runs: map[string]*fakeRun{}, changed: make(chan struct{}),
	}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, w := range f.workers {
			w.settle(protocol.OutcomeCancelled)
		}
	})
	return f
}

// settle ends the worker's script; the caller holds f.mu.
func (w *fakeWorker) settle(outcome string) {
	if w.obs.State == protocol.StateSettled || w.stopped {
		return
	}
	w.obs = protocol.Observation{State: protocol.StateSettled, Outcome: outcome}
	w.stopped = true
	close(w.stop)
}

func (f *fake) run(name string) *fakeRun {
	r := f.runs[name]
	if r == nil {
		r = &fakeRun{seen: map[string]bool{}, fenced: map[string]bool{}}
		f.runs[name] = r
	}
	return r
}

// post appends a message to the worker's run; the caller holds f.mu.
func (f *fake) post(handle string, m protocol.MailMessage) {
	w := f.workers[handle]
	r := f.run(w.run)
	f.seq++
	m.ID = fmt.Sprintf("m-%d", f.seq)
	if !f.rowsNoWorker {
		m.Worker = &protocol.Resource{Kind: protocol.KindWorker, Backend: "b1", Handle: handle}
	}
	r.msgs = append(r.msgs, m)
	close(f.changed)
	f.changed = make(chan struct{})
}

// script plays the scripted agent's directives for one worker.
func (f *fake) script(handle, brief string) {
	f.mu.Lock()
	w := f.workers[handle]
	// A cancel may have settled the worker before this goroutine ran (a
	// busy machine): settled stays settled.
	if w.stopped {
		f.mu.Unlock()
		return
	}
	w.obs = protocol.Observation{State: protocol.StateReady}
	f.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(brief), "\n")[1:]
	for _, line := range lines {
		verb, arg, _ := strings.Cut(line, " ")
		subject, body, _ := strings.Cut(arg, " :: ")
		f.mu.Lock()
		if w.obs.State == protocol.StateSettled {
			f.mu.Unlock()
			return
		}
		switch verb {
		case "status":
			f.post(handle, protocol.MailMessage{Kind: protocol.MsgStatus, Body: arg})
		case "heartbeat":
			f.post(handle, protocol.MailMessage{Kind: protocol.MsgHeartbeat})
		case "ask":
			f.post(handle, protocol.MailMessage{Kind: protocol.MsgQuestion, Subject: subject, Body: body})
			w.obs = protocol.Observation{State: protocol.StateAwaitingReply}
		case "done":
			outcome, text, _ := strings.Cut(arg, " ")
			f.post(handle, protocol.MailMessage{Kind: protocol.MsgWorkerDone, Outcome: outcome, Body: text})
			w.settle(outcome)
		}
		f.mu.Unlock()
		switch verb {
		case "ask": // nobody replies in these tests
			<-w.stop
			return
		case "wait-message":
			select {
			case m := <-w.inbox:
				f.mu.Lock()
				f.post(handle, protocol.MailMessage{Kind: protocol.MsgStatus, Body: "message: " + m})
				f.mu.Unlock()
			case <-w.stop:
				return
			}
		case "sleep":
			d, _ := time.ParseDuration(arg)
			select {
			case <-time.After(d):
			case <-w.stop:
				return
			}
		}
	}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.calls = append(f.calls, r)
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	var call struct {
		Run         string
		Coordinator string
		Delivery    string
		WaitMs      int64
		Request     struct {
			Key    string
			Effect struct{ Effect json.RawMessage }
		}
		Worker struct{ Handle string }
	}
	_ = json.Unmarshal(body, &call)
	switch r.URL.Path {
	case "/v1/deliveries/next", "/v1/deliveries/acknowledge", "/v1/deliveries/await", "/v1/runs/adopt":
		w.Write(f.mailbox(r.URL.Path, call.Run, call.Coordinator, call.Delivery, time.Duration(call.WaitMs)*time.Millisecond))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	backend := "b1"
	if f.foreignReceipt {
		backend = "elsewhere"
	}
	res := func(kind, handle string) string {
		return fmt.Sprintf(`{"kind":%q,"backend":%q,"handle":%q}`, kind, backend, handle)
	}
	switch r.URL.Path {
	case "/v1/descriptor":
		io.WriteString(w, descriptorJSON("h1", nil, true))
	case "/v1/effects":
		key := call.Request.Key
		if a, ok := f.answers[key]; ok {
			w.Write(a)
			return
		}
		var e struct {
			Type, Branch, Brief, Body string
			Worker                    struct{ Handle string }
			Resource                  struct{ Handle string }
		}
		_ = json.Unmarshal(call.Request.Effect.Effect, &e)
		var created, touched []string
		switch e.Type {
		case "launch-worker":
			f.seq++
			h := fmt.Sprintf("w-%d", f.seq)
			f.workers[h] = &fakeWorker{
				obs: protocol.Observation{State: protocol.StateStarting}, run: call.Run,
				inbox: make(chan string, 16), stop: make(chan struct{}),
			}
			go f.script(h, e.Brief)
			created = append(created, res("worker", h))
			if e.Branch != "" {
				created = append(created, res("branch", e.Branch))
			}
			for _, c := range created {
				f.owners[c] = key
				f.order = append(f.order, c)
			}
		case "message-worker":
			wk, ok := f.workers[e.Worker.Handle]
			if !ok {
				io.WriteString(w, `{"status":"not-applied","reason":"rejected"}`)
				return
			}
			wk.inbox <- e.Body
			touched = append(touched, res("worker", e.Worker.Handle))
		case "cancel-worker":
			wk, ok := f.workers[e.Worker.Handle]
			if !ok {
				io.WriteString(w, `{"status":"not-applied","reason":"rejected"}`)
				return
			}
			if !f.noCancel {
				wk.settle(protocol.OutcomeCancelled)
			}
			touched = append(touched, res("worker", e.Worker.Handle))
		case "release-resource":
			touched = append(touched, res("worker", e.Resource.Handle))
		}
		a := fmt.Appendf(nil, `{"status":"applied","receipt":{"reference":"r-%s","created":[%s],"touched":[%s]}}`,
			key, strings.Join(created, ","), strings.Join(touched, ","))
		f.answers[key] = a
		w.Write(a)
	case "/v1/effects/lookup":
		a, ok := f.answers[call.Request.Key]
		switch {
		case !ok:
			io.WriteString(w, `{"status":"absent"}`)
		case f.respaceLookup:
			var buf bytes.Buffer
			json.Indent(&buf, a, "", " ")
			w.Write(buf.Bytes())
		default:
			w.Write(a)
		}
	case "/v1/workers/observe":
		obs := protocol.Observation{State: protocol.StateMissing}
		if wk, ok := f.workers[call.Worker.Handle]; ok {
			obs = wk.obs
		}
		json.NewEncoder(w).Encode(obs)
	case "/v1/inventory":
		var rows []string
		for _, c := range f.order {
			owner := fmt.Sprintf("%q", f.owners[c])
			if f.ownerless {
				owner = "null"
			}
			rows = append(rows, fmt.Sprintf(`{"resource":%s,"owner":%s,"liveness":"live"}`, c, owner))
		}
		fmt.Fprintf(w, `{"resources":[%s]}`, strings.Join(rows, ","))
	default:
		http.NotFound(w, r)
	}
}

var (
	answerEmpty  = []byte(`{"status":"empty"}`)
	answerFenced = []byte(`{"status":"fenced"}`)
)

// mailbox answers one mailbox call, holding await until a question,
// report or escalation waits, or waitMs passes.
func (f *fake) mailbox(route, run, coord, delivery string, wait time.Duration) []byte {
	deadline := time.Now().Add(wait)
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.run(run)
	r.seen[coord] = true
	fenced := !f.noFencing && (r.fenced[coord] || r.reader != "" && r.reader != coord)
	switch route {
	case "/v1/runs/adopt":
		if fenced && r.fenced[coord] {
			return answerFenced
		}
		if r.reader != coord && !f.noFencing {
			for c := range r.seen {
				if c != coord {
					r.fenced[c] = true
				}
			}
			r.reader = coord
			r.batchID = "" // the adopter gets the pending messages regrouped
		}
		return []byte(`{}`)
	case "/v1/deliveries/acknowledge":
		if fenced {
			return answerFenced
		}
		if r.batchID != "" && (delivery == r.batchID || f.ackAnyBatch) {
			r.consumed += r.batchN
			r.batchID = ""
		}
	case "/v1/deliveries/await":
		for !fenced && time.Now().Before(deadline) && !f.awaitNoWake && !attention(r.msgs[r.consumed:]) {
			ch := f.changed
			f.mu.Unlock()
			select {
			case <-ch:
			case <-time.After(time.Until(deadline)):
			}
			f.mu.Lock()
		}
		if f.awaitNoWake && !attention(r.msgs[r.consumed:]) {
			f.mu.Unlock()
			time.Sleep(time.Until(deadline))
			f.mu.Lock()
		}
	}
	if fenced {
		return answerFenced
	}
	if r.batchID == "" || f.resealEachRead {
		if len(r.msgs) == r.consumed {
			return answerEmpty
		}
		f.seq++
		r.batchID, r.batchN = fmt.Sprintf("d-%d", f.seq), len(r.msgs)-r.consumed
	}
	b, _ := json.Marshal(protocol.MailboxAnswer{Status: protocol.MailDelivery, Delivery: &protocol.Delivery{
		ID: r.batchID, Messages: r.msgs[r.consumed : r.consumed+r.batchN],
	}})
	return b
}

func attention(msgs []protocol.MailMessage) bool {
	return slices.ContainsFunc(msgs, func(m protocol.MailMessage) bool {
		return m.Kind == protocol.MsgQuestion || m.Kind == protocol.MsgWorkerDone || m.Kind == protocol.MsgEscalation
	})
}
