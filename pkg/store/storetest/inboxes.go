package storetest

import (
	"context"
	"fmt"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

func testInboxes(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("Sequence", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		var want []store.InboxItem
		for i := range 4 {
			it := fullInboxItem(fmt.Sprint("key-", i))
			seq, err := s.AppendInbox(ctx, "w-1", it)
			mustOK(t, "append", err)
			if seq != int64(i+1) {
				t.Fatalf("append %d answered sequence %d, want %d", i, seq, i+1)
			}
			it.Seq = seq
			want = append(want, it)
		}
		for _, after := range []int64{0, 2, 4, 7} {
			got, err := s.ListInbox(ctx, "w-1", after, 0)
			mustOK(t, "list", err)
			var w []store.InboxItem
			if after < 4 {
				w = want[after:]
			}
			checkSame(t, fmt.Sprint("items after ", after), got, w)
		}
		// A limit takes the first items only (whether any waits is one).
		for _, c := range []struct {
			after int64
			limit int
			want  []store.InboxItem
		}{{0, 1, want[:1]}, {1, 2, want[1:3]}, {3, 5, want[3:]}, {4, 1, nil}} {
			got, err := s.ListInbox(ctx, "w-1", c.after, c.limit)
			mustOK(t, "list with a limit", err)
			checkSame(t, fmt.Sprintf("up to %d items after %d", c.limit, c.after), got, c.want)
		}
	})

	t.Run("WorkersIndependent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		for i := range 3 {
			_, err := s.AppendInbox(ctx, "w-1", fullInboxItem(fmt.Sprint("a", i)))
			mustOK(t, "append w-1", err)
		}
		seq, err := s.AppendInbox(ctx, "w-2", fullInboxItem("b"))
		mustOK(t, "append w-2", err)
		if seq != 1 {
			t.Errorf("first item of another worker has sequence %d, want 1", seq)
		}
		got, err := s.ListInbox(ctx, "w-3", 0, 0)
		mustOK(t, "list a worker without items", err)
		if len(got) != 0 {
			t.Errorf("a worker without items lists %d", len(got))
		}
	})

	t.Run("ConcurrentAppend", func(t *testing.T) {
		s := open(t)
		const writers, each = 4, 25
		appendOne := func(ctx context.Context, i int) (int64, string, error) {
			key := fmt.Sprintf("w%d-%02d", i/each, i%each)
			seq, err := s.AppendInbox(ctx, "w-1", fullInboxItem(key))
			return seq, key, err
		}
		list := func(ctx context.Context, after int64) ([]int64, []string, error) {
			items, err := s.ListInbox(ctx, "w-1", after, 0)
			var ss []int64
			var keys []string
			for _, it := range items {
				ss = append(ss, it.Seq)
				keys = append(keys, it.Key)
			}
			return ss, keys, err
		}
		concurrentAppend(t, writers, each, appendOne, list)
	})
}
