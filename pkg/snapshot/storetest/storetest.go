// Package storetest is the suite every snapshot.Store passes (DirStore,
// S3Store against a fake S3 at the wire): bytes come back as put, a put
// replaces whole, a missing key is NotFound and its Delete no error, a Put
// whose reader fails or whose context ends leaves the key's earlier bytes,
// keys of different workers are apart, and a key that CheckKey refuses is
// refused by every call.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/snapshot"
)

// Subject is a store under test.
type Subject struct {
	// Open returns a fresh, empty store; the suite never closes it.
	Open func(t *testing.T) snapshot.Store
	// Large is a size that makes Put take its longest path (several parts
	// of a multipart upload for S3Store); the suite puts a value this
	// large, so keep it to a few MiB.
	Large int
}

// Run runs the suite.
func Run(t *testing.T, sub Subject) {
	key := snapshot.Key("house", "w-1", "worktree")
	t.Run("RoundTrip", func(t *testing.T) {
		s := sub.Open(t)
		for _, want := range [][]byte{{}, []byte("one"), pattern(sub.Large, 1)} {
			mustPut(t, s, key, want)
			if got := mustGet(t, s, key); !bytes.Equal(got, want) {
				t.Fatalf("put %d bytes, got %d back, or others", len(want), len(got))
			}
		}
	})
	t.Run("Missing", func(t *testing.T) {
		s, ctx := sub.Open(t), t.Context()
		if _, err := s.Get(ctx, key); !galleyerr.Is(galleyerr.NotFound, err) {
			t.Fatalf("Get of a key never put: %v, want NotFound", err)
		}
		if err := s.Delete(ctx, key); err != nil {
			t.Fatalf("Delete of a key never put: %v, want none", err)
		}
		mustPut(t, s, key, []byte("x"))
		if err := s.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, key); !galleyerr.Is(galleyerr.NotFound, err) {
			t.Fatalf("Get of a deleted key: %v, want NotFound", err)
		}
	})
	t.Run("KeysApart", func(t *testing.T) {
		s := sub.Open(t)
		keys := []string{
			snapshot.Key("house", "w-1", "worktree"), snapshot.Key("house", "w-2", "worktree"),
			snapshot.Key("house", "w-1", "session"), snapshot.Key("other", "w-1", "worktree"),
			snapshot.Key("house", "w/1", "worktree"), snapshot.Key("house", "..", "worktree"),
		}
		for i, k := range keys {
			mustPut(t, s, k, []byte{byte(i)})
		}
		for i, k := range keys {
			if got := mustGet(t, s, k); !bytes.Equal(got, []byte{byte(i)}) {
				t.Errorf("key %q holds %v, want [%d]", k, got, i)
			}
		}
	})
	t.Run("FailedPutKeepsEarlier", func(t *testing.T) {
		s, ctx := sub.Open(t), t.Context()
		earlier := pattern(1000, 2)
		mustPut(t, s, key, earlier)
		for _, at := range []int{0, 100, sub.Large / 2, sub.Large + 100} {
			broken := errors.New("the snapshot's writer failed")
			r := io.MultiReader(bytes.NewReader(pattern(at, 3)), errReader{broken})
			if err := s.Put(ctx, key, r); err == nil {
				t.Fatalf("Put of a reader failing after %d bytes succeeded", at)
			}
			if got := mustGet(t, s, key); !bytes.Equal(got, earlier) {
				t.Fatalf("after a Put failing at %d bytes the key holds %d bytes, want the earlier %d", at, len(got), len(earlier))
			}
		}
	})
	t.Run("CancelledPutKeepsEarlier", func(t *testing.T) {
		s := sub.Open(t)
		earlier := []byte("earlier")
		mustPut(t, s, key, earlier)
		for _, at := range []int{10, sub.Large + 100} {
			ctx, cancel := context.WithCancel(t.Context())
			r := io.MultiReader(bytes.NewReader(pattern(at, 4)), cancelReader{cancel}, bytes.NewReader(pattern(sub.Large, 5)))
			err := s.Put(ctx, key, r)
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put whose context ended after %d bytes: %v, want context.Canceled", at, err)
			}
			if got := mustGet(t, s, key); !bytes.Equal(got, earlier) {
				t.Fatalf("after a cancelled Put the key holds %d bytes, want the earlier %d", len(got), len(earlier))
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := s.Get(ctx, key); err == nil {
			t.Fatal("Get with an ended context succeeded")
		}
	})
	t.Run("BadKeys", func(t *testing.T) {
		s, ctx := sub.Open(t), t.Context()
		for _, k := range []string{"", "../x", "/etc/x", "a//b", "a/../b", ".hidden", "a/.b", "a b", "a\x00b"} {
			if err := s.Put(ctx, k, bytes.NewReader(nil)); !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("Put(%q): %v, want Invalid", k, err)
			}
			if _, err := s.Get(ctx, k); !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("Get(%q): %v, want Invalid", k, err)
			}
			if err := s.Delete(ctx, k); !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("Delete(%q): %v, want Invalid", k, err)
			}
		}
	})
}

func mustPut(t *testing.T, s snapshot.Store, key string, b []byte) {
	t.Helper()
	if err := s.Put(t.Context(), key, bytes.NewReader(b)); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(b), err)
	}
}

func mustGet(t *testing.T, s snapshot.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", key, err)
	}
	return b
}

// pattern is n bytes that differ with seed and along their length.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + byte(i>>10) + seed
	}
	return b
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// cancelReader ends a context when it is reached, and reads nothing.
type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) {
	c.cancel()
	return 0, io.EOF
}
