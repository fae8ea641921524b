package eventlog_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

type countingBell struct {
	mu    sync.Mutex
	rings map[string]int
}

func (b *countingBell) Ring(_ context.Context, topic string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rings[topic]++
	return nil
}

// Recorded events reach the log in the order recorded, cut to the log's
// bounds, and each append rings the worker's topic.
func TestRecorderOrderAndRing(t *testing.T) {
	st := memstore.New()
	bell := &countingBell{rings: map[string]int{}}
	r := eventlog.New(st, bell, nil)
	for i := range 50 {
		r.Record("w-1", store.Event{Kind: eventlog.KindMailbox, Text: fmt.Sprint("row ", i, "\nsecond line")})
	}
	r.Record("w-1", store.Event{Kind: eventlog.KindWarning, Text: strings.Repeat("<é>", 2000),
		Fields: map[string]string{"a": strings.Repeat("&", 5000)}})
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	es, err := st.ListEvents(t.Context(), "w-1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 51 {
		t.Fatalf("%d events in the log, want 51", len(es))
	}
	for i, e := range es[:50] {
		if want := fmt.Sprint("row ", i, " …"); e.Text != want {
			t.Fatalf("event %d text %q, want %q (the first line, in order)", i, e.Text, want)
		}
	}
	if last := es[50]; len(last.Text) > store.MaxEventText || last.Fields["a"] == "" {
		t.Errorf("a long event was not cut to the log's bounds: %d bytes of text, field %q", len(last.Text), last.Fields["a"])
	}
	if n := bell.rings[eventlog.Topic("w-1")]; n != 51 {
		t.Errorf("the topic rang %d times, want 51", n)
	}
	r.Record("w-1", store.Event{Kind: eventlog.KindMailbox}) // after Close: ignored, no panic
}

// A cursor older than the retained events reads one reset event first,
// numbered so that the cursor moves on to the oldest retained event; a
// cursor inside the retained events reads no reset.
func TestReadReset(t *testing.T) {
	st := memstore.New()
	ctx := t.Context()
	for range store.MaxEvents + 10 {
		if _, err := st.AppendEvent(ctx, "w-1", store.Event{Kind: eventlog.KindMailbox}); err != nil {
			t.Fatal(err)
		}
	}
	es, err := eventlog.Read(ctx, st, "w-1", 3, 5)
	if err != nil {
		t.Fatal(err)
	}
	if es[0].Kind != eventlog.KindReset || es[0].Seq != 10 || es[0].Fields["from"] != "4" || es[0].Fields["to"] != "10" {
		t.Fatalf("first event %+v, want a reset of 4..10 numbered 10", es[0])
	}
	if es[1].Seq != 11 {
		t.Errorf("after the reset comes %d, want 11", es[1].Seq)
	}
	es, err = eventlog.Read(ctx, st, "w-1", es[len(es)-1].Seq, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind == eventlog.KindReset {
			t.Errorf("a resumed cursor inside the retained events read a reset: %+v", e)
		}
	}
	if es[0].Seq != 16 {
		t.Errorf("the resumed cursor read from %d, want 16", es[0].Seq)
	}
}
