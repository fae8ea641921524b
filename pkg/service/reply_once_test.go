package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// harnessView polls a worker's inbox as its harness does, from a cursor,
// and keeps every item it was given.
type harnessView struct {
	t      *testing.T
	svc    *service.Service
	worker string
	cursor int64
	got    []workerapi.InboxItem
}

func (h *harnessView) poll() []workerapi.InboxItem {
	h.t.Helper()
	a, err := h.svc.WorkerInbox(context.Background(), h.worker, h.cursor, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, it := range a.Items {
		h.cursor = max(h.cursor, it.Seq)
	}
	h.got = append(h.got, a.Items...)
	return a.Items
}

// replies counts the replies to question the harness was given.
func (h *harnessView) replies(question string) int {
	n := 0
	for _, it := range h.got {
		if it.Kind == "reply" && it.Question == question {
			n++
		}
	}
	return n
}

// replyRig is a worker with one open question on a fault store and a
// manual clock.
type replyRig struct {
	e        *env
	fs       *faultstore.Store
	clock    *manualClock
	lease    time.Duration
	worker   string
	question string
	harness  *harnessView
}

func newReplyRig(t *testing.T, open func(*testing.T) store.Store) *replyRig {
	t.Helper()
	clock := servicetest.NewManualClock(time.Now())
	fs := faultstore.New(open(t))
	te := servicetest.New(t, nil, service.WithStore(fs), service.WithClock(clock))
	r := &replyRig{e: &env{svc: te.Service, store: fs, rt: te.Runtime, git: te.Git, clock: clock},
		fs: fs, clock: clock, lease: te.Service.Config().Lease}
	r.worker = r.e.launch(t, "run-reply", "k-launch", "")
	r.question = r.e.post(t, r.worker, "question", "which database?")
	r.harness = &harnessView{t: t, svc: te.Service, worker: r.worker}
	return r
}

func (r *replyRig) reply(key, body string) protocol.EffectCall {
	return call("run-reply", key, `{"type":"reply-to-worker","worker":`+workerRef(r.worker)+
		`,"question":"`+r.question+`","body":"`+body+`"}`)
}

// failRecording makes the next write of the worker record fail before it
// is made: the reply's copy is appended, its answer not recorded.
func (r *replyRig) failRecording() {
	r.fs.Inject(faultstore.Fault{Method: "PutResource", Key: protocol.KindWorker + "/" + r.worker, When: faultstore.Before, Times: 1})
}

// TestReplyAppliedReachesTheAgentOnce (issue 13, item 3): a reply's inbox
// copy is appended but recording its answer fails; the hold runs out and
// the unrecorded copy is skipped; a later message moves the harness's
// cursor past it; then the retried reply is recorded and answers applied.
// The agent gets the reply exactly once, after the message. On every
// store.
func TestReplyAppliedReachesTheAgentOnce(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			r := newReplyRig(t, sc.open)
			e, h := r.e, r.harness
			reply := r.reply("k-reply", "postgres")

			r.failRecording()
			if _, err := e.svc.Apply(t.Context(), reply, r.clock.Now()); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first reply: %v, want uncertain (Unavailable)", err)
			}
			if got := h.poll(); len(got) != 0 {
				t.Fatalf("an unrecorded reply is held, yet the harness got %+v", got)
			}
			r.clock.Advance(2*r.lease + time.Second)
			if got := h.poll(); len(got) != 0 {
				t.Fatalf("an unrecorded reply past its hold is skipped, yet the harness got %+v", got)
			}
			e.apply(t, call("run-reply", "k-message", `{"type":"message-worker","worker":`+workerRef(r.worker)+`,"body":"carry on"}`))
			if got := h.poll(); len(got) != 1 || got[0].Kind != "message" {
				t.Fatalf("after the message the harness got %+v", got)
			}

			e.apply(t, reply) // the retry: applied
			h.poll()
			h.poll()
			if n := h.replies(r.question); n != 1 {
				t.Fatalf("the reply answered applied reached the agent %d times (harness got %+v)", n, h.got)
			}
			if o := e.observe(t, r.worker); o.State != protocol.StateReady {
				t.Errorf("worker %s after its only question was answered, want ready", o.State)
			}
			// A harness that starts over from the beginning reads it once too.
			fresh := &harnessView{t: t, svc: e.svc, worker: r.worker}
			fresh.poll()
			if n := fresh.replies(r.question); n != 1 {
				t.Fatalf("read from the start, the reply comes %d times", n)
			}
		})
	}
}

// TestReplyRetryNamesItsYoungCopy: a retry soon after the first attempt
// failed to record names the copy that attempt appended (still held, so no
// reader can have skipped it) rather than appending another.
func TestReplyRetryNamesItsYoungCopy(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			r := newReplyRig(t, sc.open)
			reply := r.reply("k-reply", "sqlite")
			r.failRecording()
			if _, err := r.e.svc.Apply(t.Context(), reply, r.clock.Now()); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first reply: %v, want uncertain", err)
			}
			appends := r.fs.Calls("AppendInbox")
			r.e.apply(t, reply)
			if n := r.fs.Calls("AppendInbox") - appends; n != 0 {
				t.Errorf("the retry appended %d more copies", n)
			}
			r.harness.poll()
			if n := r.harness.replies(r.question); n != 1 {
				t.Fatalf("the reply reached the agent %d times", n)
			}
		})
	}
}

// TestReplyThatCannotReachAnswersNotApplied: the first attempt appended its
// copy and failed to record; the worker settled since. No answer can be
// recorded any more, so the copy never reaches the agent, and the retry
// answers not-applied (rejected), never applied.
func TestReplyThatCannotReachAnswersNotApplied(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			r := newReplyRig(t, sc.open)
			reply := r.reply("k-reply", "mysql")
			r.failRecording()
			if _, err := r.e.svc.Apply(t.Context(), reply, r.clock.Now()); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first reply: %v, want uncertain", err)
			}
			r.e.apply(t, call("run-reply", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(r.worker)+`}`))
			r.e.refused(t, reply, galleyerr.Invalid)
			r.clock.Advance(2*r.lease + time.Second)
			r.harness.poll()
			if n := r.harness.replies(r.question); n != 0 {
				t.Fatalf("a reply answered not-applied reached the agent %d times", n)
			}
		})
	}
}
