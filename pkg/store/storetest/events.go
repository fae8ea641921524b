package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// EventStore is what RunEvents checks: a store's worker event logs.
type EventStore interface {
	store.EventLog
	Close() error
}

func fullEvent(id string) store.Event {
	return store.Event{
		Seq:    99, // assigned by the store
		At:     t2,
		Kind:   "status",
		Text:   "first line of " + id + " é <b>",
		Fields: map[string]string{"id": id, "state": "ready"},
	}
}

// RunEvents checks store.EventLog: sequences from 1 without gaps or
// repeats (under concurrent appends too), exact round trips, workers kept
// apart, a cursor that resumes where it stopped, the bound per worker
// (the oldest dropped, the retained events one unbroken run) and the size
// limit of one event. open must return a fresh, empty store.
func RunEvents(t *testing.T, open func(t *testing.T) EventStore) {
	t.Run("Sequence", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		var want []store.Event
		for i := range 5 {
			e := fullEvent(fmt.Sprint("e", i))
			seq, err := s.AppendEvent(ctx, "w-1", e)
			mustOK(t, "append", err)
			if seq != int64(i+1) {
				t.Fatalf("append %d answered sequence %d, want %d", i, seq, i+1)
			}
			e.Seq = seq
			want = append(want, e)
		}
		for _, after := range []int64{0, 2, 5, 9} {
			got, err := s.ListEvents(ctx, "w-1", after, 0)
			mustOK(t, "list", err)
			var w []store.Event
			if after < 5 {
				w = want[after:]
			}
			checkSame(t, fmt.Sprint("events after ", after), got, w)
		}
		// A cursor that reads in pages gets every event once, in order.
		var got []store.Event
		for after := int64(0); ; {
			page, err := s.ListEvents(ctx, "w-1", after, 2)
			mustOK(t, "list a page", err)
			if len(page) > 2 {
				t.Fatalf("a page of limit 2 has %d events", len(page))
			}
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1].Seq
		}
		checkSame(t, "events read in pages", got, want)
		last, ok, err := s.LastEvent(ctx, "w-1")
		mustOK(t, "last event", err)
		if !ok {
			t.Fatal("a worker with events has no last event")
		}
		checkSame(t, "last event", last, want[len(want)-1])
		if _, ok, err := s.LastEvent(ctx, "w-none"); err != nil || ok {
			t.Errorf("a worker without events: last event ok=%v err=%v, want none", ok, err)
		}
	})

	t.Run("WorkersIndependent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		for i := range 3 {
			_, err := s.AppendEvent(ctx, "w-1", fullEvent(fmt.Sprint("a", i)))
			mustOK(t, "append w-1", err)
		}
		seq, err := s.AppendEvent(ctx, "w-2", fullEvent("b"))
		mustOK(t, "append w-2", err)
		if seq != 1 {
			t.Errorf("first event of another worker has sequence %d, want 1", seq)
		}
		got, err := s.ListEvents(ctx, "w-3", 0, 0)
		mustOK(t, "list a worker without events", err)
		if len(got) != 0 {
			t.Errorf("a worker without events lists %d", len(got))
		}
		_, err = s.AppendEvent(ctx, "", fullEvent("c"))
		wantKind(t, "append for an empty worker", err, galleyerr.Invalid)
	})

	t.Run("TooLarge", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		e := fullEvent("big")
		e.Text = strings.Repeat("x", store.MaxEventBytes)
		_, err := s.AppendEvent(ctx, "w-1", e)
		wantKind(t, "append of an event over MaxEventBytes", err, galleyerr.Invalid)
		seq, err := s.AppendEvent(ctx, "w-1", fullEvent("small"))
		mustOK(t, "append after a refused one", err)
		if seq != 1 {
			t.Errorf("the refused event took a sequence: the next got %d", seq)
		}
	})

	t.Run("Bound", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		const extra = 7
		n := store.MaxEvents + extra
		for i := range n {
			seq, err := s.AppendEvent(ctx, "w-1", fullEvent(fmt.Sprint("e", i)))
			mustOK(t, "append", err)
			if seq != int64(i+1) {
				t.Fatalf("append %d answered sequence %d", i, seq)
			}
		}
		got, err := s.ListEvents(ctx, "w-1", 0, 0)
		mustOK(t, "list", err)
		if len(got) != store.MaxEvents {
			t.Fatalf("the log retains %d events, want the bound %d", len(got), store.MaxEvents)
		}
		for k, e := range got {
			if want := int64(extra + 1 + k); e.Seq != want {
				t.Fatalf("retained event %d has sequence %d, want %d: the oldest go first, the rest stay unbroken", k, e.Seq, want)
			}
		}
		if id := got[0].Fields["id"]; id != fmt.Sprint("e", extra) {
			t.Errorf("the oldest retained event is %s, want e%d", id, extra)
		}
		// A cursor in the dropped range reads from the oldest retained
		// event: its reader sees the gap (the first is not after+1).
		page, err := s.ListEvents(ctx, "w-1", 2, 3)
		mustOK(t, "list from a dropped cursor", err)
		if len(page) != 3 || page[0].Seq != extra+1 {
			t.Errorf("a cursor at 2 reads %v, want 3 events from %d", eventSeqs(page), extra+1)
		}
		seq, err := s.AppendEvent(ctx, "w-1", fullEvent("next"))
		mustOK(t, "append past the bound", err)
		if seq != int64(n+1) {
			t.Errorf("the next append answered %d, want %d", seq, n+1)
		}
	})

	t.Run("ConcurrentAppend", func(t *testing.T) {
		s := open(t)
		const writers, each = 4, 15
		appendOne := func(ctx context.Context, i int) (int64, string, error) {
			id := fmt.Sprintf("w%d-%02d", i/each, i%each)
			seq, err := s.AppendEvent(ctx, "w-1", fullEvent(id))
			return seq, id, err
		}
		list := func(ctx context.Context, after int64) ([]int64, []string, error) {
			es, err := s.ListEvents(ctx, "w-1", after, 0)
			var ss []int64
			var ids []string
			for _, e := range es {
				ss = append(ss, e.Seq)
				ids = append(ids, e.Fields["id"])
			}
			return ss, ids, err
		}
		concurrentAppend(t, writers, each, appendOne, list)
	})
}

// RunEventsDurable checks that a worker's events survive closing or
// abandoning (as a kill would) the store, and that sequences carry on
// without a gap or a repeat.
func RunEventsDurable(t *testing.T, openAt func(t *testing.T, dir string) EventStore) {
	for _, abandon := range []bool{false, true} {
		t.Run(fmt.Sprint("Abandon=", abandon), func(t *testing.T) {
			dir := t.TempDir()
			var want []store.Event
			for session := range 3 {
				s := openAt(t, dir)
				got, err := s.ListEvents(t.Context(), "w-1", 0, 0)
				mustOK(t, "list", err)
				checkSame(t, fmt.Sprint("events at session ", session), got, want)
				for i := range 4 {
					e := fullEvent(fmt.Sprint("s", session, "-", i))
					seq, err := s.AppendEvent(t.Context(), "w-1", e)
					mustOK(t, "append", err)
					e.Seq = seq
					want = append(want, e)
					if seq != int64(len(want)) {
						t.Fatalf("session %d: append answered %d, want %d", session, seq, len(want))
					}
				}
				if a, ok := s.(Abandoner); ok && abandon {
					a.Abandon()
				} else {
					mustOK(t, "close", s.Close())
				}
			}
		})
	}
}

func eventSeqs(es []store.Event) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}
