package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

func testSessions(t *testing.T, open func(*testing.T) store.Store) {
	session := func(hash string, life time.Duration) store.Session {
		now := time.Now().Truncate(time.Millisecond)
		return store.Session{IDHash: hash, TokenFingerprint: "fp-" + hash, Created: now, Expires: now.Add(life)}
	}

	t.Run("RoundTripAndDelete", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		want := session("h-1", time.Hour)
		mustOK(t, "put", s.PutSession(ctx, want))
		mustOK(t, "put another", s.PutSession(ctx, session("h-2", time.Hour)))
		got, err := s.GetSession(ctx, "h-1")
		mustOK(t, "get", err)
		if got.IDHash != want.IDHash || got.TokenFingerprint != want.TokenFingerprint ||
			!got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) {
			t.Fatalf("session read back as %+v, stored %+v", got, want)
		}
		mustOK(t, "delete", s.DeleteSession(ctx, "h-1"))
		_, err = s.GetSession(ctx, "h-1")
		wantKind(t, "get after delete", err, galleyerr.NotFound)
		mustOK(t, "delete again", s.DeleteSession(ctx, "h-1"))
		if _, err := s.GetSession(ctx, "h-2"); err != nil {
			t.Fatalf("deleting one session took another: %v", err)
		}
		_, err = s.GetSession(ctx, "h-never")
		wantKind(t, "get of an unknown session", err, galleyerr.NotFound)
	})

	t.Run("OneLiveSessionAnID", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		mustOK(t, "put", s.PutSession(ctx, session("h-1", time.Hour)))
		wantKind(t, "a second put of a live id", s.PutSession(ctx, session("h-1", time.Hour)), galleyerr.Conflict)
	})

	t.Run("ExpiredIsGone", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		mustOK(t, "put", s.PutSession(ctx, session("h-old", -2*time.Second)))
		_, err := s.GetSession(ctx, "h-old")
		wantKind(t, "get of an expired session", err, galleyerr.NotFound)
		mustOK(t, "put over an expired session", s.PutSession(ctx, session("h-old", time.Hour)))
		if _, err := s.GetSession(ctx, "h-old"); err != nil {
			t.Fatalf("the session put over an expired one: %v", err)
		}
	})

	t.Run("Invalid", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		wantKind(t, "put of an empty id hash", s.PutSession(ctx, session("", time.Hour)), galleyerr.Invalid)
		wantKind(t, "put of a session that never expires", s.PutSession(ctx, store.Session{IDHash: "h-1"}), galleyerr.Invalid)
		_, err := s.GetSession(ctx, "")
		wantKind(t, "get of an empty id hash", err, galleyerr.Invalid)
		wantKind(t, "delete of an empty id hash", s.DeleteSession(ctx, ""), galleyerr.Invalid)
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Puts of one id racing: exactly one stores it.
		s := open(t)
		const racers = 8
		var wg sync.WaitGroup
		errs := make(chan error, racers)
		for i := range racers {
			wg.Go(func() {
				se := session("h-race", time.Hour)
				se.TokenFingerprint = fmt.Sprint("fp-", i)
				errs <- s.PutSession(t.Context(), se)
			})
		}
		wg.Wait()
		close(errs)
		won := 0
		for err := range errs {
			switch {
			case err == nil:
				won++
			case galleyerr.KindOf(err) != galleyerr.Conflict:
				t.Errorf("a racing put: %v, want success or Conflict", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d of %d concurrent puts of one session id succeeded, want 1", won, racers)
		}
	})
}

func testTallies(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("Counts", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		live := time.Now().Add(time.Minute)
		for want := int64(1); want <= 3; want++ {
			n, err := s.AddTally(ctx, "login#a", live)
			mustOK(t, "add", err)
			if n != want {
				t.Fatalf("add %d answered %d", want, n)
			}
		}
		n, err := s.AddTally(ctx, "login#b", live)
		mustOK(t, "add to another", err)
		if n != 1 {
			t.Fatalf("another tally's first add answered %d, want 1", n)
		}
	})

	t.Run("ExpiredStartsOver", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		past := time.Now().Add(-2 * time.Second)
		for range 2 {
			_, err := s.AddTally(ctx, "login#old", past)
			mustOK(t, "add to an expired tally", err)
		}
		live := time.Now().Add(time.Minute)
		for want := int64(1); want <= 2; want++ {
			n, err := s.AddTally(ctx, "login#old", live)
			mustOK(t, "add after the expiry", err)
			if n != want {
				t.Fatalf("add %d after the tally expired answered %d: an expired tally still counts", want, n)
			}
		}
	})

	t.Run("KeepsItsFirstExpiry", func(t *testing.T) {
		// A later add's expiry does not extend the window.
		s, ctx := open(t), t.Context()
		_, err := s.AddTally(ctx, "login#w", time.Now().Add(2*time.Second))
		mustOK(t, "first add", err)
		_, err = s.AddTally(ctx, "login#w", time.Now().Add(time.Hour))
		mustOK(t, "second add", err)
		time.Sleep(2500 * time.Millisecond)
		n, err := s.AddTally(ctx, "login#w", time.Now().Add(time.Hour))
		mustOK(t, "add after the first expiry", err)
		if n != 1 {
			t.Fatalf("an add after the first add's expiry answered %d, want 1 (a later add moved the expiry)", n)
		}
	})

	t.Run("EmptyKey", func(t *testing.T) {
		s := open(t)
		_, err := s.AddTally(t.Context(), "", time.Now().Add(time.Minute))
		wantKind(t, "add to an empty key", err, galleyerr.Invalid)
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Adds racing on one tally each answer a count of their own.
		s := open(t)
		const racers = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		var got []int64
		live := time.Now().Add(time.Minute)
		for range racers {
			wg.Go(func() {
				n, err := s.AddTally(t.Context(), "login#race", live)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got = append(got, n)
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(got)
		for i, n := range got {
			if n != int64(i+1) {
				t.Fatalf("concurrent adds answered %v, want 1 to %d once each", got, racers)
			}
		}
	})
}
