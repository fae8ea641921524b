package service_test

import (
	"context"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
)

// racingRuntime cancels the worker from inside its Start (a cancel served
// elsewhere while the launch runs), then refuses every stop until told.
type racingRuntime struct {
	*servicetest.Runtime
	mu       sync.Mutex
	onStart  func(handle string)
	refusing bool
	stops    int // stops done
}

func (r *racingRuntime) Start(ctx context.Context, spec service.WorkerSpec) error {
	if err := r.Runtime.Start(ctx, spec); err != nil {
		return err
	}
	r.mu.Lock()
	f := r.onStart
	r.onStart = nil
	r.mu.Unlock()
	if f != nil {
		f(spec.Handle)
	}
	r.setRefusing(true)
	return nil
}

func (r *racingRuntime) Stop(ctx context.Context, handle string) error {
	r.mu.Lock()
	refusing := r.refusing
	if !refusing {
		r.stops++
	}
	r.mu.Unlock()
	if refusing {
		return galleyerr.Errorf(galleyerr.Unavailable, "the platform refused the stop")
	}
	return r.Runtime.Stop(ctx, handle)
}

func (r *racingRuntime) done() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stops
}

func (r *racingRuntime) setRefusing(v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusing = v
}

// A cancel that settles the worker while its launch runs stops nothing (no
// compute yet) and so clears the stop it owed; the launch then starts the
// compute, sees the worker settled and stops it. When that stop fails, the
// record must owe it again, so housekeeping does it, and does it once.
func TestStopAfterARacingCancelIsOwed(t *testing.T) {
	rt := &racingRuntime{Runtime: servicetest.NewRuntime()}
	te := servicetest.New(t, nil, service.WithRuntime(rt))
	svc, st := te.Service, te.Store
	ctx := context.Background()
	rt.onStart = func(handle string) {
		if _, err := svc.Apply(ctx, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(handle)+`}`), service.SystemClock.Now()); err != nil {
			t.Errorf("the racing cancel: %v", err)
		}
	}
	if _, err := svc.Apply(ctx, call("run-1", "k-launch", launchBody("")), service.SystemClock.Now()); err == nil {
		t.Fatal("the launch answered applied though the stop of its settled worker's compute failed")
	}
	var handle string
	all, err := st.ListResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Kind == protocol.KindWorker {
			handle = r.Handle
			if r.Worker.State != protocol.StateSettled || r.Cleanup != store.CleanupStop {
				t.Fatalf("the worker is %s owing %q, want settled owing %q", r.Worker.State, r.Cleanup, store.CleanupStop)
			}
		}
	}
	if handle == "" {
		t.Fatal("no worker record")
	}

	rt.setRefusing(false)
	stops := rt.done()
	if n, err := svc.RetryCleanups(ctx); err != nil || n != 1 {
		t.Fatalf("housekeeping did %d cleanups (%v), want 1", n, err)
	}
	if rt.done() != stops+1 {
		t.Fatalf("housekeeping stopped %d times, want once", rt.done()-stops)
	}
	r, _, err := st.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil || r.Cleanup != "" {
		t.Fatalf("after the stop the record owes %q (%v)", r.Cleanup, err)
	}
	if n, err := svc.RetryCleanups(ctx); err != nil || n != 0 || rt.done() != stops+1 {
		t.Fatalf("a second pass did %d cleanups (%v), %d stops: a done stop was repeated", n, err, rt.done()-stops)
	}
}

// A released worktree whose removal an earlier version left owed (its ECS
// cleanup task, when worktrees were on EFS) is removed once by the next
// housekeeping pass, its record cleared, and never again.
func TestWorktreeRemovalOwedByAnEarlierVersionIsCleared(t *testing.T) {
	te := servicetest.New(t, nil)
	svc, st := te.Service, te.Store
	ctx := context.Background()
	if _, err := st.PutResource(ctx, store.Resource{Kind: protocol.KindWorktree, Handle: "wt-old", Owner: "k-old",
		Created: service.SystemClock.Now(), Released: true, Path: "/mnt/workspaces/wt-old", Cleanup: store.CleanupWorkspace}, store.NoVersion); err != nil {
		t.Fatal(err)
	}
	for pass, want := range []int{1, 0} {
		if n, err := svc.RetryCleanups(ctx); err != nil || n != want {
			t.Fatalf("pass %d did %d cleanups (%v), want %d", pass+1, n, err, want)
		}
	}
	if got := te.Runtime.Removed; len(got) != 1 || got[0] != "wt-old" {
		t.Errorf("the runtime removed %v, want the worktree once", got)
	}
	if r, _, err := st.GetResource(ctx, protocol.KindWorktree, "wt-old"); err != nil || r.Cleanup != "" || !r.Released {
		t.Errorf("the record is %+v (%v), want released owing nothing", r, err)
	}
}
