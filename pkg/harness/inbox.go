package harness

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// errStopping ends every wait once the harness stops.
var errStopping = errors.New("the worker is stopping")

// inbox holds what kitchn sent the worker until the agent takes it:
// message bodies in arrival order, and replies by question id.
type inbox struct {
	mu       sync.Mutex
	messages []string
	replies  map[string]heldReply // question id -> its reply, not yet taken
	// abandoned holds the questions whose ask_coordinator call ended before
	// its reply came (the CLI gave up on the call, or its connection
	// dropped), with their subjects: their replies become messages, so
	// they reach the agent on its next tool result or as its next turn.
	// The agent makes them at will (one a posted question), so they are
	// bounded: the latest maxAbandoned, each subject cut to a line.
	abandoned      map[string]string
	abandonedOrder []string // oldest first
	stopped        bool
	changed        chan struct{} // closed and replaced on every change
	// read is the sequence of the last item given to the inbox, and
	// msgSeqs the sequence of each message queued (parallel to messages):
	// a parking's cursors (park.go).
	read    int64
	msgSeqs []int64
	// waits are the agent's waits under way (reply, nextMessage), each
	// registered and ended under mu with its take: a parking freezes the
	// inbox only while the wait it parks is still under way and has taken
	// nothing (freeze).
	waits map[*boxWait]struct{}
	// frozen holds what arrives while the harness parks, so that nothing
	// reaches the agent once the parking may have landed (park.go); no
	// wait takes anything while it is set. frozenWait is the wait the
	// parking parks.
	frozen     bool
	frozenWait *boxWait
	held       []workerapi.InboxItem
	// woke is the question a resumed CLI was parked in, and wokeSubject
	// its subject: its reply becomes a message, the resumed CLI's prompt
	// (resume.go).
	woke, wokeSubject string
}

// heldReply is a reply not yet taken, with its inbox sequence.
type heldReply struct {
	body string
	seq  int64
}

// boxWait is one wait of the agent's: for the reply to question, or for
// the next message when question is "".
type boxWait struct{ question string }

func newInbox() *inbox {
	return &inbox{replies: map[string]heldReply{}, abandoned: map[string]string{}, waits: map[*boxWait]struct{}{}, changed: make(chan struct{})}
}

func (b *inbox) add(item workerapi.InboxItem) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen {
		b.held = append(b.held, item)
		return
	}
	b.addLocked(item)
}

func (b *inbox) addLocked(item workerapi.InboxItem) {
	b.read = max(b.read, item.Seq)
	switch item.Kind {
	case workerapi.ItemMessage:
		b.messages = append(b.messages, item.Body)
		b.msgSeqs = append(b.msgSeqs, item.Seq)
	case workerapi.ItemReply:
		if item.Question != "" && item.Question == b.woke {
			b.woke = ""
			b.messages = append(b.messages, parkedReply(item.Question, b.wokeSubject, item.Body))
			b.msgSeqs = append(b.msgSeqs, item.Seq)
			break
		}
		if subject, ok := b.abandoned[item.Question]; ok {
			delete(b.abandoned, item.Question)
			b.abandonedOrder = slices.DeleteFunc(b.abandonedOrder, func(q string) bool { return q == item.Question })
			b.messages = append(b.messages, lateReply(item.Question, subject, item.Body))
			b.msgSeqs = append(b.msgSeqs, item.Seq)
			break
		}
		b.replies[item.Question] = heldReply{body: item.Body, seq: item.Seq}
	default:
		return
	}
	b.notifyLocked()
}

// wokeBy makes the reply to question, the one a resumed CLI was parked
// in, a message (resume.go).
func (b *inbox) wokeBy(question, subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.woke, b.wokeSubject = question, subject
}

// parkedReply is how the reply that resumes a parked CLI reads as its
// prompt: its ask_coordinator call was cut off by the parking.
func parkedReply(question, subject, body string) string {
	return "The coordinator replied to your question " + question + " (\"" + subject + "\"). Your ask_coordinator call was cut off while you waited (the session was paused and resumed); this is its reply: " + body
}

// startAt sets the cursor a resumed harness reads after (park.go).
func (b *inbox) startAt(seq int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.read = max(b.read, seq)
}

// cursor is where the inbox poll starts.
func (b *inbox) cursor() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.read
}

func (b *inbox) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped = true
	b.notifyLocked()
}

func (b *inbox) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// nextMessage takes the oldest message, waiting for one. A message is
// taken only when it is returned, so a wait that ends early loses none.
func (b *inbox) nextMessage(ctx context.Context) (string, error) {
	return b.await(ctx, &boxWait{}, func() (string, bool) {
		if len(b.messages) == 0 {
			return "", false
		}
		m := b.messages[0]
		b.messages, b.msgSeqs = b.messages[1:], b.msgSeqs[1:]
		return m, true
	})
}

// reply takes the reply to question, waiting for it.
func (b *inbox) reply(ctx context.Context, question string) (string, error) {
	return b.await(ctx, &boxWait{question: question}, func() (string, bool) {
		r, ok := b.replies[question]
		if ok {
			delete(b.replies, question)
		}
		return r.body, ok
	})
}

