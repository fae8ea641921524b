// Package history records what clients of galley asked and were answered,
// with invocation and response times, and checks a recorded history
// against the design's invariants: effects applied at most once with
// receipts that never change, absent and not-applied kept as promises, a
// mailbox that delivers every message at least once in order with batches
// that replay identically and ids never reused, fencing after adoption,
// cancelled workers settled at once and settled workers that never change.
// Linearizable checks the mailbox against a sequential model with
// porcupine.
//
// A history is client-side evidence: every check is sound for any
// interleaving the recorded intervals allow, so a violation is a real bug
// (or a client that breaks its own rules), never an artefact of timing.
// The load generator (scripts/load), the service's linearizability tests
// and the end-to-end fault tests all record into a Recorder and run Check.
package history

import (
	"encoding/json"
	"math"
	"slices"
	"sync"
	"time"
)

// Route names what an Op called.
type Route string

// The kitchn-facing routes, and the worker-side post.
const (
	Descriptor  Route = "descriptor"
	Effect      Route = "effects"
	Lookup      Route = "lookup"
	Observe     Route = "observe"
	Inventory   Route = "inventory"
	Usage       Route = "usage"
	Next        Route = "next"
	Acknowledge Route = "acknowledge"
	Await       Route = "await"
	Adopt       Route = "adopt"
	// Post is a worker posting one mailbox row (workerapi.PostRequest in
	// Body, workerapi.PostAnswer in Answer). Its Client is the worker's
	// handle, its Run the worker's run.
	Post Route = "post"
)

// Pending is the Return of an Op that got no answer: it may take effect at
// any time after its call, or never.
const Pending = math.MaxInt64

// Op is one call and its answer.
type Op struct {
	ID int `json:"id"`
	// Client names one sequential caller: a coordinator, a worker, a
	// reader. A client makes one call at a time.
	Client string `json:"client"`
	Route  Route  `json:"route"`
	// Call and Return are nanoseconds since the history began; Return is
	// Pending when no answer came.
	Call   int64 `json:"call"`
	Return int64 `json:"return"`
	// Arrived, when not 0, is the latest instant (same clock) at which the
	// server can have received the request: an in-process test knows it
	// exactly. 0 means unknown, and Return stands for it.
	Arrived int64 `json:"arrived,omitempty"`
	// Run is the mailbox a post went to; for other routes the run is in
	// Body.
	Run string `json:"run,omitempty"`
	// Body is the request body sent (nil for GET routes).
	Body json.RawMessage `json:"body,omitempty"`
	// Status is the HTTP status of the answer; 0 when there was none.
	Status int             `json:"status"`
	Answer json.RawMessage `json:"answer,omitempty"`
	// Err says why there was no answer (transport, timeout).
	Err string `json:"err,omitempty"`
}

// Answered reports whether the op got a 200 answer.
func (o Op) Answered() bool { return o.Status == 200 && o.Return != Pending }

// arrivedBy is the latest instant at which the request can have arrived.
func (o Op) arrivedBy() int64 {
	if o.Arrived != 0 {
		return o.Arrived
	}
	return o.Return
}

// Recorder collects ops from concurrent clients. The zero value is not
// usable; call NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	cuts  []int64
}

// NewRecorder starts a history now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Now is the recorder's clock: nanoseconds since the history began
// (monotonic).
func (r *Recorder) Now() int64 { return int64(time.Since(r.start)) }

// At converts a wall-clock instant to the recorder's clock.
func (r *Recorder) At(t time.Time) int64 { return int64(t.Sub(r.start)) }

// Start is when the history began.
func (r *Recorder) Start() time.Time { return r.start }

// Call is an op under way; End records it.
type Call struct {
	r  *Recorder
	op Op
}

// Begin starts recording a call by client to route with body.
func (r *Recorder) Begin(client string, route Route, body []byte) *Call {
	return &Call{r: r, op: Op{Client: client, Route: route, Body: slices.Clone(body), Call: r.Now()}}
}

// SetRun names the mailbox of a post.
func (c *Call) SetRun(run string) *Call { c.op.Run = run; return c }

// SetArrived records the latest instant the server can have received the
// request.
func (c *Call) SetArrived(at int64) *Call { c.op.Arrived = at; return c }

// EndUnsent records a call that never reached the server (its connection
// was refused): it had no answer and, known at once, no effect.
func (c *Call) EndUnsent(err error) Op {
	op := c.End(0, nil, err)
	op.Return = c.r.Now()
	c.r.mu.Lock()
	c.r.ops[op.ID].Return = op.Return
	c.r.mu.Unlock()
	return op
}

// End records the answer: status 0 and err for none.
func (c *Call) End(status int, answer []byte, err error) Op {
	c.op.Return = c.r.Now()
	c.op.Status = status
	c.op.Answer = slices.Clone(answer)
	if err != nil {
		c.op.Err = err.Error()
	}
	if status == 0 {
		c.op.Return = Pending
	}
	return c.r.Add(c.op)
}

// Add records a complete op and returns it with its ID.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.ID = len(r.ops)
	r.ops = append(r.ops, op)
	return op
}

// Cut records that the server stopped now (a fault run killed it): a call
// still without an answer took effect, if at all, before now.
func (r *Recorder) Cut() {
	now := r.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cuts = append(r.cuts, now)
}

// Ops returns a copy of the history so far, in order of recording. A call
// without an answer that was under way at a Cut returns at that cut.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := slices.Clone(r.ops)
	for i := range ops {
		if ops[i].Return != Pending {
			continue
		}
		for _, c := range r.cuts {
			if c >= ops[i].Call {
				ops[i].Return = c
				break
			}
		}
	}
	return ops
}

// Len is how many ops were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}
