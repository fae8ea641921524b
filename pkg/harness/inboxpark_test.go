package harness

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/workerapi"
)

// The parking's inbox freeze (park.go): it answers the cursor read so far
// and the one to read again from (the messages queued and not taken come
// back to the resumed harness); it refuses while the input the agent
// waits for is already here; what arrives while frozen reaches the agent
// only if the parking is given up (thaw).
func TestInboxFreeze(t *testing.T) {
	b := newInbox()
	b.add(workerapi.InboxItem{Seq: 1, Kind: workerapi.ItemMessage, Body: "taken"})
	if m, err := b.nextMessage(context.Background()); err != nil || m != "taken" {
		t.Fatalf("next message: %q, %v", m, err)
	}
	b.add(workerapi.InboxItem{Seq: 2, Kind: workerapi.ItemReply, Question: "q-old", Body: "old"})
	b.add(workerapi.InboxItem{Seq: 3, Kind: workerapi.ItemMessage, Body: "queued"})
	b.add(workerapi.InboxItem{Seq: 4, Kind: workerapi.ItemReply, Question: "q-other", Body: "x"})

	// Waiting in wait_message with a message queued: that message is
	// about to be taken, no parking.
	if _, _, ok := b.freeze(""); ok {
		t.Fatal("froze for wait_message with a message queued")
	}
	// Waiting for q-other's reply, which is here: no parking either.
	if _, _, ok := b.freeze("q-other"); ok {
		t.Fatal("froze for an ask whose reply is here")
	}
	read, from, ok := b.freeze("q-wait")
	if !ok || read != 4 || from != 2 {
		t.Fatalf("freeze for q-wait: read %d from %d ok %v; want 4, 2 (one before the queued message), true", read, from, ok)
	}
	b.add(workerapi.InboxItem{Seq: 5, Kind: workerapi.ItemReply, Question: "q-wait", Body: "the answer"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if r, err := b.reply(ctx, "q-wait"); err == nil {
		t.Fatalf("a reply reached the agent while frozen: %q", r)
	}
	cancel()
	if b.cursor() != 4 {
		t.Fatalf("the cursor moved while frozen: %d", b.cursor())
	}
	b.thaw()
	if r, err := b.reply(context.Background(), "q-wait"); err != nil || r != "the answer" {
		t.Fatalf("after the thaw: %q, %v", r, err)
	}

	resumed := newInbox()
	resumed.startAt(from)
	if resumed.cursor() != 2 {
		t.Fatalf("a resumed inbox starts at %d, want 2", resumed.cursor())
	}
}

// A resumed CLI (PromptResumer) takes the reply to the question it was
// parked in as a message, its prompt, once; other replies stay replies.
func TestInboxWokeBy(t *testing.T) {
	b := newInbox()
	b.wokeBy("q-parked", "Which greeting?")
	b.add(workerapi.InboxItem{Seq: 3, Kind: workerapi.ItemReply, Question: "q-other", Body: "other"})
	b.add(workerapi.InboxItem{Seq: 4, Kind: workerapi.ItemReply, Question: "q-parked", Body: "hello, please"})
	m, err := b.nextMessage(context.Background())
	want := parkedReply("q-parked", "Which greeting?", "hello, please")
	if err != nil || m != want {
		t.Fatalf("the resumed CLI's prompt: %q, %v; want %q", m, err, want)
	}
	if r, err := b.reply(context.Background(), "q-other"); err != nil || r != "other" {
		t.Errorf("another question's reply: %q, %v", r, err)
	}
	// A repeat of the parked question's reply (a replay) is a reply again.
	b.add(workerapi.InboxItem{Seq: 5, Kind: workerapi.ItemReply, Question: "q-parked", Body: "again"})
	if got := b.drainMessages(); len(got) != 0 {
		t.Errorf("a second reply became messages %q", got)
	}
}
