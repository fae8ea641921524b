package harness

import (
	"context"
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
