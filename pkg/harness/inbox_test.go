package harness

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/workerapi"
)

// A reply to an abandoned question becomes a message whether it came
// before the abandonment was recorded or after; other replies stay replies.
func TestInboxAbandonedReplies(t *testing.T) {
	b := newInbox()
	b.add(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: "q1", Body: "early"})
	b.abandon("q1", "first")
	b.abandon("q2", "second")
	b.add(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: "q2", Body: "late"})
	b.add(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: "q3", Body: "kept"})
	got := b.drainMessages()
	if len(got) != 2 || !strings.Contains(got[0], `q1 ("first")`) || !strings.HasSuffix(got[0], ": early") ||
		!strings.Contains(got[1], `q2 ("second")`) || !strings.HasSuffix(got[1], ": late") {
		t.Fatalf("messages = %q", got)
	}
	if r, err := b.reply(context.Background(), "q3"); err != nil || r != "kept" {
		t.Fatalf("reply q3 = %q, %v", r, err)
	}
	// A second reply to the same question is an ordinary reply again.
	b.add(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: "q2", Body: "again"})
	if m := b.drainMessages(); len(m) != 0 {
		t.Fatalf("messages = %q", m)
	}
}

// The agent makes abandoned questions at will (an ask_coordinator call it
// drops, one a posted question): the inbox keeps the latest maxAbandoned,
// each subject cut to a line, so that their replies still come as
// messages, and holds no more however many it makes.
func TestInboxAbandonedBounded(t *testing.T) {
	b := newInbox()
	subject := strings.Repeat("s", maxText)
	for i := range 3 * maxAbandoned {
		b.abandon("q"+strconv.Itoa(i), subject)
	}
	if len(b.abandoned) != maxAbandoned || len(b.abandonedOrder) != maxAbandoned {
		t.Fatalf("the inbox keeps %d abandoned questions (%d in order), want %d", len(b.abandoned), len(b.abandonedOrder), maxAbandoned)
	}
	for q, s := range b.abandoned {
		if len(s) > maxAbandonedSubject+len("…") {
			t.Fatalf("question %s keeps a subject of %d bytes", q, len(s))
		}
	}
	last := "q" + strconv.Itoa(3*maxAbandoned-1)
	b.add(workerapi.InboxItem{Kind: workerapi.ItemReply, Question: last, Body: "late"})
	if m := b.drainMessages(); len(m) != 1 || !strings.Contains(m[0], last) || !strings.HasSuffix(m[0], ": late") {
		t.Fatalf("the latest abandoned question's reply: messages %q", m)
	}
	if len(b.abandoned) != maxAbandoned-1 || len(b.abandonedOrder) != maxAbandoned-1 {
		t.Fatalf("after its reply, %d abandoned (%d in order)", len(b.abandoned), len(b.abandonedOrder))
	}
}
