// Package boltstore is galley's embedded durable store for the local server:
// one bbolt file, a bucket per record type, each write one transaction that
// is fsynced before it is acknowledged, so a write acknowledged before a
// kill (even SIGKILL) is there after a restart. It passes storetest and
// storetest.RunDurable. docs/storage-local.md explains the choice and the
// layout.
package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// Bucket names. Keys and values:
//
//	meta            "format" -> formatVersion
//	effects         effect key -> version | effect JSON
//	resources       kind NUL handle -> version | resource JSON
//	resource-order  creation number (8 bytes) -> kind NUL handle
//	mailboxes       run -> version | mailbox JSON
//	messages        run -> bucket: seq (8 bytes) -> message JSON; the bucket's sequence is the run's counter
//	message-ids     run -> bucket: row id -> seq (8 bytes), written with the message
//	inboxes         worker -> bucket: seq (8 bytes) -> item JSON; likewise
//	counters        name -> last value (8 bytes)
//	events          worker -> bucket: seq (8 bytes) -> event JSON, at most store.MaxEvents (events.go)
//	nonces, sessions, tallies and their -expiry indexes: expiring.go
//
// version is 8 bytes big-endian; numbers in keys are big-endian so that
// keys sort in numeric order.
var (
	bucketMeta          = []byte("meta")
	bucketEffects       = []byte("effects")
	bucketResources     = []byte("resources")
	bucketResourceOrder = []byte("resource-order")
	bucketMailboxes     = []byte("mailboxes")
	bucketMessages      = []byte("messages")
	bucketInboxes       = []byte("inboxes")
	bucketMessageIDs    = []byte("message-ids")
	bucketCounters      = []byte("counters")
	bucketNonces        = []byte("nonces")         // key -> expiry (unix ns)
	bucketNonceExpiry   = []byte("nonce-expiry")   // expiry (unix ns) || key -> nothing, oldest first
	bucketSessions      = []byte("sessions")       // id hash -> expiry (unix ns) | session JSON
	bucketSessionExpiry = []byte("session-expiry") // expiry || id hash -> nothing
	bucketTallies       = []byte("tallies")        // key -> expiry (unix ns) | count (8 bytes)
	bucketTallyExpiry   = []byte("tally-expiry")   // expiry || key -> nothing
	allBuckets          = [][]byte{bucketMeta, bucketEffects, bucketResources, bucketResourceOrder, bucketMailboxes, bucketMessages, bucketInboxes, bucketMessageIDs, bucketCounters,
		bucketNonces, bucketNonceExpiry, bucketSessions, bucketSessionExpiry, bucketTallies, bucketTallyExpiry}
)

// formatVersion names the layout above; a file of another format is
// refused rather than misread. Format 1 lacked message-ids; Open upgrades
// it by indexing the messages it holds. The counters bucket came within
// format 2: Open creates it in a file that lacks it, and a galley that
// predates it never opens it. So did the buckets of expiring entries
// (nonces, sessions, tallies).
const (
	formatVersion = "2"
	formatNoIDs   = "1"
)

var keyFormat = []byte("format")

// Store is a store.Store in one bbolt file. It is safe for concurrent use;
// writes are serialized by bbolt, reads run concurrently.
type Store struct {
	db        *bolt.DB
	resources *decodedResources
}

var _ store.Store = (*Store)(nil)

// Option configures Open.
type Option func(*options)

type options struct {
	lockTimeout time.Duration
}

// WithLockTimeout sets how long Open waits for another process to release
// the file (default 2s). Only one process may have the file open.
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) { o.lockTimeout = d }
}

