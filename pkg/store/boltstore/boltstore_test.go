package boltstore_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
	"github.com/galley-run/galley/pkg/store/storetest"
)

func open(t testing.TB, path string) *boltstore.Store {
	t.Helper()
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "galley.db"))
	})
}

func TestDurable(t *testing.T) {
	storetest.RunDurable(t, func(t *testing.T, dir string) store.Store {
		s, err := boltstore.Open(filepath.Join(dir, "galley.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestOpenCreatesDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "galley.db")
	s := open(t, path)
	if _, err := s.PutEffect(t.Context(), store.Effect{Key: "k"}, store.NoVersion); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("store file mode %v, want 0600", fi.Mode().Perm())
	}
}

// A second opener of the same file waits for the lock, then gives up with
// Unavailable instead of sharing the file.
func TestOpenLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "galley.db")
	open(t, path)
	s, err := boltstore.Open(path, boltstore.WithLockTimeout(50*time.Millisecond))
	if err == nil {
		s.Close()
		t.Fatal("a second Open of a file in use succeeded")
	}
	if !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Errorf("second Open: %v, want Unavailable", err)
	}
}

func TestOpenRefusesOtherFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "galley.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("format"), []byte("999"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s, err := boltstore.Open(path); err == nil {
		s.Close()
		t.Fatal("opened a store file of an unknown format")
	}
}

// A file of format 1 (before message ids were indexed) is upgraded on
// open: the messages it holds are indexed, so a repeat of one appends
// nothing, and an old binary can no longer open the file.
func TestOpenIndexesFormat1Messages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "galley.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		if err := meta.Put([]byte("format"), []byte("1")); err != nil {
			return err
		}
		msgs, err := tx.CreateBucket([]byte("messages"))
		if err != nil {
			return err
		}
		run, err := msgs.CreateBucket([]byte("run"))
		if err != nil {
			return err
		}
		for i, id := range []string{"a", "b", "a"} { // a repeat from before the index
			n, err := run.NextSequence()
			if err != nil {
				return err
			}
			body, _ := json.Marshal(store.Message{Seq: int64(n), Row: protocol.MailMessage{ID: id, Kind: protocol.MsgStatus, Body: fmt.Sprint(i)}})
			if err := run.Put(binary.BigEndian.AppendUint64(nil, n), body); err != nil {
				return err
			}
		}
		return nil
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s := open(t, path)
	ctx := t.Context()
	for _, tc := range []struct {
		id      string
		seq     int64
		existed bool
	}{{"a", 1, true}, {"b", 2, true}, {"c", 4, false}, {"c", 4, true}} {
		seq, existed, err := s.AppendMessage(ctx, "run", store.Message{Row: protocol.MailMessage{ID: tc.id, Kind: protocol.MsgStatus}})
		if err != nil || seq != tc.seq || existed != tc.existed {
			t.Errorf("append %s: (%d, existed %v, %v), want (%d, %v)", tc.id, seq, existed, err, tc.seq, tc.existed)
		}
	}
	s.Close()
	db, err = bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		if f := tx.Bucket([]byte("meta")).Get([]byte("format")); string(f) != "2" {
			t.Errorf("format after the upgrade %q, want 2", f)
		}
		return nil
	})
}

func TestErrors(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "galley.db"))
	ctx := t.Context()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name string
		err  func() error
		kind galleyerr.Kind
	}{
		{"empty effect key", func() error { _, err := s.PutEffect(ctx, store.Effect{}, 0); return err }, galleyerr.Invalid},
		{"empty handle", func() error { _, _, err := s.GetResource(ctx, "worker", ""); return err }, galleyerr.Invalid},
		{"NUL in kind", func() error {
			_, err := s.PutResource(ctx, store.Resource{Kind: "a\x00b", Handle: "h"}, 0)
			return err
		}, galleyerr.Invalid},
		{"empty run", func() error { _, _, err := s.AppendMessage(ctx, "", store.Message{}); return err }, galleyerr.Invalid},
		{"key too large", func() error {
			_, err := s.PutEffect(ctx, store.Effect{Key: string(make([]byte, 40000))}, 0)
			return err
		}, galleyerr.Invalid},
		{"cancelled context", func() error {
			_, err := s.PutEffect(cancelled, store.Effect{Key: "cancelled"}, 0)
			return err
		}, galleyerr.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); !galleyerr.Is(tc.kind, err) {
				t.Errorf("got %v, want kind %v", err, tc.kind)
			}
		})
	}
	if _, _, err := s.GetEffect(ctx, "cancelled"); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("a write with a cancelled context happened: %v", err)
	}
	s.Close()
	if _, err := s.AppendInbox(ctx, "w", store.InboxItem{}); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Errorf("append on a closed store: %v, want Unavailable", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestEvents(t *testing.T) {
	storetest.RunEvents(t, func(t *testing.T) storetest.EventStore {
		return open(t, filepath.Join(t.TempDir(), "galley.db"))
	})
}

func TestEventsDurable(t *testing.T) {
	storetest.RunEventsDurable(t, func(t *testing.T, dir string) storetest.EventStore {
		s, err := boltstore.Open(filepath.Join(dir, "galley.db"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
