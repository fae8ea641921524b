package storetest

import (
	"fmt"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

func testResources(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("ListEmpty", func(t *testing.T) {
		got, err := open(t).ListResources(t.Context())
		mustOK(t, "list", err)
		if len(got) != 0 {
			t.Errorf("empty store lists %d resources", len(got))
		}
	})

	// Creation order is the order of the creating writes: not the handles'
	// order, not Created (all equal here), and updates do not move a
	// resource.
	t.Run("ListInCreationOrder", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		keys := [][2]string{
			{"worker", "w-3"}, {"worktree", "t-9"}, {"branch", "b-1"},
			{"worker", "w-10"}, {"worker", "w-2"}, {"worktree", "t-1"},
		}
		var want []store.Resource
		versions := map[[2]string]store.Version{}
		for i, k := range keys {
			r := fullResource(k[0], k[1])
			r.Released = i%2 == 1 // released ones are listed too
			v, err := s.PutResource(ctx, r, store.NoVersion)
			mustOK(t, "create "+k[1], err)
			versions[k] = v
			want = append(want, r)
		}
		checkList := func(what string) {
			t.Helper()
			got, err := s.ListResources(ctx)
			mustOK(t, "list", err)
			checkSame(t, what, got, want)
		}
		checkList("list after creates")

		// Update the first and the fourth; a lost create adds nothing.
		want[0].Released = true
		want[0].Worker.State = "settled"
		_, err := s.PutResource(ctx, want[0], versions[keys[0]])
		mustOK(t, "update first", err)
		want[3].Owner = "changed"
		_, err = s.PutResource(ctx, want[3], versions[keys[3]])
		mustOK(t, "update fourth", err)
		_, err = s.PutResource(ctx, fullResource("branch", "b-1"), store.NoVersion)
		wantKind(t, "create existing", err, galleyerr.Conflict)
		checkList("list after updates")
	})

	t.Run("KindsDistinct", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		w := fullResource("worker", "same")
		wt := fullResource("worktree", "same")
		wt.Worker = nil
		_, err := s.PutResource(ctx, w, store.NoVersion)
		mustOK(t, "create worker", err)
		_, err = s.PutResource(ctx, wt, store.NoVersion)
		mustOK(t, "create worktree with the same handle", err)
		for _, want := range []store.Resource{w, wt} {
			got, _, err := s.GetResource(ctx, want.Kind, want.Handle)
			mustOK(t, "get "+want.Kind, err)
			checkSame(t, want.Kind, got, want)
		}
		_, _, err = s.GetResource(ctx, "branch", "same")
		wantKind(t, "get another kind", err, galleyerr.NotFound)
		got, err := s.ListResources(ctx)
		mustOK(t, "list", err)
		checkSame(t, "list", got, []store.Resource{w, wt})
	})

	t.Run("ManyListed", func(t *testing.T) {
		// Enough resources to cross a page in stores that list by pages.
		s, ctx := open(t), t.Context()
		var want []store.Resource
		for i := range 120 {
			r := store.Resource{Kind: "branch", Handle: fmt.Sprintf("b-%03d", 119-i), Created: t1}
			_, err := s.PutResource(ctx, r, store.NoVersion)
			mustOK(t, "create", err)
			want = append(want, r)
		}
		got, err := s.ListResources(ctx)
		mustOK(t, "list", err)
		checkSame(t, "list", got, want)
	})
}

func testMailboxes(t *testing.T, open func(*testing.T) store.Store) {
	// Workers append while the coordinator moves the head: an append must
	// not change the head's version, or every acknowledgement would race
	// every message.
	t.Run("AppendsLeaveHead", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		_, _, err := s.AppendMessage(ctx, "run", fullMessage("m0"))
		mustOK(t, "append before any head", err)
		m, v, err := s.GetMailbox(ctx, "run")
		mustOK(t, "get head", err)
		if v != store.NoVersion {
			t.Fatalf("an append created a head at version %d", v)
		}
		checkSame(t, "head", m, store.Mailbox{Run: "run"})
		v1, err := s.PutMailbox(ctx, fullMailbox("run"), store.NoVersion)
		mustOK(t, "create head", err)
		for i := range 3 {
			_, _, err := s.AppendMessage(ctx, "run", fullMessage(fmt.Sprint("m", i+1)))
			mustOK(t, "append", err)
		}
		_, v, err = s.GetMailbox(ctx, "run")
		mustOK(t, "get head", err)
		if v != v1 {
			t.Errorf("appends moved the head from version %d to %d", v1, v)
		}
		_, err = s.PutMailbox(ctx, fullMailbox("run"), v1)
		mustOK(t, "update head after appends", err)
	})
}
