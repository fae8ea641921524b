package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/store/storetest"
)

// Without faults the decorator is transparent.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := faultstore.New(memstore.New())
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// write is one kind of write, and how to tell whether it happened.
type write struct {
	method  string
	do      func(ctx context.Context, s store.Store) error
	written func(ctx context.Context, s store.Store) bool
}

var writes = []write{
	{"PutEffect",
		func(ctx context.Context, s store.Store) error {
			_, err := s.PutEffect(ctx, store.Effect{Key: "k"}, store.NoVersion)
			return err
		},
		func(ctx context.Context, s store.Store) bool { _, v, _ := s.GetEffect(ctx, "k"); return v != 0 }},
	{"PutResource",
		func(ctx context.Context, s store.Store) error {
			_, err := s.PutResource(ctx, store.Resource{Kind: "worker", Handle: "w"}, store.NoVersion)
			return err
		},
		func(ctx context.Context, s store.Store) bool {
			_, v, _ := s.GetResource(ctx, "worker", "w")
			return v != 0
		}},
	{"PutMailbox",
		func(ctx context.Context, s store.Store) error {
			_, err := s.PutMailbox(ctx, store.Mailbox{Run: "run"}, store.NoVersion)
			return err
		},
		func(ctx context.Context, s store.Store) bool { _, v, _ := s.GetMailbox(ctx, "run"); return v != 0 }},
	{"AppendMessage",
		func(ctx context.Context, s store.Store) error {
			_, _, err := s.AppendMessage(ctx, "run", store.Message{})
			return err
		},
		func(ctx context.Context, s store.Store) bool {
			ms, _ := s.ListMessages(ctx, "run", 0, 0)
			return len(ms) > 0
		}},
	{"AppendInbox",
		func(ctx context.Context, s store.Store) error {
			_, err := s.AppendInbox(ctx, "w", store.InboxItem{})
			return err
		},
		func(ctx context.Context, s store.Store) bool {
			items, _ := s.ListInbox(ctx, "w", 0, 0)
			return len(items) > 0
		}},
	{"NextCount",
		func(ctx context.Context, s store.Store) error {
			_, err := s.NextCount(ctx, "c")
			return err
		},
		// Counting is the only way to read a counter: 2 means the call
		// counted 1.
		func(ctx context.Context, s store.Store) bool { n, _ := s.NextCount(ctx, "c"); return n > 1 }},
}

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		when    faultstore.When
		kind    galleyerr.Kind // of the error; Other for none
		written bool
	}{
		{faultstore.Before, galleyerr.Unavailable, false},
		{faultstore.After, galleyerr.Unavailable, true},
		{faultstore.Conflict, galleyerr.Conflict, false},
		{faultstore.Delay, galleyerr.Other, true},
	} {
		for _, w := range writes {
			t.Run(fmt.Sprint(tc.when, "/", w.method), func(t *testing.T) {
				ctx := t.Context()
				inner := memstore.New()
				s := faultstore.New(inner)
				s.Inject(faultstore.Fault{Method: w.method, When: tc.when, Delay: time.Millisecond, Times: 1})
				err := w.do(ctx, s)
				switch {
				case tc.kind == galleyerr.Other && err != nil:
					t.Errorf("error %v, want none", err)
				case tc.kind != galleyerr.Other && !galleyerr.Is(tc.kind, err):
					t.Errorf("error %v, want kind %v", err, tc.kind)
				case tc.kind != galleyerr.Other && !errors.Is(err, faultstore.ErrInjected):
					t.Errorf("error %v does not wrap ErrInjected", err)
				}
				if got := w.written(ctx, inner); got != tc.written {
					t.Errorf("written: %v, want %v", got, tc.written)
				}
				if n := s.Injected(w.method); n != 1 {
					t.Errorf("Injected(%s) = %d, want 1", w.method, n)
				}
				// Times: 1 is spent: the next call is left alone (it is a
				// Conflict only where the first write happened).
				err = w.do(ctx, s)
				if err != nil && !(tc.written && galleyerr.Is(galleyerr.Conflict, err)) {
					t.Errorf("second call: %v", err)
				}
				if n := s.Injected(""); n != 1 {
					t.Errorf("Injected() = %d after the second call, want 1", n)
				}
			})
		}
	}
}

