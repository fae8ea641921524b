package storetest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// recordCase adapts one kind of versioned record (effect, resource, mailbox
// head) to the checks they share.
type recordCase[T any] struct {
	full func(key string) T
	get  func(ctx context.Context, s store.Store, key string) (T, store.Version, error)
	put  func(ctx context.Context, s store.Store, r T, prev store.Version) (store.Version, error)
	// count reads and withCount sets a number kept in the record, for the
	// read-modify-write races.
	count     func(T) int64
	withCount func(T, int64) T
	// zero, when set, is what a Get of a missing record answers (with
	// NoVersion and no error) instead of NotFound.
	zero func(key string) T
}

var effectCase = recordCase[store.Effect]{
	full: fullEffect,
	get: func(ctx context.Context, s store.Store, key string) (store.Effect, store.Version, error) {
		return s.GetEffect(ctx, key)
	},
	put: func(ctx context.Context, s store.Store, e store.Effect, prev store.Version) (store.Version, error) {
		return s.PutEffect(ctx, e, prev)
	},
	count: func(e store.Effect) int64 { n, _ := strconv.ParseInt(e.Fingerprint, 10, 64); return n },
	withCount: func(e store.Effect, n int64) store.Effect {
		e.Fingerprint = strconv.FormatInt(n, 10)
		return e
	},
}

var resourceCase = recordCase[store.Resource]{
	full: func(handle string) store.Resource { return fullResource("worker", handle) },
	get: func(ctx context.Context, s store.Store, handle string) (store.Resource, store.Version, error) {
		return s.GetResource(ctx, "worker", handle)
	},
	put: func(ctx context.Context, s store.Store, r store.Resource, prev store.Version) (store.Version, error) {
		return s.PutResource(ctx, r, prev)
	},
	count: func(r store.Resource) int64 { n, _ := strconv.ParseInt(r.Owner, 10, 64); return n },
	withCount: func(r store.Resource, n int64) store.Resource {
		r.Owner = strconv.FormatInt(n, 10)
		return r
	},
}

var mailboxCase = recordCase[store.Mailbox]{
	full: fullMailbox,
	get: func(ctx context.Context, s store.Store, run string) (store.Mailbox, store.Version, error) {
		return s.GetMailbox(ctx, run)
	},
	put: func(ctx context.Context, s store.Store, m store.Mailbox, prev store.Version) (store.Version, error) {
		return s.PutMailbox(ctx, m, prev)
	},
	count: func(m store.Mailbox) int64 { return m.Acked },
	withCount: func(m store.Mailbox, n int64) store.Mailbox {
		m.Acked = n
		return m
	},
	zero: func(run string) store.Mailbox { return store.Mailbox{Run: run} },
}

