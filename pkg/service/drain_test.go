package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestDrainAnswersHeldWaits: Drain (the server shutting down) answers
// every held wait at once as its deadline would, a wait of a minute each:
// an await on an empty run answers empty, an await over status rows
// answers them (what next would), a worker's inbox poll answers no item.
// After Drain an await answers without holding.
func TestDrainAnswersHeldWaits(t *testing.T) {
	e, bell := awaitEnv(t, func(*testing.T) store.Store { return memstore.New() })
	ctx := t.Context()
	w := e.launch(t, "run-status", "k-drain", "")
	status := e.post(t, w, "status", "compiling")

	empty, cancelEmpty := startAwait(e, "run-empty", "c1")
	defer cancelEmpty()
	rows, cancelRows := startAwait(e, "run-status", "c1")
	defer cancelRows()
	type inboxResult struct {
		a   workerapi.InboxAnswer
		err error
	}
	inbox := make(chan inboxResult, 1)
	go func() {
		a, err := e.svc.WorkerInbox(context.Background(), w, 0, time.Minute)
		inbox <- inboxResult{a, err}
	}()
	for range 3 { // each has checked and holds
		select {
		case <-bell.waits:
		case <-time.After(30 * time.Second):
			t.Fatal("the waits did not all hold")
		}
	}

	e.svc.Drain()
	within := func(what string, got <-chan struct{}) {
		t.Helper()
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s still holds after Drain", what)
		}
	}
	var r awaitResult
	within("await on an empty run", when(func() { r = <-empty }))
	if r.err != nil || r.a.Status != protocol.MailEmpty {
		t.Errorf("the await on an empty run answered %s %v, want empty", mustJSON(t, r.a), r.err)
	}
	within("await over status rows", when(func() { r = <-rows }))
	if r.err != nil || r.a.Status != protocol.MailDelivery || len(r.a.Delivery.Messages) != 1 || r.a.Delivery.Messages[0].ID != status {
		t.Errorf("the await over a status row answered %s %v, want the row", mustJSON(t, r.a), r.err)
	}
	var in inboxResult
	within("inbox poll", when(func() { in = <-inbox }))
	if in.err != nil || len(in.a.Items) != 0 || in.a.Settled {
		t.Errorf("the inbox poll answered %+v %v, want no item", in.a, in.err)
	}

	later, err := e.svc.Await(ctx, "run-later", "c1", time.Minute)
	if err != nil || later.Status != protocol.MailEmpty {
		t.Errorf("an await after Drain answered %s %v, want empty at once", mustJSON(t, later), err)
	}
	select {
	case topic := <-bell.waits:
		t.Errorf("an await after Drain held (waited on %s)", topic)
	default:
	}
}

// when runs f in the background and closes the channel it returns once f
// has returned.
func when(f func()) <-chan struct{} {
	c := make(chan struct{})
	go func() { defer close(c); f() }()
	return c
}
