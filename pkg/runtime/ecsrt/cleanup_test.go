//go:build unix

package ecsrt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// Issue 20, item 12: a cleanup that fails at ECS (a StopTask refused) is
// owed in the store and done again by the next housekeeping tick, and a
// cleanup done is never done again.

// housekeeper ticks a reconciler that retries owed cleanups.
type housekeeper struct {
	rec *reconcile.Reconciler
	n   int
}

func newHousekeeper(svc *service.Service, st store.Store) *housekeeper {
	return &housekeeper{rec: reconcile.New(svc, st, reconcile.WithCleaner(svc), reconcile.WithMetrics(io.Discard))}
}

func (h *housekeeper) tick() error {
	h.n++
	ev := fmt.Sprintf(`{"id":"tick-%d","source":"aws.events","detail-type":"Scheduled Event","time":"2027-01-15T10:%02d:00Z","detail":{}}`,
		h.n, 5+5*h.n)
	return h.rec.HandleEvent(context.Background(), json.RawMessage(ev))
}

func effectCall(key, effect string) protocol.EffectCall {
	c := launchCall(key)
	c.Request.Effect.Effect = json.RawMessage(effect)
	return c
}

func record(t *testing.T, st store.Store, kind, handle string) store.Resource {
	t.Helper()
	r, _, err := st.GetResource(context.Background(), kind, handle)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestHousekeepingRetriesAFailedStop(t *testing.T) {
	e := newEnv(t)
	st := memstore.New()
	le := newLaunchEnv(t, e.runtime(t, ecsrt.WithTaskIndex(service.NewTaskIndex(st))), st, newClock(), nil)
	// The fake harness runs until stopped (its branch says so).
	raw, err := le.svc.Apply(context.Background(), effectCall("k-stop",
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b","branch":"galley/test/run"}`), le.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	worker := r.Created[0].Handle
	e.awaitStarted(t, worker)

	// ECS refuses every StopTask (a policy that lost ecs:StopTask) until
	// the fault is cleared.
	e.srv.Inject(ecsstandin.Fault{Op: ecsstandin.OpStopTask, Code: "AccessDeniedException",
		Message: "User is not authorized to perform: ecs:StopTask"})
	cancel := effectCall("k-cancel", `{"type":"cancel-worker","worker":{"kind":"worker","backend":"galley","handle":"`+worker+`"}}`)
	if _, err := le.svc.Apply(context.Background(), cancel, le.clock.Now()); err == nil {
		t.Fatal("the cancel answered applied though its task could not be stopped")
	}
	if rec := record(t, st, protocol.KindWorker, worker); rec.Worker.State != protocol.StateSettled || rec.Cleanup != store.CleanupStop {
		t.Fatalf("after the failed stop the record is %s with cleanup %q, want settled owing %q", rec.Worker.State, rec.Cleanup, store.CleanupStop)
	}

	h := newHousekeeper(le.svc, st)
	stops := len(e.srv.Requests(ecsstandin.OpStopTask))
	if err := h.tick(); err == nil {
		t.Error("a tick whose stop failed answered no error (the function's error alarm would not see it)")
	}
	if n := len(e.srv.Requests(ecsstandin.OpStopTask)); n == stops {
		t.Fatal("the tick did not try the owed stop")
	}
	if rec := record(t, st, protocol.KindWorker, worker); rec.Cleanup != store.CleanupStop {
		t.Fatalf("a stop that failed again is no longer owed: %q", rec.Cleanup)
	}
	if ts := e.tasksOf(worker); len(ts) != 1 || ts[0].DesiredStatus == "STOPPED" {
		t.Fatalf("the task was stopped through the fault: %+v", ts)
	}

	e.srv.ClearFaults()
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	e.awaitStopped(t, worker)
	if rec := record(t, st, protocol.KindWorker, worker); rec.Cleanup != "" {
		t.Fatalf("the stop is done and still owed: %q", rec.Cleanup)
	}
	stops = len(e.srv.Requests(ecsstandin.OpStopTask))
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Requests(ecsstandin.OpStopTask)); n != stops {
		t.Errorf("a tick after the stop was done stopped again (%d StopTask calls)", n-stops)
	}
}