func testRecords[T any](t *testing.T, open func(*testing.T) store.Store, c recordCase[T]) {
	// getMissing checks that key reads as missing.
	getMissing := func(t *testing.T, s store.Store, key string) {
		t.Helper()
		got, v, err := c.get(t.Context(), s, key)
		if c.zero != nil {
			mustOK(t, "get missing", err)
			checkSame(t, "missing record", got, c.zero(key))
		} else {
			wantKind(t, "get missing", err, galleyerr.NotFound)
		}
		if v != store.NoVersion {
			t.Errorf("get missing: version %d, want NoVersion", v)
		}
	}
	// check reads key and compares it with want at version wantV.
	check := func(t *testing.T, s store.Store, key string, want T, wantV store.Version) {
		t.Helper()
		got, v, err := c.get(t.Context(), s, key)
		mustOK(t, "get", err)
		if v != wantV {
			t.Errorf("get: version %d, want %d", v, wantV)
		}
		checkSame(t, "stored record", got, want)
	}

	t.Run("GetMissing", func(t *testing.T) {
		getMissing(t, open(t), "missing")
	})

	t.Run("CreateIfAbsent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		r := c.withCount(c.full("k"), 1)
		v1, err := c.put(ctx, s, r, store.NoVersion)
		mustOK(t, "create", err)
		if v1 <= store.NoVersion {
			t.Fatalf("create answered version %d, want > NoVersion", v1)
		}
		check(t, s, "k", r, v1)
		// A second create loses and changes nothing.
		_, err = c.put(ctx, s, c.withCount(r, 2), store.NoVersion)
		wantKind(t, "create existing", err, galleyerr.Conflict)
		check(t, s, "k", r, v1)
	})

	t.Run("ConditionalUpdate", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		r1 := c.withCount(c.full("k"), 1)
		v1, err := c.put(ctx, s, r1, store.NoVersion)
		mustOK(t, "create", err)
		r2 := c.withCount(r1, 2)
		v2, err := c.put(ctx, s, r2, v1)
		mustOK(t, "update at the read version", err)
		if v2 <= v1 {
			t.Errorf("update answered version %d after %d, want greater", v2, v1)
		}
		for _, tc := range []struct {
			name string
			prev store.Version
		}{
			{"stale version", v1},
			{"future version", v2 + 1},
			{"NoVersion on an existing record", store.NoVersion},
		} {
			_, err := c.put(ctx, s, c.withCount(r1, 3), tc.prev)
			wantKind(t, tc.name, err, galleyerr.Conflict)
		}
		check(t, s, "k", r2, v2)
		// An expected version on a missing record loses and creates nothing.
		_, err = c.put(ctx, s, c.full("other"), v1)
		wantKind(t, "update of a missing record", err, galleyerr.Conflict)
		getMissing(t, s, "other")
	})

	t.Run("VersionsIncrease", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		r := c.full("k")
		var v store.Version
		for i := range int64(10) {
			r = c.withCount(r, i)
			nv, err := c.put(ctx, s, r, v)
			mustOK(t, fmt.Sprintf("write %d", i), err)
			if nv <= v {
				t.Fatalf("write %d answered version %d after %d, want greater", i, nv, v)
			}
			v = nv
		}
		check(t, s, "k", r, v)
	})

	t.Run("RoundTrip", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		r := c.full("round-trip")
		v, err := c.put(ctx, s, r, store.NoVersion)
		mustOK(t, "create", err)
		check(t, s, "round-trip", r, v)
		// An update replaces the whole record: a field set to its zero
		// value is gone, not merged with the old one.
		z := keysOnly(r)
		v2, err := c.put(ctx, s, z, v)
		mustOK(t, "update to a bare record", err)
		check(t, s, "round-trip", z, v2)
	})

	t.Run("KeysIndependent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		va, err := c.put(ctx, s, c.withCount(c.full("a"), 1), store.NoVersion)
		mustOK(t, "create a", err)
		vb, err := c.put(ctx, s, c.withCount(c.full("b"), 1), store.NoVersion)
		mustOK(t, "create b", err)
		_, err = c.put(ctx, s, c.withCount(c.full("a"), 2), va)
		mustOK(t, "update a", err)
		check(t, s, "b", c.withCount(c.full("b"), 1), vb)
	})

	t.Run("CreateRace", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		const n = 8
		errs := make([]error, n)
		versions := make([]store.Version, n)
		race(n, func(i int) {
			versions[i], errs[i] = c.put(ctx, s, c.withCount(c.full("k"), int64(i)), store.NoVersion)
		})
		winner := oneWinner(t, errs)
		if winner >= 0 {
			check(t, s, "k", c.withCount(c.full("k"), int64(winner)), versions[winner])
		}
	})

	t.Run("UpdateRace", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		v0, err := c.put(ctx, s, c.withCount(c.full("k"), 100), store.NoVersion)
		mustOK(t, "create", err)
		const n = 8
		errs := make([]error, n)
		versions := make([]store.Version, n)
		race(n, func(i int) {
			versions[i], errs[i] = c.put(ctx, s, c.withCount(c.full("k"), int64(i)), v0)
		})
		winner := oneWinner(t, errs)
		if winner >= 0 {
			check(t, s, "k", c.withCount(c.full("k"), int64(winner)), versions[winner])
		}
	})

	// Read-modify-write increments retried on Conflict: the final count is
	// exact only if the version condition is checked inside the write.
	t.Run("CASRace", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		const workers, each = 4, 20
		wins := make([]int, workers)
		race(workers, func(w int) {
			for range each {
				for attempt := 0; ; attempt++ {
					if attempt == 1000 {
						t.Errorf("worker %d: no increment after 1000 attempts", w)
						return
					}
					cur, v, err := c.get(ctx, s, "counter")
					if err != nil && !galleyerr.Is(galleyerr.NotFound, err) {
						t.Errorf("worker %d: get: %v", w, err)
						return
					}
					if v == store.NoVersion {
						cur = c.full("counter")
						cur = c.withCount(cur, 0)
					}
					nv, err := c.put(ctx, s, c.withCount(cur, c.count(cur)+1), v)
					if galleyerr.Is(galleyerr.Conflict, err) {
						continue
					}
					if err != nil {
						t.Errorf("worker %d: put: %v", w, err)
						return
					}
					if nv <= v {
						t.Errorf("worker %d: put answered version %d after %d", w, nv, v)
					}
					wins[w]++
					break
				}
			}
		})
		got, _, err := c.get(ctx, s, "counter")
		mustOK(t, "final get", err)
		total := 0
		for _, n := range wins {
			total += n
		}
		if c.count(got) != workers*each || total != workers*each {
			t.Errorf("final count %d after %d acknowledged increments, want %d", c.count(got), total, workers*each)
		}
	})
}

// keysOnly keeps a record's identifying fields and zeroes the rest.
func keysOnly[T any](r T) T {
	switch r := any(r).(type) {
	case store.Effect:
		return any(store.Effect{Key: r.Key}).(T)
	case store.Resource:
		return any(store.Resource{Kind: r.Kind, Handle: r.Handle}).(T)
	case store.Mailbox:
		return any(store.Mailbox{Run: r.Run}).(T)
	}
	panic(fmt.Sprintf("keysOnly: %T", r))
}

// race runs f(0..n-1) in n goroutines released together and waits for all.
func race(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}

// oneWinner checks that exactly one of errs is nil and the others are
// Conflict, and returns the winner's index (or -1).
func oneWinner(t *testing.T, errs []error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		default:
			wantKind(t, fmt.Sprintf("writer %d", i), err, galleyerr.Conflict)
		}
	}
	if winner < 0 {
		t.Errorf("no writer won")
	}
	return winner
}
