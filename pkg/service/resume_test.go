package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestTakeoverAfterTheWorkerMovedOn: a holder acts (a reply, a message, a
// cancel, a release) and then fails to record the receipt (its completion
// write failed, or it died), so the claim stays in flight until the lease
// ends. Meanwhile the worker moves on: it settles, or it is released. The
// retry that takes the claim over must converge on the receipt the effect
// was answered, not find the worker gone and stay uncertain for ever (the
// DynamoDB fault runs under load found a reply stuck that way: every retry
// took the claim over, was refused by the settled worker, and answered
// 503).
func TestTakeoverAfterTheWorkerMovedOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		effect func(w, question string) string
		// then moves the worker on after the effect applied.
		then string // "settle" or "release"
	}{
		{"reply, then the worker settles", func(w, q string) string {
			return `{"type":"reply-to-worker","worker":` + workerRef(w) + `,"question":"` + q + `","body":"v2"}`
		}, "settle"},
		{"message, then the worker settles", func(w, _ string) string {
			return `{"type":"message-worker","worker":` + workerRef(w) + `,"body":"hello"}`
		}, "settle"},
		{"reply, then the worker is released", func(w, q string) string {
			return `{"type":"reply-to-worker","worker":` + workerRef(w) + `,"question":"` + q + `","body":"v2"}`
		}, "release"},
		{"cancel, then the worker is released", func(w, _ string) string {
			return `{"type":"cancel-worker","worker":` + workerRef(w) + `}`
		}, "release"},
		{"release", func(w, _ string) string {
			return `{"type":"release-resource","resource":` + workerRef(w) + `}`
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, clock := takeoverEnv(t)
			ctx := context.Background()
			w := e.launch(t, "run-1", "k-launch", "")
			if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
				t.Fatal(err)
			}
			q, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "v1 or v2?"})
			if err != nil {
				t.Fatal(err)
			}
			c := call("run-1", "k-effect", tc.effect(w, q.ID))
			first, _ := e.apply(t, c)

			// The holder's completion is undone: in flight under a lease
			// nobody will complete.
			rec, ver, err := e.store.GetEffect(ctx, "k-effect")
			if err != nil {
				t.Fatal(err)
			}
			rec.State, rec.Receipt, rec.Lease, rec.LeaseExpires = store.EffectInFlight, nil, "dead", clock.Now().Add(10*time.Second)
			if _, err := e.store.PutEffect(ctx, rec, ver); err != nil {
				t.Fatal(err)
			}
			switch tc.then {
			case "settle":
				if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
					t.Fatal(err)
				}
			case "release":
				e.apply(t, call("run-1", "k-release", `{"type":"release-resource","resource":`+workerRef(w)+`}`))
			}
			if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.InFlight, err) {
				t.Fatalf("during the lease: %v", err)
			}
			clock.Advance(11 * time.Second)
			second, _ := e.apply(t, c)
			if fmt.Sprint(first) != fmt.Sprint(second) {
				t.Fatalf("the takeover answered %+v, the first holder %+v", second, first)
			}
			if ans, raw, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusApplied || fmt.Sprint(raw) == "" {
				t.Fatalf("lookup after the takeover: %+v %v", ans, err)
			}
		})
	}
}

// TestTakeoverWithoutEvidenceStaysUncertain: a message whose claim is
// taken over from a holder that left no inbox item, to a worker that has
// settled since, is neither applied (nothing shows it happened) nor
// refused (the holder may have acted): it stays uncertain.
func TestTakeoverWithoutEvidenceStaysUncertain(t *testing.T) {
	e, clock := takeoverEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-launch", "")
	c := call("run-1", "k-message", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`)
	deadClaim(t, e, clock, c, protocol.OpMessage)
	if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(11 * time.Second)
	if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("takeover without evidence: %v, want an uncertain answer", err)
	}
	if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status == protocol.StatusApplied || ans.Status == protocol.StatusAbsent {
		t.Fatalf("lookup: %+v %v", ans, err)
	}
}

// TestTakenOverReplyNeverRecordedIsNotApplied: a holder appended its reply
// to the worker's inbox and died before recording the answer; the worker
// then settled. The reply never reached the agent (an unrecorded reply is
// held back, then skipped) and never can, since a settled worker records
// nothing: the retry that takes the claim over answers not-applied, and a
// lookup then says absent, instead of a receipt for a reply never given.
func TestTakenOverReplyNeverRecordedIsNotApplied(t *testing.T) {
	e, clock := takeoverEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-launch", "")
	if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
		t.Fatal(err)
	}
	q, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "v1 or v2?"})
	if err != nil {
		t.Fatal(err)
	}
	c := call("run-1", "k-reply", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q.ID+`","body":"v2"}`)
	// What the dead holder left: its claim in flight, its item in the inbox,
	// no answer recorded.
	deadClaim(t, e, clock, c, protocol.OpReply)
	if _, err := e.store.AppendInbox(ctx, w, store.InboxItem{Key: "k-reply", Kind: "reply", Question: q.ID, Body: "v2", At: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.WorkerExited(ctx, w, 1, ""); err != nil {
		t.Fatal(err)
	}
	clock.Advance(11 * time.Second)
	if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("taken-over reply never recorded: %v, want not-applied", err)
	}
	if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusAbsent {
		t.Fatalf("lookup after it: %+v %v, want absent", ans, err)
	}
	inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range inbox.Items {
		if it.Kind == "reply" {
			t.Fatalf("the unrecorded reply reached the worker: %+v", inbox.Items)
		}
	}
}

// takeoverEnv is a service whose leases last 10 s on a manual clock.
func takeoverEnv(t *testing.T) (*env, *manualClock) {
	t.Helper()
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.Lease = 10 * time.Second
		*o = append(*o, service.WithClock(clock))
	})
	return e, clock
}

// deadClaim stores what a holder that died before acting on c leaves: its
// claim in flight under a lease nobody will complete.
func deadClaim(t *testing.T, e *env, clock *manualClock, c protocol.EffectCall, operation string) {
	t.Helper()
	fp, err := protocol.Fingerprint(c)
	if err != nil {
		t.Fatal(err)
	}
	rec := store.Effect{Key: c.Request.Key, Fingerprint: fp, Operation: operation, State: store.EffectInFlight,
		Lease: "dead", LeaseExpires: clock.Now().Add(10 * time.Second), Updated: clock.Now()}
	if _, err := e.store.PutEffect(context.Background(), rec, store.NoVersion); err != nil {
		t.Fatal(err)
	}
}
