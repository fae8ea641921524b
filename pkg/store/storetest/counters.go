package storetest

import (
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

func testCounters(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("Grows", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		var last int64
		for i := range 3 {
			n, err := s.NextCount(ctx, store.CounterAgentUID)
			mustOK(t, "next count", err)
			if n <= last {
				t.Fatalf("count %d answered %d after %d: a counter only grows", i, n, last)
			}
			last = n
		}
		if last != 3 {
			// No fault here, so nothing may skip: a fresh counter counts 1, 2, 3.
			t.Errorf("third count of a fresh counter is %d, want 3", last)
		}
	})

	t.Run("Independent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		for range 2 {
			_, err := s.NextCount(ctx, "a")
			mustOK(t, "next a", err)
		}
		n, err := s.NextCount(ctx, "b")
		mustOK(t, "next b", err)
		if n != 1 {
			t.Errorf("first count of another counter is %d, want 1", n)
		}
	})

	t.Run("EmptyName", func(t *testing.T) {
		s := open(t)
		_, err := s.NextCount(t.Context(), "")
		wantKind(t, "next count of an empty name", err, galleyerr.Invalid)
	})

	t.Run("Concurrent", func(t *testing.T) {
		// N concurrent allocations answer N distinct values: no two
		// workers of a house ever get one uid.
		s := open(t)
		const writers, each = 8, 12
		var (
			mu   sync.Mutex
			seen = map[int64]int{}
			wg   sync.WaitGroup
		)
		errs := make(chan error, writers*each)
		for range writers {
			wg.Go(func() {
				for range each {
					n, err := s.NextCount(t.Context(), store.CounterAgentUID)
					if err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					seen[n]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent next count: %v", err)
		}
		if len(seen) != writers*each {
			t.Errorf("%d concurrent counts gave %d distinct values", writers*each, len(seen))
		}
		for n, k := range seen {
			if k > 1 {
				t.Errorf("value %d answered %d times", n, k)
			}
			if n < 1 {
				t.Errorf("value %d is below 1", n)
			}
		}
		n, err := s.NextCount(t.Context(), store.CounterAgentUID)
		mustOK(t, "next count after the race", err)
		for v := range seen {
			if n <= v {
				t.Fatalf("count after the race is %d, not above %d", n, v)
			}
		}
	})
}

// testCounterDurable checks that a counter carries on after stop (a close
// or a kill) and a reopen: a value handed out before is never handed out
// again.
func testCounterDurable(t *testing.T, openAt func(*testing.T, string) store.Store, stop func(*testing.T, store.Store)) {
	dir := t.TempDir()
	var last int64
	for session := range 3 {
		s := openAt(t, dir)
		for range 2 {
			n, err := s.NextCount(t.Context(), store.CounterAgentUID)
			mustOK(t, "next count", err)
			if n <= last {
				t.Fatalf("session %d: count %d after %d", session, n, last)
			}
			last = n
		}
		stop(t, s)
	}
	s := openAt(t, dir)
	defer func() { mustOK(t, "close", s.Close()) }()
	n, err := s.NextCount(t.Context(), store.CounterAgentUID)
	mustOK(t, "next count", err)
	if n <= last {
		t.Fatalf("last session: count %d after %d", n, last)
	}
}
