package storetest

import (
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/store"
)

// testAliasing checks that a store keeps its own copy: changing a record
// after writing it, or after reading it, changes nothing stored. Remote
// stores pass trivially; in-memory ones must copy deeply.
func testAliasing(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("Effect", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		e := fullEffect("k")
		_, err := s.PutEffect(ctx, e, store.NoVersion)
		mustOK(t, "put", err)
		e.Receipt[0], e.Plan[0] = 'X', 'X'
		got, _, err := s.GetEffect(ctx, "k")
		mustOK(t, "get", err)
		checkSame(t, "after changing the written record", got, fullEffect("k"))
		got.Receipt[1] = 'Y'
		got, _, err = s.GetEffect(ctx, "k")
		mustOK(t, "get", err)
		checkSame(t, "after changing a read record", got, fullEffect("k"))
	})

	t.Run("Resource", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		mutate := func(r *store.Resource) {
			r.Worker.Questions["q-1"] = "changed"
			*r.Worker.Usage.Tokens.Input = 999
			r.Worker.Usage.Cost.Amount = 1
			r.Worker.Agent.Model = "changed"
		}
		r := fullResource("worker", "w")
		_, err := s.PutResource(ctx, r, store.NoVersion)
		mustOK(t, "put", err)
		mutate(&r)
		got, _, err := s.GetResource(ctx, "worker", "w")
		mustOK(t, "get", err)
		checkSame(t, "after changing the written record", got, fullResource("worker", "w"))
		mutate(&got)
		list, err := s.ListResources(ctx)
		mustOK(t, "list", err)
		checkSame(t, "list after changing a read record", list, []store.Resource{fullResource("worker", "w")})
		mutate(&list[0])
		got, _, err = s.GetResource(ctx, "worker", "w")
		mustOK(t, "get", err)
		checkSame(t, "after changing a listed record", got, fullResource("worker", "w"))
	})

	t.Run("Mailbox", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		m := fullMailbox("run")
		_, err := s.PutMailbox(ctx, m, store.NoVersion)
		mustOK(t, "put", err)
		m.Seen[0], m.Superseded[0], m.Batch.To = "changed", "changed", 99
		got, _, err := s.GetMailbox(ctx, "run")
		mustOK(t, "get", err)
		checkSame(t, "after changing the written head", got, fullMailbox("run"))
		got.Seen[0], got.Batch.From = "changed", 99
		got, _, err = s.GetMailbox(ctx, "run")
		mustOK(t, "get", err)
		checkSame(t, "after changing a read head", got, fullMailbox("run"))
	})

	t.Run("Message", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		m := fullMessage("m")
		_, _, err := s.AppendMessage(ctx, "run", m)
		mustOK(t, "append", err)
		m.Row.Worker.Handle = "changed"
		want := fullMessage("m")
		want.Seq = 1
		got, err := s.ListMessages(ctx, "run", 0, 10)
		mustOK(t, "list", err)
		checkSame(t, "after changing the appended message", got, []store.Message{want})
		got[0].Row.Worker.Handle = strings.ToUpper(got[0].Row.Worker.Handle)
		got, err = s.ListMessages(ctx, "run", 0, 10)
		mustOK(t, "list", err)
		checkSame(t, "after changing a listed message", got, []store.Message{want})
	})
}
