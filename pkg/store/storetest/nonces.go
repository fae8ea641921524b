package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

func testNonces(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("OnceWhileAlive", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		live := time.Now().Add(time.Minute)
		fresh, err := s.UseNonce(ctx, "jti-1", live)
		mustOK(t, "first use", err)
		if !fresh {
			t.Fatal("the first use of a nonce answered used")
		}
		fresh, err = s.UseNonce(ctx, "jti-1", live)
		mustOK(t, "second use", err)
		if fresh {
			t.Fatal("a nonce was used twice while alive: a replayed proof would pass")
		}
		fresh, err = s.UseNonce(ctx, "jti-2", live)
		mustOK(t, "another nonce", err)
		if !fresh {
			t.Fatal("another nonce answered used")
		}
	})

	t.Run("ExpiredIsFree", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		past := time.Now().Add(-2 * time.Second)
		_, err := s.UseNonce(ctx, "jti-old", past)
		mustOK(t, "use", err)
		fresh, err := s.UseNonce(ctx, "jti-old", time.Now().Add(time.Minute))
		mustOK(t, "use again", err)
		if !fresh {
			t.Fatal("an expired nonce still counts as used")
		}
	})

	t.Run("EmptyKey", func(t *testing.T) {
		s := open(t)
		_, err := s.UseNonce(t.Context(), "", time.Now().Add(time.Minute))
		wantKind(t, "use of an empty nonce", err, galleyerr.Invalid)
	})

	t.Run("Concurrent", func(t *testing.T) {
		// Replays racing the original: exactly one is fresh.
		s := open(t)
		const racers = 8
		var fresh sync.WaitGroup
		var mu sync.Mutex
		won := 0
		live := time.Now().Add(time.Minute)
		for range racers {
			fresh.Go(func() {
				ok, err := s.UseNonce(t.Context(), "jti-race", live)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		fresh.Wait()
		if won != 1 {
			t.Fatalf("%d of %d concurrent uses of one nonce answered fresh, want 1", won, racers)
		}
	})
}
