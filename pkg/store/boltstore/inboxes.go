package boltstore

import (
	"context"

	"github.com/galley-run/galley/pkg/store"
)

func (s *Store) AppendInbox(ctx context.Context, worker string, item store.InboxItem) (int64, error) {
	return s.appendTo(ctx, "boltstore.AppendInbox", bucketInboxes, worker, func(seq int64) any {
		item.Seq = seq
		return &item
	})
}

func (s *Store) ListInbox(ctx context.Context, worker string, after int64, limit int) ([]store.InboxItem, error) {
	return listFrom[store.InboxItem](s, ctx, "boltstore.ListInbox", bucketInboxes, worker, after, limit)
}
