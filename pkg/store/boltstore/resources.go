package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

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
