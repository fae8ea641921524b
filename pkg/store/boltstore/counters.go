package boltstore

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
)

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
