package harness

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/workerapi"
)

// waitIn starts the agent's wait for question's reply (a message when
// question is "") and returns once it is under way; its result comes on
// the channel, and cancel ends it.
func waitIn(t *testing.T, b *inbox, question string) (<-chan string, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got := make(chan string, 1)
	go func() {
		var v string
		var err error
		if question == "" {
			v, err = b.nextMessage(ctx)
		} else {
			v, err = b.reply(ctx, question)
		}
		if err != nil {
			v = "error: " + err.Error()
		}
		got <- v
	}()
	for {
		b.mu.Lock()
		w := b.waitFor(question)
		b.mu.Unlock()
		if w != nil {
			return got, cancel
		}
		time.Sleep(time.Millisecond)
	}
}

// nothingWithin fails if got brings anything soon: what a frozen inbox
// holds reaches no wait.
func nothingWithin(t *testing.T, got <-chan string) {
	t.Helper()
	select {
	case v := <-got:
		t.Fatalf("the agent got %q while the inbox was frozen", v)
	case <-time.After(50 * time.Millisecond):
	}
}

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

	// Waiting for q-other's reply, which is here: no parking.
	if _, _, ok := b.freeze("q-other"); ok {
		t.Fatal("froze for an ask whose reply is here")
	}
	got, _ := waitIn(t, b, "q-wait")
	read, from, ok := b.freeze("q-wait")
	if !ok || read != 4 || from != 2 {
		t.Fatalf("freeze for q-wait: read %d from %d ok %v; want 4, 2 (one before the queued message), true", read, from, ok)
	}
	b.add(workerapi.InboxItem{Seq: 5, Kind: workerapi.ItemReply, Question: "q-wait", Body: "the answer"})
	nothingWithin(t, got)
	if b.cursor() != 4 {
		t.Fatalf("the cursor moved while frozen: %d", b.cursor())
	}
	if !b.stillFrozenWait() {
		t.Fatal("the frozen wait is not seen under way")
	}
	b.thaw()
	if r := <-got; r != "the answer" {
		t.Fatalf("after the thaw: %q", r)
	}

	resumed := newInbox()
	resumed.startAt(from)
	if resumed.cursor() != 2 {
		t.Fatalf("a resumed inbox starts at %d, want 2", resumed.cursor())
	}
}

// The freeze and the agent's wait are one step: a reply the agent took
// between the parking's decision and the freeze (its wait is over), or a
// wait that ended (the agent gave up on it), refuses the freeze; a wait
// for a message refuses it while one is queued; nothing is taken while
// frozen, and a wait that ends while frozen is seen (stillFrozenWait).
func TestInboxFreezeOnlyWhileTheAgentWaits(t *testing.T) {
	b := newInbox()
	if _, _, ok := b.freeze("q-1"); ok {
		t.Fatal("froze with no wait under way")
	}
	got, _ := waitIn(t, b, "q-1")
	b.add(workerapi.InboxItem{Seq: 1, Kind: workerapi.ItemReply, Question: "q-1", Body: "taken"})
	if r := <-got; r != "taken" {
		t.Fatalf("the reply: %q", r)
	}
	if _, _, ok := b.freeze("q-1"); ok {
		t.Fatal("froze after the agent took the reply it waited for")
	}

	got, cancel := waitIn(t, b, "q-2")
	cancel()
	<-got
	if _, _, ok := b.freeze("q-2"); ok {
		t.Fatal("froze for a wait that had ended")
	}

	b.add(workerapi.InboxItem{Seq: 2, Kind: workerapi.ItemMessage, Body: "m"})
	if _, _, ok := b.freeze(""); ok {
		t.Fatal("froze for wait_message with a message queued and no wait")
	}
	if m := b.drainMessages(); len(m) != 1 {
		t.Fatalf("drained %q", m)
	}
	got, cancel = waitIn(t, b, "")
	if _, _, ok := b.freeze(""); !ok {
		t.Fatal("no freeze for a wait_message under way")
	}
	b.add(workerapi.InboxItem{Seq: 3, Kind: workerapi.ItemMessage, Body: "held"})
	nothingWithin(t, got)
	if m := b.drainMessages(); len(m) != 0 {
		t.Fatalf("a frozen inbox gave messages %q to a tool result", m)
	}
	cancel()
	<-got
	if b.stillFrozenWait() {
		t.Fatal("a wait that ended while frozen is seen under way")
	}
	b.thaw()
	if m := b.drainMessages(); len(m) != 1 || m[0] != "held" {
		t.Fatalf("after the thaw: %q", m)
	}
}

// A late reply (to a question given up on) that came before the parking
// keeps its own sequence: the parking's from is one before it, so a
// resumed harness reads it again, and not what came after it and was
// taken.
func TestInboxLateReplyKeepsItsSeq(t *testing.T) {
	b := newInbox()
	b.add(workerapi.InboxItem{Seq: 2, Kind: workerapi.ItemReply, Question: "q-given-up", Body: "late"})
	b.add(workerapi.InboxItem{Seq: 3, Kind: workerapi.ItemMessage, Body: "taken"})
	if m, err := b.nextMessage(context.Background()); err != nil || m != "taken" {
		t.Fatalf("next message: %q, %v", m, err)
	}
	b.abandon("q-given-up", "which db")
	waitIn(t, b, "q-now")
	read, from, ok := b.freeze("q-now")
	if !ok || read != 3 || from != 1 {
		t.Fatalf("freeze: read %d from %d ok %v; want 3, 1 (one before the late reply's own 2)", read, from, ok)
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
