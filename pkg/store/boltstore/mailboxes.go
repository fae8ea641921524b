package boltstore

import (
	"context"
	"encoding/binary"
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

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
