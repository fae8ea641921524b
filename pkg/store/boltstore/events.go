package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// bucketEvents holds a bucket per worker: seq (8 bytes) -> event JSON; the
// bucket's sequence is the worker's last event number, so a dropped event's
// number is never given again.
var bucketEvents = []byte("events")

var _ store.EventLog = (*Store)(nil)

// AppendEvent implements store.EventLog: the append and the drop of the
// oldest events beyond the bound are one transaction.
func (s *Store) AppendEvent(ctx context.Context, worker string, e store.Event) (int64, error) {
	const op = galleyerr.Op("boltstore.AppendEvent")
	if err := needKeys(op, worker); err != nil {
		return 0, err
	}
	var seq int64
	err := s.update(ctx, op, func(tx *bolt.Tx) error {
		parent, err := tx.CreateBucketIfNotExists(bucketEvents)
		if err != nil {
			return err
		}
		b, err := parent.CreateBucketIfNotExists([]byte(worker))
		if err != nil {
			return err
		}
		e.Seq = int64(b.Sequence() + 1)
		body, err := store.EncodeEvent(op, e)
		if err != nil {
			return err
		}
		if _, err := b.NextSequence(); err != nil {
			return err
		}
		seq = e.Seq
		if err := b.Put(u64(uint64(seq)), body); err != nil {
			return err
		}
		// Keys sort by sequence: the first ones are the oldest.
		c := b.Cursor()
		for k, _ := c.First(); k != nil && len(k) == 8 && int64(binary.BigEndian.Uint64(k)) <= seq-store.MaxEvents; k, _ = c.First() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return seq, nil
}

// LastEvent implements store.EventLog.
func (s *Store) LastEvent(ctx context.Context, worker string) (store.Event, bool, error) {
	const op = galleyerr.Op("boltstore.LastEvent")
	if err := needKeys(op, worker); err != nil {
		return store.Event{}, false, err
	}
	var e store.Event
	ok := false
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		parent := tx.Bucket(bucketEvents)
		if parent == nil {
			return nil
		}
		b := parent.Bucket([]byte(worker))
		if b == nil {
			return nil
		}
		if _, v := b.Cursor().Last(); v != nil {
			if err := json.Unmarshal(v, &e); err != nil {
				return galleyerr.E(op, "corrupt event", err)
			}
			ok = true
		}
		return nil
	})
	return e, ok, err
}

// ListEvents implements store.EventLog.
func (s *Store) ListEvents(ctx context.Context, worker string, after int64, limit int) ([]store.Event, error) {
	const op = galleyerr.Op("boltstore.ListEvents")
	if err := needKeys(op, worker); err != nil {
		return nil, err
	}
	var out []store.Event
	err := s.view(ctx, op, func(tx *bolt.Tx) error {
		parent := tx.Bucket(bucketEvents)
		if parent == nil {
			return nil
		}
		b := parent.Bucket([]byte(worker))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.Seek(u64(uint64(max(after, 0)) + 1)); k != nil; k, v = c.Next() {
			if limit > 0 && len(out) == limit {
				break
			}
			var e store.Event
			if err := json.Unmarshal(v, &e); err != nil {
				return galleyerr.E(op, "corrupt event", err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
