package boltstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// expiringBuckets keep entries that expire (nonces, sessions, tallies):
// main holds key -> expiry (unix ns, 8 bytes) | value, index holds
// expiry || key -> nothing, so the oldest sort first. Each write that
// adds an entry first drops up to sweepBatch expired ones, so the buckets
// hold about the entries of one lifetime; a read skips an expired entry
// that is still there.
type expiringBuckets struct{ main, index []byte }

var (
	nonces   = expiringBuckets{bucketNonces, bucketNonceExpiry}
	sessions = expiringBuckets{bucketSessions, bucketSessionExpiry}
	tallies  = expiringBuckets{bucketTallies, bucketTallyExpiry}
)

const sweepBatch = 64

// sweep drops up to sweepBatch entries expired by now, oldest first.
func (e expiringBuckets) sweep(tx *bolt.Tx, now int64) error {
	m, ix := tx.Bucket(e.main), tx.Bucket(e.index)
	var old [][]byte
	c := ix.Cursor()
	for k, _ := c.First(); k != nil && len(old) < sweepBatch; k, _ = c.Next() {
		if len(k) < 8 || int64(binary.BigEndian.Uint64(k[:8])) > now {
			break
		}
		old = append(old, slices.Clone(k))
	}
	for _, k := range old {
		// The entry may have been written again since (a new expiry, a
		// new index key): drop it only if this index key is its own.
		if v := m.Get(k[8:]); len(v) >= 8 && bytes.Equal(v[:8], k[:8]) {
			if err := m.Delete(k[8:]); err != nil {
				return err
			}
		}
		if err := ix.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// get answers the value of key and its expiry while it lives; the value
// is valid during tx only.
func (e expiringBuckets) get(tx *bolt.Tx, key string, now int64) (val []byte, expires int64, ok bool) {
	v := tx.Bucket(e.main).Get([]byte(key))
	if len(v) < 8 {
		return nil, 0, false
	}
	expires = int64(binary.BigEndian.Uint64(v[:8]))
	if expires <= now {
		return nil, 0, false
	}
	return v[8:], expires, true
}

// put stores key -> val until expires (unix ns), replacing the entry there
// and its index key.
func (e expiringBuckets) put(tx *bolt.Tx, key string, val []byte, expires int64) error {
	if err := e.delete(tx, key); err != nil {
		return err
	}
	exp := u64(uint64(expires))
	if err := tx.Bucket(e.main).Put([]byte(key), append(slices.Clone(exp), val...)); err != nil {
		return err
	}
	return tx.Bucket(e.index).Put(append(exp, key...), nil)
}

// delete drops key's entry and its index key.
func (e expiringBuckets) delete(tx *bolt.Tx, key string) error {
	m := tx.Bucket(e.main)
	v := m.Get([]byte(key))
	if v == nil {
		return nil
	}
	if len(v) >= 8 {
		if err := tx.Bucket(e.index).Delete(append(slices.Clone(v[:8]), key...)); err != nil {
			return err
		}
	}
	return m.Delete([]byte(key))
}

// UseNonce records key in one write transaction (bbolt serializes them).
func (s *Store) UseNonce(ctx context.Context, key string, expires time.Time) (fresh bool, err error) {
	const op = galleyerr.Op("boltstore.UseNonce")
	if err := needKeys(op, key); err != nil {
		return false, err
	}
	now := time.Now().UnixNano()
	err = s.update(ctx, op, func(tx *bolt.Tx) error {
		if err := nonces.sweep(tx, now); err != nil {
			return err
		}
		if _, _, ok := nonces.get(tx, key, now); ok {
			return nil
		}
		fresh = true
		return nonces.put(tx, key, nil, expires.UnixNano())
	})
	if err != nil {
		return false, err
	}
	return fresh, nil
}

// PutSession stores the session in one write transaction, unless a live
// one has its id hash.
func (s *Store) PutSession(ctx context.Context, se store.Session) error {
	const op = galleyerr.Op("boltstore.PutSession")
	if err := needKeys(op, se.IDHash); err != nil {
		return err
	}
	if se.Expires.IsZero() {
		return galleyerr.E(op, galleyerr.Invalid, "a session must expire")
	}
	doc, err := json.Marshal(se)
	if err != nil {
		return galleyerr.E(op, galleyerr.Invalid, err)
	}
	now := time.Now().UnixNano()
	return s.update(ctx, op, func(tx *bolt.Tx) error {
		if err := sessions.sweep(tx, now); err != nil {
			return err
		}
		if _, _, ok := sessions.get(tx, se.IDHash, now); ok {
			return galleyerr.E(op, galleyerr.Conflict, "a session lives under that id")
		}
		return sessions.put(tx, se.IDHash, doc, se.Expires.UnixNano())
	})
}

func (s *Store) GetSession(ctx context.Context, idHash string) (se store.Session, err error) {
	const op = galleyerr.Op("boltstore.GetSession")
	if err := needKeys(op, idHash); err != nil {
		return se, err
	}
	err = s.view(ctx, op, func(tx *bolt.Tx) error {
		v, _, ok := sessions.get(tx, idHash, time.Now().UnixNano())
		if !ok {
			return galleyerr.E(op, galleyerr.NotFound, "no such session")
		}
		return json.Unmarshal(v, &se)
	})
	if err != nil {
		return store.Session{}, err
	}
	return se, nil
}

func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	const op = galleyerr.Op("boltstore.DeleteSession")
	if err := needKeys(op, idHash); err != nil {
		return err
	}
	return s.update(ctx, op, func(tx *bolt.Tx) error { return sessions.delete(tx, idHash) })
}

// AddTally counts in one write transaction; an expired tally starts over
// with the new expiry.
func (s *Store) AddTally(ctx context.Context, key string, expires time.Time) (n int64, err error) {
	const op = galleyerr.Op("boltstore.AddTally")
	if err := needKeys(op, key); err != nil {
		return 0, err
	}
	now := time.Now().UnixNano()
	err = s.update(ctx, op, func(tx *bolt.Tx) error {
		if err := tallies.sweep(tx, now); err != nil {
			return err
		}
		exp := expires.UnixNano()
		if v, live, ok := tallies.get(tx, key, now); ok && len(v) == 8 {
			n, exp = int64(binary.BigEndian.Uint64(v)), live
		}
		n++
		return tallies.put(tx, key, u64(uint64(n)), exp)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
