package boltstore

import (
	"context"
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
)

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