// An append whose answer was lost (the row is stored) is retried by its
// caller with the same row id: the retry answers the stored row's sequence
// and the run holds the row once.
func TestLostAppendRetried(t *testing.T) {
	ctx := t.Context()
	inner := memstore.New()
	s := faultstore.New(inner, faultstore.WithFaults(faultstore.Fault{Method: "AppendMessage", When: faultstore.After, Times: 1}))
	m := store.Message{Row: protocol.MailMessage{ID: "msg-1", Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}}
	if _, _, err := s.AppendMessage(ctx, "run", m); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("append with a lost answer: %v, want Unavailable", err)
	}
	seq, existed, err := s.AppendMessage(ctx, "run", m)
	if err != nil || seq != 1 || !existed {
		t.Fatalf("retry: (%d, existed %v, %v), want (1, true)", seq, existed, err)
	}
	seq, existed, err = s.AppendMessage(ctx, "run", store.Message{Row: protocol.MailMessage{ID: "msg-2", Kind: protocol.MsgStatus}})
	if err != nil || seq != 2 || existed {
		t.Fatalf("next row: (%d, existed %v, %v), want (2, false)", seq, existed, err)
	}
	ms, err := inner.ListMessages(ctx, "run", 0, 0)
	if err != nil || len(ms) != 2 || ms[0].Row.ID != "msg-1" || ms[1].Row.ID != "msg-2" {
		t.Errorf("the run holds %+v (%v), want msg-1 then msg-2", ms, err)
	}
}

// A call held at a gate has not reached the store; releasing the gate lets
// it through.
func TestGate(t *testing.T) {
	ctx := t.Context()
	inner := memstore.New()
	gate, reached := make(chan struct{}), make(chan faultstore.Call, 1)
	s := faultstore.New(inner, faultstore.WithFaults(faultstore.Fault{
		Method: "PutEffect", When: faultstore.Delay, Gate: gate,
		Hook: func(c faultstore.Call) { reached <- c },
	}))
	done := make(chan error)
	go func() {
		_, err := s.PutEffect(ctx, store.Effect{Key: "k"}, store.NoVersion)
		done <- err
	}()
	if c := <-reached; c != (faultstore.Call{Method: "PutEffect", Key: "k"}) {
		t.Errorf("hook saw %+v", c)
	}
	if _, _, err := inner.GetEffect(ctx, "k"); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Fatalf("the held call reached the store: %v", err)
	}
	// Another writer wins while the first is held; the held one then loses.
	if _, err := inner.PutEffect(ctx, store.Effect{Key: "k", Lease: "other"}, store.NoVersion); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := <-done; !galleyerr.Is(galleyerr.Conflict, err) {
		t.Errorf("released call: %v, want the store's Conflict", err)
	}
}

// A done context ends a delay: the call fails Unavailable, unwritten.
func TestDelayContext(t *testing.T) {
	inner := memstore.New()
	s := faultstore.New(inner)
	ctx, cancel := context.WithCancel(t.Context())
	reached := make(chan struct{})
	s.Inject(faultstore.Fault{Method: "PutEffect", When: faultstore.Delay, Delay: time.Hour, Hook: func(faultstore.Call) { close(reached) }})
	go func() { <-reached; cancel() }()
	_, err := s.PutEffect(ctx, store.Effect{Key: "k"}, store.NoVersion)
	if !galleyerr.Is(galleyerr.Unavailable, err) || !errors.Is(err, context.Canceled) {
		t.Errorf("delayed call with a cancelled context: %v", err)
	}
	if _, _, err := inner.GetEffect(t.Context(), "k"); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("the cancelled call wrote: %v", err)
	}
}