// Open opens the store at path, creating the file (and its directory) if
// needed. A file held by another process answers Unavailable after the lock
// timeout.
func Open(path string, opts ...Option) (*Store, error) {
	const op = galleyerr.Op("boltstore.Open")
	o := options{lockTimeout: 2 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, os.ErrNotExist)

	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.lockTimeout})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, galleyerr.E(op, galleyerr.Unavailable, "store file is in use by another process: "+path)
	}
	if err != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch f := meta.Get(keyFormat); {
		case f == nil:
			return meta.Put(keyFormat, []byte(formatVersion))
		case string(f) == formatNoIDs:
			if err := indexMessageIDs(tx); err != nil {
				return err
			}
			return meta.Put(keyFormat, []byte(formatVersion))
		case string(f) != formatVersion:
			return galleyerr.E(op, fmt.Sprintf("store file has format %q, this galley reads %q", f, formatVersion))
		}
		return nil
	})
	if err == nil && created {
		// The file's directory entry must be durable too, or a crash
		// could lose the whole new file.
		err = syncDir(dir)
	}
	if err != nil {
		db.Close()
		return nil, classify(op, err)
	}
	return &Store{db: db, resources: newDecodedResources(decodedCap)}, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Close closes the file. Every later call answers Unavailable; closing
// twice is harmless.
func (s *Store) Close() error {
	return s.db.Close()
}

// classify gives an error from a transaction its kind: galley errors keep
// theirs, anything else from bbolt (I/O, a closed file) is Unavailable.
func classify(op galleyerr.Op, err error) error {
	if err == nil {
		return nil
	}
	var ge *galleyerr.Error
	switch {
	case errors.As(err, &ge):
		return err
	case errors.Is(err, bolt.ErrKeyTooLarge), errors.Is(err, bolt.ErrValueTooLarge):
		return galleyerr.E(op, galleyerr.Invalid, err)
	}
	return galleyerr.E(op, galleyerr.Unavailable, err)
}

func (s *Store) view(ctx context.Context, op galleyerr.Op, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	return classify(op, s.db.View(fn))
}

// update runs fn in one write transaction, committed and fsynced before it
// returns.
func (s *Store) update(ctx context.Context, op galleyerr.Op, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	return classify(op, s.db.Update(fn))
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func needKeys(op galleyerr.Op, keys ...string) error {
	for _, k := range keys {
		if k == "" {
			return galleyerr.E(op, galleyerr.Invalid, "empty key")
		}
	}
	return nil
}

// getVersioned reads a versioned value into rec; ok is false when absent.
func getVersioned(op galleyerr.Op, b *bolt.Bucket, key []byte, rec any) (store.Version, bool, error) {
	val := b.Get(key)
	if val == nil {
		return store.NoVersion, false, nil
	}
	if len(val) < 8 {
		return store.NoVersion, false, galleyerr.E(op, "corrupt record: short value")
	}
	if err := json.Unmarshal(val[8:], rec); err != nil {
		return store.NoVersion, false, galleyerr.E(op, "corrupt record", err)
	}
	return store.Version(binary.BigEndian.Uint64(val)), true, nil
}

// putVersioned writes rec under key if the stored version is prev (absent
// for NoVersion) and returns the new version and whether it created the
// record. The check and the write are in the caller's one transaction.
func putVersioned(op galleyerr.Op, b *bolt.Bucket, key []byte, prev store.Version, rec any) (store.Version, bool, error) {
	cur := b.Get(key)
	switch {
	case cur == nil && prev != store.NoVersion:
		return store.NoVersion, false, galleyerr.E(op, galleyerr.Conflict, "record does not exist")
	case cur != nil && (len(cur) < 8 || store.Version(binary.BigEndian.Uint64(cur)) != prev):
		return store.NoVersion, false, galleyerr.E(op, galleyerr.Conflict, "record changed")
	}
	body, err := json.Marshal(rec)
	if err != nil {
		return store.NoVersion, false, galleyerr.E(op, galleyerr.Invalid, err)
	}
	next := prev + 1
	if err := b.Put(key, append(u64(uint64(next)), body...)); err != nil {
		return store.NoVersion, false, err
	}
	return next, cur == nil, nil
}
