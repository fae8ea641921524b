package service_test

import (
	"context"
	"testing"
)

// A worker's Self names its worktree, and says whether its launch named
// that worktree as existing: the harness restores the worktree's snapshot
// only then (docs/snapshots.md).
func TestSelfNamesItsWorktreeAndWhetherReused(t *testing.T) {
	e := newEnv(t)
	first, _ := e.apply(t, call("run-1", "k-1", launchBody("feature/a")))
	w1, wt := first.Created[0].Handle, first.Created[2].Handle
	e.apply(t, call("run-1", "k-c", `{"type":"cancel-worker","worker":`+workerRef(w1)+`}`))
	again, _ := e.apply(t, call("run-1", "k-2", `{"type":"launch-worker","role":"commis","workspace":{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"`+wt+`"}},"brief":"again"}`))
	w2 := again.Created[0].Handle
	for _, c := range []struct {
		worker string
		reused bool
	}{{w1, false}, {w2, true}} {
		self, err := e.svc.WorkerSelf(context.Background(), c.worker)
		if err != nil {
			t.Fatal(err)
		}
		if self.Worktree != wt || self.WorktreeReused != c.reused {
			t.Errorf("worker %s: worktree %q reused %v, want %q reused %v", c.worker, self.Worktree, self.WorktreeReused, wt, c.reused)
		}
	}
}
