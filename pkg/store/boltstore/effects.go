package boltstore

import (
	"context"

	bolt "go.etcd.io/bbolt"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

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
