// Package eventlog records what happens to each worker in the worker's
// event log (store.EventLog) off the path of the call that made it happen,
// and reads it back for operators. Record never blocks and never fails: it
// queues the event, one goroutine appends the queue in order after the
// caller's own write committed, a full queue drops the event (counted and
// logged), and an append that fails is logged. Each append rings the
// worker's event topic, so a follower waiting on the doorbell reads at
// once. docs/operations.md describes the events and their bounds.
package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/store"
)

// Log is where events are kept.
type Log interface {
	AppendEvent(ctx context.Context, worker string, e store.Event) (int64, error)
	ListEvents(ctx context.Context, worker string, after int64, limit int) ([]store.Event, error)
}

// Bell wakes the followers of a topic.
type Bell interface {
	Ring(ctx context.Context, topic string) error
}

// Topic is the doorbell topic rung after each append to worker's log.
func Topic(worker string) string { return "events:" + worker }

// Event kinds.
const (
	KindState      = "state"      // a state change: fields state, outcome, evidence
	KindMailbox    = "mailbox"    // a row between worker and coordinator: fields kind, id
	KindUsage      = "usage"      // the usage so far: fields input, output, costUsd
	KindCompute    = "compute"    // the worker's compute: fields event (started, stopped), code
	KindCredential = "credential" // the worker's credential was revoked
	KindAction     = "action"     // an operator acted on the worker: field action
	KindHarness    = "harness"    // what the harness reported: field event
	KindWarning    = "warning"    // something went wrong that the worker survives
	KindError      = "error"      // something went wrong
	KindReset      = "reset"      // a reader's cursor is older than the retained events (never stored)
)

// QueueLen bounds the events queued and not yet appended.
const QueueLen = 4096

type queued struct {
	worker string
	e      store.Event
}

// Recorder appends events in the background.
type Recorder struct {
	log     Log
	bell    Bell
	logger  *slog.Logger
	now     func() time.Time
	q       chan queued
	pending sync.WaitGroup
	dropped atomic.Int64
	mu      sync.RWMutex // held to send, and to close q
	closed  bool
	done    chan struct{}
}

// New starts a recorder appending to log; bell may be nil.
func New(log Log, bell Bell, logger *slog.Logger) *Recorder {
	if logger == nil {
		logger = slog.Default()
	}
	r := &Recorder{log: log, bell: bell, logger: logger, now: time.Now,
		q: make(chan queued, QueueLen), done: make(chan struct{})}
	go r.run()
	return r
}

// Record queues e for worker's log. It never blocks: when the queue is
// full the event is dropped and counted.
func (r *Recorder) Record(worker string, e store.Event) {
	if r == nil || worker == "" {
		return
	}
	if e.At.IsZero() {
		e.At = r.now()
	}
	e = Clean(e)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	r.pending.Add(1)
	select {
	case r.q <- queued{worker, e}:
	default:
		r.pending.Done()
		if n := r.dropped.Add(1); n&(n-1) == 0 { // 1, 2, 4, ...: the log is not flooded too
			r.logger.Warn("the event queue is full; events dropped", "dropped", n)
		}
	}
}

// Dropped counts the events the full queue dropped.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Flush waits until every event queued before it was appended (or its
// append failed), or ctx ends. A Lambda function calls it before it
// returns, as its process may be frozen after.
func (r *Recorder) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.pending.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close appends what is queued (within ctx) and stops the recorder.
func (r *Recorder) Close(ctx context.Context) error {
	err := r.Flush(ctx)
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.q)
	}
	r.mu.Unlock()
	<-r.done
	return err
}

func (r *Recorder) run() {
	defer close(r.done)
	for it := range r.q {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := r.log.AppendEvent(ctx, it.worker, it.e); err != nil {
			r.logger.Warn("cannot append a worker event", "worker", it.worker, "kind", it.e.Kind, "err", err)
		} else if r.bell != nil {
			if err := r.bell.Ring(ctx, Topic(it.worker)); err != nil {
				r.logger.Warn("cannot ring a worker's event topic", "worker", it.worker, "err", err)
			}
		}
		cancel()
		r.pending.Done()
	}
}

// Limits of what Clean keeps.
const (
	maxFields     = 8
	maxFieldKey   = 32
	maxFieldValue = 120
)

// Clean cuts e to what a log keeps: Text to its first line of at most
// store.MaxEventText bytes, at most 8 fields of short values (the first 8
// by name, so which survive never depends on a map's order), and the
// whole within store.MaxEventBytes however its text escapes.
func Clean(e store.Event) store.Event {
	e.Text = FirstLine(e.Text, store.MaxEventText)
	if len(e.Fields) > 0 {
		f := make(map[string]string, min(len(e.Fields), maxFields))
		for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
			if len(f) == maxFields {
				break
			}
			v := e.Fields[k]
			if v == "" {
				continue
			}
			f[Cut(k, maxFieldKey)] = FirstLine(v, maxFieldValue)
		}
		e.Fields = f
	}
	for n := maxFieldValue; ; n /= 2 {
		b, err := json.Marshal(e)
		if err == nil && len(b) <= store.MaxEventBytes || n < 8 {
			return e
		}
		e.Text = Cut(e.Text, n)
		for k, v := range e.Fields {
			e.Fields[k] = Cut(v, n/2)
		}
	}
}

// FirstLine is s's first non-empty line, trimmed and cut to n bytes.
func FirstLine(s string, n int) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i]) + " …"
	}
	return Cut(s, n)
}

// Cut cuts s to at most n bytes on a rune boundary, marking the cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return strings.ToValidUTF8(s, "�")
	}
	s = s[:max(n-len("…"), 0)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Read answers up to limit (all when limit <= 0) of worker's events after
// the cursor after. When events after the cursor were dropped (the log
// keeps the latest store.MaxEvents), the answer starts with one reset
// event numbered just below the oldest retained one, never a silent gap:
// a reader that moves its cursor to each event's Seq reads on from there.
func Read(ctx context.Context, log Log, worker string, after int64, limit int) ([]store.Event, error) {
	es, err := log.ListEvents(ctx, worker, after, limit)
	if err != nil || len(es) == 0 || es[0].Seq == after+1 {
		return es, err
	}
	first := es[0].Seq
	reset := store.Event{Seq: first - 1, At: es[0].At, Kind: KindReset,
		Text:   fmt.Sprintf("events %d to %d were dropped: the log keeps a worker's latest %d", after+1, first-1, store.MaxEvents),
		Fields: map[string]string{"from": strconv.FormatInt(after+1, 10), "to": strconv.FormatInt(first-1, 10)}}
	return append([]store.Event{reset}, es...), nil
}
