//go:build unix

package ecsrt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// Issue 20, item 12: a cleanup that fails at ECS (a StopTask refused, a
// worktree's cleanup task that fails to start on an EFS mount error) is
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

func TestHousekeepingRetriesAWorktreeRemovalThatFailedToStart(t *testing.T) {
	e, root := newEFSEnv(t, galleyWorker)
	st := memstore.New()
	le := newLaunchEnv(t, e.runtime(t), st, newClock(), func(c *service.Config) { c.WorkspaceRoot = root })
	ws := filepath.Join(root, "wt-efs")
	clone(t, ws)
	if _, err := st.PutResource(context.Background(), store.Resource{Kind: protocol.KindWorktree, Handle: "wt-efs",
		Owner: "k-made", Created: le.clock.Now(), Path: ws}, store.NoVersion); err != nil {
		t.Fatal(err)
	}

	// The first cleanup task fails to mount EFS, as Fargate fails it.
	e.srv.InjectStartFailure(ecsstandin.StartFailure{Reason: ecsstandin.ReasonEFSMount, Times: 1})
	release := effectCall("k-release", `{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":"wt-efs"}}`)
	if _, err := le.svc.Apply(context.Background(), release, le.clock.Now()); err != nil {
		t.Fatalf("release: %v", err)
	}
	rec := record(t, st, protocol.KindWorktree, "wt-efs")
	if !rec.Released || rec.Cleanup != store.CleanupWorkspace || rec.CleanupRef == "" {
		t.Fatalf("after the release the record is %+v, want released owing its removal with the task named", rec)
	}
	first := awaitCleanupStopped(t, e, 1)[0]
	if first.StopCode != "TaskFailedToStart" {
		t.Fatalf("the first cleanup task stopped with %q (%s), want TaskFailedToStart", first.StopCode, first.StoppedReason)
	}
	if _, err := os.Stat(filepath.Join(ws, "work.txt")); err != nil {
		t.Fatalf("the worktree went though its cleanup task never ran: %v", err)
	}

	h := newHousekeeper(le.svc, st)
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, ws)
	second := awaitCleanupStopped(t, e, 2)
	if second[1].ClientToken == first.ClientToken {
		t.Error("the second attempt reused the first's clientToken: ECS would answer the failed task")
	}
	if c := second[1].ExitCode; c == nil || *c != 0 {
		t.Errorf("the second cleanup task exited %v, want 0", c)
	}
	if rec := record(t, st, protocol.KindWorktree, "wt-efs"); rec.Cleanup != store.CleanupWorkspace || rec.CleanupTries != 1 {
		t.Fatalf("before the tick that sees it done the record owes %q after %d tries", rec.Cleanup, rec.CleanupTries)
	}
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	if rec := record(t, st, protocol.KindWorktree, "wt-efs"); rec.Cleanup != "" {
		t.Fatalf("the removal is done and still owed: %q", rec.Cleanup)
	}
	calls := len(e.srv.Requests(ecsstandin.OpRunTask, ecsstandin.OpDescribeTasks))
	if err := h.tick(); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask, ecsstandin.OpDescribeTasks)); n != calls {
		t.Errorf("a tick after the removal was done called ECS %d times", n-calls)
	}
	if n := len(e.cleanupTasks()); n != 2 {
		t.Errorf("%d cleanup tasks, want 2", n)
	}
}

// awaitCleanupStopped waits until the stand-in shows n cleanup tasks, all
// STOPPED, and returns them in the order they were started.
func awaitCleanupStopped(t *testing.T, e *env, n int) []ecsstandin.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		ts := e.cleanupTasks()
		stopped := 0
		for _, ti := range ts {
			if ti.LastStatus == "STOPPED" {
				stopped++
			}
		}
		if len(ts) == n && stopped == n {
			return ts
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d cleanup tasks stopped, have %+v", n, ts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
