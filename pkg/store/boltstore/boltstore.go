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

// effectDoc is an effect as stored. Plan and Receipt are kept as bytes
// (base64 in the JSON): encoding them as JSON would compact and re-escape
// them, and a receipt must come back byte for byte.
type effectDoc struct {
	store.Effect
	Plan    []byte `json:"plan,omitempty"`
	Receipt []byte `json:"receipt,omitempty"`
}

func (s *Store) GetEffect(ctx context.Context, key string) (store.Effect, store.Version, error) {
	const op = galleyerr.Op("boltstore.GetEffect")
	if err := needKeys(op, key); err != nil {
		return store.Effect{}, store.NoVersion, err
	}
	var doc effectDoc
	var v store.Version
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		var ok bool
		var err error
		v, ok, err = getVersioned(op, tx.Bucket(bucketEffects), []byte(key), &doc)
		if err == nil && !ok {
			err = galleyerr.E(op, galleyerr.NotFound, "no such effect")
		}
		return err
	})
	if err != nil {
		return store.Effect{}, store.NoVersion, err
	}
	e := doc.Effect
	e.Plan, e.Receipt = doc.Plan, doc.Receipt
	return e, v, nil
}

func (s *Store) PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("boltstore.PutEffect")
	if err := needKeys(op, e.Key); err != nil {
		return store.NoVersion, err
	}
	doc := effectDoc{Effect: e, Plan: e.Plan, Receipt: e.Receipt}
	var v store.Version
	err := s.update(ctx, op, func(tx *bolt.Tx) (err error) {
		v, _, err = putVersioned(op, tx.Bucket(bucketEffects), []byte(e.Key), prev, &doc)
		return err
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

// resourceKey is kind NUL handle; a NUL in either part is refused, so the
// key is unambiguous.
func resourceKey(op galleyerr.Op, kind, handle string) ([]byte, error) {
	if err := needKeys(op, kind, handle); err != nil {
		return nil, err
	}
	for _, s := range []string{kind, handle} {
		for i := 0; i < len(s); i++ {
			if s[i] == 0 {
				return nil, galleyerr.E(op, galleyerr.Invalid, "NUL in a resource kind or handle")
			}
		}
	}
	return []byte(kind + "\x00" + handle), nil
}

func (s *Store) GetResource(ctx context.Context, kind, handle string) (store.Resource, store.Version, error) {
	const op = galleyerr.Op("boltstore.GetResource")
	key, err := resourceKey(op, kind, handle)
	if err != nil {
		return store.Resource{}, store.NoVersion, err
	}
	var r store.Resource
	var v store.Version
	err = s.view(ctx, op, func(tx *bolt.Tx) error {
		val := tx.Bucket(bucketResources).Get(key)
		if val == nil {
			return galleyerr.E(op, galleyerr.NotFound, "no such resource")
		}
		var err error
		r, v, err = s.resources.get(op, key, val)
		return err
	})
	if err != nil {
		return store.Resource{}, store.NoVersion, err
	}
	return r, v, nil
}

func (s *Store) PutResource(ctx context.Context, r store.Resource, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("boltstore.PutResource")
	key, err := resourceKey(op, r.Kind, r.Handle)
	if err != nil {
		return store.NoVersion, err
	}
	var v store.Version
	err = s.update(ctx, op, func(tx *bolt.Tx) error {
		var created bool
		var err error
		v, created, err = putVersioned(op, tx.Bucket(bucketResources), key, prev, &r)
		if err != nil || !created {
			return err
		}
		order := tx.Bucket(bucketResourceOrder)
		n, err := order.NextSequence()
		if err != nil {
			return err
		}
		return order.Put(u64(n), key)
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

func (s *Store) ListResources(ctx context.Context) ([]store.Resource, error) {
	const op = galleyerr.Op("boltstore.ListResources")
	var out []store.Resource
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		resources, order := tx.Bucket(bucketResources), tx.Bucket(bucketResourceOrder)
		// The order's sequence counts the resources ever created, which
		// are never deleted: the list's length, without a scan.
		if n := order.Sequence(); n > 0 {
			out = make([]store.Resource, 0, n)
		}
		return order.ForEach(func(_, key []byte) error {
			val := resources.Get(key)
			if val == nil {
				return galleyerr.E(op, "corrupt store: resource in the creation index but not stored")
			}
			r, _, err := s.resources.get(op, key, val)
			out = append(out, r)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) GetMailbox(ctx context.Context, run string) (store.Mailbox, store.Version, error) {
	const op = galleyerr.Op("boltstore.GetMailbox")
	if err := needKeys(op, run); err != nil {
		return store.Mailbox{}, store.NoVersion, err
	}
	var m store.Mailbox
	var v store.Version
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		var ok bool
		var err error
		v, ok, err = getVersioned(op, tx.Bucket(bucketMailboxes), []byte(run), &m)
		if err == nil && !ok {
			m = store.Mailbox{Run: run}
		}
		return err
	})
	if err != nil {
		return store.Mailbox{}, store.NoVersion, err
	}
	return m, v, nil
}

func (s *Store) PutMailbox(ctx context.Context, m store.Mailbox, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("boltstore.PutMailbox")
	if err := needKeys(op, m.Run); err != nil {
		return store.NoVersion, err
	}
	var v store.Version
	err := s.update(ctx, op, func(tx *bolt.Tx) (err error) {
		v, _, err = putVersioned(op, tx.Bucket(bucketMailboxes), []byte(m.Run), prev, &m)
		return err
	})
	if err != nil {
		return store.NoVersion, err
	}
	return v, nil
}

// appendTo gives rec the next sequence of ledger name in parent and stores
// it, in one transaction with the counter: the ledger has no gap and shows
// entries only in sequence order. setSeq puts the sequence in rec.
func (s *Store) appendTo(ctx context.Context, op galleyerr.Op, parent []byte, name string, setSeq func(int64) any) (int64, error) {
	if err := needKeys(op, name); err != nil {
		return 0, err
	}
	var seq int64
	err := s.update(ctx, op, func(tx *bolt.Tx) (err error) {
		seq, err = appendIn(tx, op, parent, name, setSeq)
		return err
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// appendIn is appendTo's work inside the caller's transaction.
func appendIn(tx *bolt.Tx, op galleyerr.Op, parent []byte, name string, setSeq func(int64) any) (int64, error) {
	b, err := tx.Bucket(parent).CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return 0, err
	}
	n, err := b.NextSequence()
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(setSeq(int64(n)))
	if err != nil {
		return 0, galleyerr.E(op, galleyerr.Invalid, err)
	}
	return int64(n), b.Put(u64(n), body)
}

// indexMessageIDs fills message-ids from the messages a format-1 file
// holds, keeping each id's first sequence.
func indexMessageIDs(tx *bolt.Tx) error {
	ids := tx.Bucket(bucketMessageIDs)
	return tx.Bucket(bucketMessages).ForEachBucket(func(run []byte) error {
		idx, err := ids.CreateBucketIfNotExists(run)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketMessages).Bucket(run).ForEach(func(k, v []byte) error {
			var m struct {
				Row struct {
					ID string `json:"id"`
				} `json:"row"`
			}
			if err := json.Unmarshal(v, &m); err != nil {
				return galleyerr.E("boltstore.Open", "corrupt message", err)
			}
			if m.Row.ID == "" || idx.Get([]byte(m.Row.ID)) != nil {
				return nil
			}
			return idx.Put([]byte(m.Row.ID), k)
		})
	})
}

// listFrom decodes up to limit (all if limit <= 0) entries of ledger name
// after sequence after, in order.
func listFrom[T any](s *Store, ctx context.Context, op galleyerr.Op, parent []byte, name string, after int64, limit int) ([]T, error) {
	if err := needKeys(op, name); err != nil {
		return nil, err
	}
	var out []T
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		b := tx.Bucket(parent).Bucket([]byte(name))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(u64(uint64(max(after, 0)) + 1)); k != nil; k, v = c.Next() {
			if limit > 0 && len(out) == limit {
				break
			}
			var rec T
			if err := json.Unmarshal(v, &rec); err != nil {
				return galleyerr.E(op, "corrupt record", err)
			}
			out = append(out, rec)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendMessage appends m unless a message with its id is in the run
// already (see store.Mailboxes): the id's entry in message-ids is read and
// written in the append's transaction.
func (s *Store) AppendMessage(ctx context.Context, run string, m store.Message) (int64, bool, error) {
	const op = galleyerr.Op("boltstore.AppendMessage")
	if err := needKeys(op, run); err != nil {
		return 0, false, err
	}
	var seq int64
	var existed bool
	err := s.update(ctx, op, func(tx *bolt.Tx) error {
		existed = false
		id := []byte(m.Row.ID)
		var idx *bolt.Bucket
		if len(id) > 0 {
			var err error
			if idx, err = tx.Bucket(bucketMessageIDs).CreateBucketIfNotExists([]byte(run)); err != nil {
				return err
			}
			if v := idx.Get(id); v != nil {
				if len(v) != 8 {
					return galleyerr.E(op, "corrupt message id entry")
				}
				seq, existed = int64(binary.BigEndian.Uint64(v)), true
				return nil
			}
		}
		var err error
		seq, err = appendIn(tx, op, bucketMessages, run, func(n int64) any {
			m.Seq = n
			return &m
		})
		if err != nil || idx == nil {
			return err
		}
		return idx.Put(id, u64(uint64(seq)))
	})
	if err != nil {
		return 0, false, err
	}
	return seq, existed, nil
}

func (s *Store) ListMessages(ctx context.Context, run string, after int64, limit int) ([]store.Message, error) {
	return listFrom[store.Message](s, ctx, "boltstore.ListMessages", bucketMessages, run, after, limit)
}

func (s *Store) AppendInbox(ctx context.Context, worker string, item store.InboxItem) (int64, error) {
	return s.appendTo(ctx, "boltstore.AppendInbox", bucketInboxes, worker, func(seq int64) any {
		item.Seq = seq
		return &item
	})
}

func (s *Store) ListInbox(ctx context.Context, worker string, after int64) ([]store.InboxItem, error) {
	return listFrom[store.InboxItem](s, ctx, "boltstore.ListInbox", bucketInboxes, worker, after, 0)
}

// NextCount counts in the counters bucket, one write transaction (bbolt
// serializes them), so no two calls answer one value.
func (s *Store) NextCount(ctx context.Context, name string) (n int64, err error) {
	const op = galleyerr.Op("boltstore.NextCount")
	if err := needKeys(op, name); err != nil {
		return 0, err
	}
	err = s.update(ctx, op, func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketCounters)
		var cur uint64
		if v := b.Get([]byte(name)); v != nil {
			if len(v) != 8 {
				return galleyerr.E(op, fmt.Sprintf("counter %q is corrupt (%d bytes)", name, len(v)))
			}
			cur = binary.BigEndian.Uint64(v)
		}
		n = int64(cur + 1)
		return b.Put([]byte(name), u64(cur+1))
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