// abandon records that nobody waits for question's reply any more: a reply
// already here, or one that comes later, is queued as a message instead, so
// it is never dropped.
func (b *inbox) abandon(question, subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.replies[question]; ok {
		delete(b.replies, question)
		b.messages = append(b.messages, lateReply(question, subject, r.body))
		// Its own sequence: a parking reads again from before it.
		b.msgSeqs = append(b.msgSeqs, r.seq)
		b.notifyLocked()
		return
	}
	if _, ok := b.abandoned[question]; !ok {
		b.abandonedOrder = append(b.abandonedOrder, question)
	}
	b.abandoned[question] = cutText(subject, maxAbandonedSubject)
	for len(b.abandonedOrder) > maxAbandoned {
		// The oldest's reply, should it still come, stays a reply nobody
		// takes: the coordinator's, not the agent's, to bound.
		delete(b.abandoned, b.abandonedOrder[0])
		b.abandonedOrder = b.abandonedOrder[1:]
	}
}

// Bounds of what the inbox keeps of abandoned questions.
const (
	maxAbandoned        = 1024
	maxAbandonedSubject = 200
)

// lateReply is how a reply to an abandoned question reads as a message.
func lateReply(question, subject, body string) string {
	return "Reply to your question " + question + " (\"" + subject + "\"), which came after your ask_coordinator call had ended: " + body
}

// drainMessages takes every waiting message.
func (b *inbox) drainMessages() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen {
		return nil // nothing reaches the agent while it parks
	}
	m := b.messages
	b.messages, b.msgSeqs = nil, nil
	return m
}

// freeze stops giving the agent what arrives (it is held) and answers the
// parking's cursors: read, the last sequence given to the inbox, and
// from, where a resumed harness reads again so that the messages queued
// and not taken come back (one before the oldest). It freezes only while
// the agent's wait for question's reply (or, when question is "", for a
// message) is under way, has taken nothing and has nothing to take: that
// check and the freeze are one step under the inbox's lock, and no wait
// takes anything while frozen, so the agent either got its input before
// the freeze (ok is false, the parking is abandoned) or gets none until
// thaw.
func (b *inbox) freeze(question string) (read, from int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.frozen || b.stopped {
		return 0, 0, false
	}
	w := b.waitFor(question)
	if w == nil {
		return 0, 0, false // the wait ended (its input taken, or the agent gave up on it)
	}
	if _, here := b.replies[question]; (question != "" && here) || (question == "" && len(b.messages) > 0) {
		return 0, 0, false // about to be taken
	}
	b.frozen, b.frozenWait = true, w
	from = b.read
	if len(b.msgSeqs) > 0 {
		from = min(from, slices.Min(b.msgSeqs)-1)
	}
	return b.read, from, true
}

// waitFor is the wait under way for question's reply (a message when
// question is ""), or nil.
func (b *inbox) waitFor(question string) *boxWait {
	for w := range b.waits {
		if w.question == question {
			return w
		}
	}
	return nil
}

// stillFrozenWait reports whether the inbox is frozen and the wait it
// froze is still under way: the agent is still blocked in it.
func (b *inbox) stillFrozenWait() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.waits[b.frozenWait]
	return b.frozen && ok
}

// thaw gives the agent what arrived while frozen: a parking that did not
// land.
func (b *inbox) thaw() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frozen, b.frozenWait = false, nil
	for _, it := range b.held {
		b.addLocked(it)
	}
	b.held = nil
	b.notifyLocked() // a wait may take what was there before the freeze
}

// await runs take under the lock, never while frozen, until it succeeds,
// the inbox stops or ctx ends; w is registered as under way until then.
func (b *inbox) await(ctx context.Context, w *boxWait, take func() (string, bool)) (string, error) {
	b.mu.Lock()
	b.waits[w] = struct{}{}
	b.mu.Unlock()
	for {
		b.mu.Lock()
		if !b.frozen {
			if v, ok := take(); ok {
				delete(b.waits, w)
				b.mu.Unlock()
				return v, nil
			}
		}
		stopped, ch := b.stopped, b.changed
		if stopped {
			delete(b.waits, w)
		}
		b.mu.Unlock()
		if stopped {
			return "", errStopping
		}
		select {
		case <-ch:
		case <-ctx.Done():
			b.mu.Lock()
			delete(b.waits, w)
			b.mu.Unlock()
			return "", ctx.Err()
		}
	}
}

// pollInbox reads the inbox when the worker's bell says it may hold
// something new, and at least every QuietRead whatever the bell says (a
// lost ring costs latency, not a message), until the worker is settled or
// ctx ends.
func (h *harness) pollInbox(ctx context.Context) {
	after := h.box.cursor() // a resumed harness's, else 0
	retry := time.Second
	bell := h.cfg.newBell(h.api, h.log)
	read, lastRead := true, time.Now()
	for {
		if !read && time.Since(lastRead) < h.cfg.QuietRead {
			read = bell.wait(ctx, after)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		ans, err := h.api.Inbox(ctx, after, 0)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if galleyerr.Is(galleyerr.Unauthorized, err) {
				h.fatal <- err // galley no longer knows this worker's token
				return
			}
			h.log.Warn("reading the inbox failed; retrying", "err", err, "in", retry)
			if sleepCtx(ctx, retry) != nil {
				return
			}
			retry = min(retry*2, 30*time.Second)
			continue
		}
		retry, read, lastRead = time.Second, false, time.Now()
		for _, it := range ans.Items {
			if it.Seq <= after {
				continue
			}
			after = it.Seq
			h.log.Info("inbox item", "seq", it.Seq, "kind", it.Kind, "question", it.Question)
			h.box.add(it)
		}
		if ans.Settled {
			h.log.Info("galley settled the worker", "outcome", ans.Outcome)
			close(h.settled)
			return
		}
	}
}

func (h *harness) isSettled() bool {
	select {
	case <-h.settled:
		return true
	default:
		return false
	}
}
