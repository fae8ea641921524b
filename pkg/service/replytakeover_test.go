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
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestTakenOverReplyNeverRecordedIsNotApplied: a holder appended its reply
// to the worker's inbox and died before recording the answer; the worker
// then settled. The reply never reached the agent (an unrecorded reply is
// held back, then skipped) and never can, since a settled worker records
// nothing: the retry that takes the claim over answers not-applied, and a
// lookup then says absent, instead of a receipt for a reply never given.
func TestTakenOverReplyNeverRecordedIsNotApplied(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.Lease = 10 * time.Second
		*o = append(*o, service.WithClock(clock))
	})
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
	if _, err := e.store.PutEffect(ctx, store.Effect{Key: "k-reply", Fingerprint: fingerprint(t, c), Operation: "reply-to-worker",
		State: store.EffectInFlight, Lease: "dead.lease", LeaseExpires: clock.Now().Add(10 * time.Second)}, store.NoVersion); err != nil {
		t.Fatal(err)
	}
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

func fingerprint(t *testing.T, c protocol.EffectCall) string {
	t.Helper()
	fp, err := protocol.Fingerprint(c)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}
