package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service/servicetest"
)

// inventoryEnv launches n workers (a worker, a branch and a worktree each)
// and returns the environment and the worker handles.
func inventoryEnv(t *testing.T, n int) (*servicetest.Env, []string) {
	t.Helper()
	te := servicetest.New(t, nil)
	e := &env{svc: te.Service, store: te.Store, rt: te.Runtime, git: te.Git, clock: servicetest.NewManualClock(time.Now())}
	var workers []string
	for i := range n {
		workers = append(workers, e.launch(t, "run-inv", fmt.Sprintf("k-%d", i), fmt.Sprintf("kitchen/inv-%d", i)))
	}
	return te, workers
}

// livenessByKind tallies the inventory's rows: kind -> liveness -> count.
func livenessByKind(t *testing.T, te *servicetest.Env) map[string]map[string]int {
	t.Helper()
	inv, err := te.Service.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	for _, r := range inv.Resources {
		if out[r.Resource.Kind] == nil {
			out[r.Resource.Kind] = map[string]int{}
		}
		out[r.Resource.Kind][r.Liveness]++
	}
	return out
}

// The inventory asks the runtime and the git host once each, however many
// rows it lists, and still tells live from exited row by row.
func TestInventoryReadsOnceEach(t *testing.T) {
	const n = 40
	te, workers := inventoryEnv(t, n)
	ctx := context.Background()
	// Two workers stopped, two branches deleted behind galley's back.
	for _, w := range workers[:2] {
		if err := te.Runtime.Stop(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"kitchen/inv-0", "kitchen/inv-5"} {
		if err := te.Git.DeleteBranch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	rtOne, rtBatch := te.Runtime.Calls("Liveness"), te.Runtime.Calls("Livenesses")
	gitOne, gitBatch := te.GitHost.Calls("BranchHead"), te.GitHost.Calls("ExistingBranches")

	got := livenessByKind(t, te)

	if d := te.Runtime.Calls("Livenesses") - rtBatch; d != 1 {
		t.Errorf("the inventory of %d workers read the runtime's batch %d times, want once", n, d)
	}
	if d := te.Runtime.Calls("Liveness") - rtOne; d != 0 {
		t.Errorf("the inventory read %d workers one by one", d)
	}
	if d := te.GitHost.Calls("ExistingBranches") - gitBatch; d != 1 {
		t.Errorf("the inventory of %d branches read the git host's batch %d times, want once", n, d)
	}
	if d := te.GitHost.Calls("BranchHead") - gitOne; d != 0 {
		t.Errorf("the inventory read %d branches one by one", d)
	}
	want := map[string]map[string]int{
		protocol.KindWorker:   {protocol.LivenessLive: n - 2, protocol.LivenessExited: 2},
		protocol.KindBranch:   {protocol.LivenessLive: n - 2, protocol.LivenessExited: 2},
		protocol.KindWorktree: {protocol.LivenessLive: n},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("inventory liveness %v, want %v", got, want)
	}
}

// A runtime or git host that cannot be read makes its rows unverifiable,
// and only its rows.
func TestInventoryUnverifiable(t *testing.T) {
	const n = 3
	te, _ := inventoryEnv(t, n)
	down := galleyerr.E(galleyerr.Unavailable, "platform down")
	tests := []struct {
		name    string
		runtime error
		git     error
		want    map[string]map[string]int
	}{
		{"runtime down", down, nil, map[string]map[string]int{
			protocol.KindWorker: {protocol.LivenessUnverifiable: n}, protocol.KindBranch: {protocol.LivenessLive: n},
			protocol.KindWorktree: {protocol.LivenessLive: n}}},
		{"git down", nil, down, map[string]map[string]int{
			protocol.KindWorker: {protocol.LivenessLive: n}, protocol.KindBranch: {protocol.LivenessUnverifiable: n},
			protocol.KindWorktree: {protocol.LivenessLive: n}}},
		{"both up", nil, nil, map[string]map[string]int{
			protocol.KindWorker: {protocol.LivenessLive: n}, protocol.KindBranch: {protocol.LivenessLive: n},
			protocol.KindWorktree: {protocol.LivenessLive: n}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			te.Runtime.FailLiveness(tc.runtime)
			te.GitHost.FailReads(tc.git)
			if got := livenessByKind(t, te); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("inventory liveness %v, want %v", got, tc.want)
			}
		})
	}
}

// An inventory with no worker and no branch asks nobody.
func TestInventoryEmptyAsksNobody(t *testing.T) {
	te := servicetest.New(t, nil)
	if got := livenessByKind(t, te); len(got) != 0 {
		t.Fatalf("inventory %v, want empty", got)
	}
	if n := te.Runtime.Calls("Livenesses") + te.GitHost.Calls("ExistingBranches"); n != 0 {
		t.Errorf("an empty inventory made %d reads", n)
	}
}
