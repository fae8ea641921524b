// Package faultstore wraps a store.Store and injects faults into its calls,
// in the manner of Temporal's persistence fault injection, so tests can
// prove what galley does when its store fails: a call that fails before
// writing, a write whose answer is lost, a slow call, a lost condition.
//
// Faults are scripted (Inject: this method, this key, after so many calls,
// so many times) or drawn at a seeded rate (WithRate), so every run of a
// test injects the same faults given the same order of calls. Counters say
// how many calls each method saw and how many faults it got.
package faultstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// When says what a fault does to a call.
type When int

const (
	// Before fails the call with Unavailable without calling the store:
	// nothing is written.
	Before When = iota
	// After calls the store, then fails with Unavailable: the write
	// happened, but its answer is lost.
	After
	// Delay waits (Fault.Delay, Fault.Gate), then calls the store as usual.
	Delay
	// Conflict fails the call with Conflict without calling the store, as
	// if another writer had won.
	Conflict
)

func (w When) String() string {
	switch w {
	case Before:
		return "before"
	case After:
		return "after"
	case Delay:
		return "delay"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("When(%d)", int(w))
}

// Methods are the store methods faults can name.
var Methods = []string{
	"GetEffect", "PutEffect",
	"GetResource", "PutResource", "ListResources",
	"GetMailbox", "PutMailbox", "AppendMessage", "ListMessages",
	"AppendInbox", "ListInbox",
	"NextCount", "UseNonce",
	"PutSession", "GetSession", "DeleteSession", "AddTally",
	"Close",
}

// Call describes one call to the store.
type Call struct {
	Method string
	// Key is the record the call is about: the effect key, "kind/handle"
	// of a resource, the run, the worker, the counter, the nonce, the
	// session's id hash, the tally; "" for ListResources and Close.
	Key string
}

// Fault is one scripted fault.
type Fault struct {
	// Method is the store method it applies to (see Methods); "" means
	// every method.
	Method string
	// Key limits the fault to calls about this record (see Call.Key); ""
	// means any.
	Key  string
	When When
	// Delay is waited before the store is called (or the fault answered),
	// whatever When is. A done context ends the wait: the call then fails
	// with Unavailable and nothing is written.
	Delay time.Duration
	// Gate, if set, holds the call at the same point until it is closed:
	// a way to pause a call deterministically and act while it waits.
	Gate <-chan struct{}
	// Hook, if set, is called when the fault fires, before any wait: a
	// way to learn that a call reached the fault point.
	Hook func(Call)
	// Skip lets this many matching calls through before the fault fires.
	Skip int
	// Times is how often the fault fires; 0 means on every matching call.
	Times int
}

// ErrInjected is the cause of every error the decorator makes up, so that
// a test can tell an injected failure from a real one.
var ErrInjected = errors.New("injected fault")

// Store is the decorator. It is safe for concurrent use.
type Store struct {
	inner store.Store

	mu       sync.Mutex
	faults   []*scripted
	rates    []*rate
	calls    map[string]int
	injected map[string]int
}

type scripted struct {
	Fault
	seen, fired int
}

type rate struct {
	method string
	p      float64
	rng    *rand.Rand
}

var _ store.Store = (*Store)(nil)

// Option configures New.
type Option func(*Store)

// WithFaults scripts faults from the start, as Inject does.
func WithFaults(fs ...Fault) Option {
	return func(s *Store) {
		for _, f := range fs {
			s.Inject(f)
		}
	}
}

// WithRate makes each call of method ("" for every method) fail with
// probability p, drawn from a source seeded with seed; a failing call fails
// Before or After the store call, evenly. Scripted faults are checked first.
func WithRate(method string, p float64, seed int64) Option {
	return func(s *Store) { s.SetRate(method, p, seed) }
}

// New wraps inner.
func New(inner store.Store, opts ...Option) *Store {
	s := &Store{inner: inner, calls: map[string]int{}, injected: map[string]int{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

func checkMethod(m string) {
	if m == "" {
		return
	}
	for _, k := range Methods {
		if k == m {
			return
		}
	}
	panic(fmt.Sprintf("faultstore: no store method %q", m))
}

// Inject adds a scripted fault. Faults are checked in the order they were
// added; the first that fires decides the call. It panics on a method name
// the store does not have, to catch a typo in a test.
func (s *Store) Inject(f Fault) {
	checkMethod(f.Method)
	if f.When < Before || f.When > Conflict {
		panic(fmt.Sprintf("faultstore: bad When %d", f.When))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &scripted{Fault: f})
}

// SetRate adds a rate of faults, as WithRate does.
func (s *Store) SetRate(method string, p float64, seed int64) {
	checkMethod(method)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rates = append(s.rates, &rate{method: method, p: p, rng: rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))})
}

// Clear removes every scripted fault and rate; the counters stay.
func (s *Store) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.rates = nil, nil
}

// Calls is how many calls method ("" for all) has seen.
func (s *Store) Calls(method string) int { return s.count(s.calls, method) }

// Injected is how many faults method ("" for all) has got.
func (s *Store) Injected(method string) int { return s.count(s.injected, method) }

func (s *Store) count(m map[string]int, method string) int {
	checkMethod(method)
	s.mu.Lock()
	defer s.mu.Unlock()
	if method != "" {
		return m[method]
	}
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// pick counts the call and returns the fault to apply, if any.
func (s *Store) pick(c Call) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[c.Method]++
	for _, f := range s.faults {
		if (f.Method != "" && f.Method != c.Method) || (f.Key != "" && f.Key != c.Key) ||
			(f.Times > 0 && f.fired >= f.Times) {
			continue
		}
		if f.seen++; f.seen <= f.Skip {
			continue
		}
		f.fired++
		s.injected[c.Method]++
		return f.Fault, true
	}
	for _, r := range s.rates {
		if (r.method == "" || r.method == c.Method) && r.rng.Float64() < r.p {
			s.injected[c.Method]++
			return Fault{When: []When{Before, After}[r.rng.IntN(2)]}, true
		}
	}
	return Fault{}, false
}

// do runs call, the real store call, under whatever fault applies.
func (s *Store) do(ctx context.Context, c Call, call func() error) error {
	f, ok := s.pick(c)
	if !ok {
		return call()
	}
	op := galleyerr.Op("faultstore." + c.Method)
	if f.Hook != nil {
		f.Hook(c)
	}
	if f.Gate != nil {
		select {
		case <-f.Gate:
		case <-ctx.Done():
			return galleyerr.E(op, galleyerr.Unavailable, "context done while held", errors.Join(ErrInjected, ctx.Err()))
		}
	}
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return galleyerr.E(op, galleyerr.Unavailable, "context done while delayed", errors.Join(ErrInjected, ctx.Err()))
		}
	}
	switch f.When {
	case Before:
		return galleyerr.E(op, galleyerr.Unavailable, "failed before the call", ErrInjected)
	case Conflict:
		return galleyerr.E(op, galleyerr.Conflict, "lost the condition", ErrInjected)
	case After:
		if err := call(); err != nil {
			return err
		}
		return galleyerr.E(op, galleyerr.Unavailable, "answer lost after the call", ErrInjected)
	}
	return call()
}