func TestSkipTimesKeyMethod(t *testing.T) {
	ctx := t.Context()
	s := faultstore.New(memstore.New())
	s.Inject(faultstore.Fault{Method: "AppendMessage", Skip: 1, Times: 2})
	s.Inject(faultstore.Fault{Method: "GetEffect", Key: "a"})
	s.Inject(faultstore.Fault{Key: "run-x", When: faultstore.Conflict}) // any method
	var got []bool
	for range 5 {
		_, _, err := s.AppendMessage(ctx, "run", store.Message{})
		got = append(got, err != nil)
	}
	if want := []bool{false, true, true, false, false}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("AppendMessage failures %v, want %v", got, want)
	}
	if _, _, err := s.GetEffect(ctx, "b"); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("GetEffect(b): %v, want the store's NotFound", err)
	}
	for range 2 {
		if _, _, err := s.GetEffect(ctx, "a"); !errors.Is(err, faultstore.ErrInjected) {
			t.Errorf("GetEffect(a): %v, want an injected fault every time", err)
		}
	}
	if _, _, err := s.GetMailbox(ctx, "run-x"); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Errorf("GetMailbox(run-x): %v, want the injected Conflict", err)
	}
	for _, c := range []struct {
		method          string
		calls, injected int
	}{
		{"AppendMessage", 5, 2}, {"GetEffect", 3, 2}, {"GetMailbox", 1, 1}, {"", 9, 5},
	} {
		if s.Calls(c.method) != c.calls || s.Injected(c.method) != c.injected {
			t.Errorf("%q: %d calls, %d injected; want %d, %d", c.method, s.Calls(c.method), s.Injected(c.method), c.calls, c.injected)
		}
	}
	s.Clear()
	if _, _, err := s.GetEffect(ctx, "a"); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("after Clear: %v", err)
	}
}

// pattern runs n PutEffect calls under a rate and tells which failed and
// which of those wrote anyway.
func pattern(t *testing.T, p float64, seed int64, n int) (failed, wrote []bool) {
	inner := memstore.New()
	s := faultstore.New(inner, faultstore.WithRate("PutEffect", p, seed))
	ctx := t.Context()
	for i := range n {
		key := fmt.Sprint("k", i)
		_, err := s.PutEffect(ctx, store.Effect{Key: key}, store.NoVersion)
		if err != nil && !errors.Is(err, faultstore.ErrInjected) {
			t.Fatal(err)
		}
		_, v, _ := inner.GetEffect(ctx, key)
		failed, wrote = append(failed, err != nil), append(wrote, err != nil && v != 0)
	}
	// Other methods are not subject to the rate.
	if _, _, err := s.GetMailbox(ctx, "run"); err != nil {
		t.Errorf("GetMailbox under a PutEffect rate: %v", err)
	}
	if s.Injected("PutEffect") != count(failed) {
		t.Errorf("Injected = %d, %d calls failed", s.Injected("PutEffect"), count(failed))
	}
	return failed, wrote
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestRate(t *testing.T) {
	const n = 200
	if f, _ := pattern(t, 0, 1, n); count(f) != 0 {
		t.Errorf("rate 0 failed %d calls", count(f))
	}
	f, w := pattern(t, 1, 1, n)
	if count(f) != n {
		t.Errorf("rate 1 failed %d of %d calls", count(f), n)
	}
	if count(w) == 0 || count(w) == n {
		t.Errorf("rate 1: %d of %d failed calls wrote; want both kinds (Before and After)", count(w), n)
	}
	f1, w1 := pattern(t, 0.3, 7, n)
	f2, w2 := pattern(t, 0.3, 7, n)
	if fmt.Sprint(f1, w1) != fmt.Sprint(f2, w2) {
		t.Errorf("the same seed gave different faults")
	}
	if c := count(f1); c == 0 || c == n {
		t.Errorf("rate 0.3 failed %d of %d calls", c, n)
	}
	if f3, _ := pattern(t, 0.3, 8, n); fmt.Sprint(f3) == fmt.Sprint(f1) {
		t.Errorf("another seed gave the same faults")
	}
}

// Concurrent callers share a fault's budget exactly.
func TestConcurrentTimes(t *testing.T) {
	s := faultstore.New(memstore.New(), faultstore.WithFaults(faultstore.Fault{Method: "AppendInbox", Times: 100}))
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := s.AppendInbox(t.Context(), "w", store.InboxItem{}); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	items, err := s.ListInbox(t.Context(), "w", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if failed != 100 || s.Injected("AppendInbox") != 100 || len(items) != 300 {
		t.Errorf("%d failed, %d injected, %d stored; want 100, 100, 300", failed, s.Injected("AppendInbox"), len(items))
	}
}

func TestBadMethodPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Inject accepted a method the store does not have")
		}
	}()
	faultstore.New(memstore.New()).Inject(faultstore.Fault{Method: "PutEfect"})
}