func resourceKey(kind, handle string) string { return kind + "/" + handle }

func (s *Store) GetEffect(ctx context.Context, key string) (e store.Effect, v store.Version, err error) {
	err = s.do(ctx, Call{"GetEffect", key}, func() (err error) {
		e, v, err = s.inner.GetEffect(ctx, key)
		return err
	})
	if err != nil {
		return store.Effect{}, store.NoVersion, err
	}
	return e, v, nil
}

func (s *Store) PutEffect(ctx context.Context, e store.Effect, prev store.Version) (v store.Version, err error) {
	err = s.do(ctx, Call{"PutEffect", e.Key}, func() (err error) {
		v, err = s.inner.PutEffect(ctx, e, prev)
		return err
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

func (s *Store) GetResource(ctx context.Context, kind, handle string) (r store.Resource, v store.Version, err error) {
	err = s.do(ctx, Call{"GetResource", resourceKey(kind, handle)}, func() (err error) {
		r, v, err = s.inner.GetResource(ctx, kind, handle)
		return err
	})
	if err != nil {
		return store.Resource{}, store.NoVersion, err
	}
	return r, v, nil
}

func (s *Store) PutResource(ctx context.Context, r store.Resource, prev store.Version) (v store.Version, err error) {
	err = s.do(ctx, Call{"PutResource", resourceKey(r.Kind, r.Handle)}, func() (err error) {
		v, err = s.inner.PutResource(ctx, r, prev)
		return err
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

func (s *Store) ListResources(ctx context.Context) (rs []store.Resource, err error) {
	err = s.do(ctx, Call{"ListResources", ""}, func() (err error) {
		rs, err = s.inner.ListResources(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rs, nil
}

func (s *Store) GetMailbox(ctx context.Context, run string) (m store.Mailbox, v store.Version, err error) {
	err = s.do(ctx, Call{"GetMailbox", run}, func() (err error) {
		m, v, err = s.inner.GetMailbox(ctx, run)
		return err
	})
	if err != nil {
		return store.Mailbox{}, store.NoVersion, err
	}
	return m, v, nil
}

func (s *Store) PutMailbox(ctx context.Context, m store.Mailbox, prev store.Version) (v store.Version, err error) {
	err = s.do(ctx, Call{"PutMailbox", m.Run}, func() (err error) {
		v, err = s.inner.PutMailbox(ctx, m, prev)
		return err
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

func (s *Store) AppendMessage(ctx context.Context, run string, m store.Message) (seq int64, existed bool, err error) {
	err = s.do(ctx, Call{"AppendMessage", run}, func() (err error) {
		seq, existed, err = s.inner.AppendMessage(ctx, run, m)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	return seq, existed, nil
}

func (s *Store) ListMessages(ctx context.Context, run string, after int64, limit int) (ms []store.Message, err error) {
	err = s.do(ctx, Call{"ListMessages", run}, func() (err error) {
		ms, err = s.inner.ListMessages(ctx, run, after, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ms, nil
}

func (s *Store) AppendInbox(ctx context.Context, worker string, item store.InboxItem) (seq int64, err error) {
	err = s.do(ctx, Call{"AppendInbox", worker}, func() (err error) {
		seq, err = s.inner.AppendInbox(ctx, worker, item)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

func (s *Store) NextCount(ctx context.Context, name string) (n int64, err error) {
	err = s.do(ctx, Call{"NextCount", name}, func() (err error) {
		n, err = s.inner.NextCount(ctx, name)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) UseNonce(ctx context.Context, key string, expires time.Time) (fresh bool, err error) {
	err = s.do(ctx, Call{"UseNonce", key}, func() (err error) {
		fresh, err = s.inner.UseNonce(ctx, key, expires)
		return err
	})
	if err != nil {
		return false, err
	}
	return fresh, nil
}

func (s *Store) PutSession(ctx context.Context, se store.Session) error {
	return s.do(ctx, Call{"PutSession", se.IDHash}, func() error { return s.inner.PutSession(ctx, se) })
}

func (s *Store) GetSession(ctx context.Context, idHash string) (se store.Session, err error) {
	err = s.do(ctx, Call{"GetSession", idHash}, func() (err error) {
		se, err = s.inner.GetSession(ctx, idHash)
		return err
	})
	if err != nil {
		return store.Session{}, err
	}
	return se, nil
}

func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	return s.do(ctx, Call{"DeleteSession", idHash}, func() error { return s.inner.DeleteSession(ctx, idHash) })
}

func (s *Store) AddTally(ctx context.Context, key string, expires time.Time) (n int64, err error) {
	err = s.do(ctx, Call{"AddTally", key}, func() (err error) {
		n, err = s.inner.AddTally(ctx, key, expires)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) ListInbox(ctx context.Context, worker string, after int64, limit int) (items []store.InboxItem, err error) {
	err = s.do(ctx, Call{"ListInbox", worker}, func() (err error) {
		items, err = s.inner.ListInbox(ctx, worker, after, limit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// Close closes the wrapped store (faults apply to it too).
func (s *Store) Close() error {
	return s.do(context.Background(), Call{"Close", ""}, s.inner.Close)
}
