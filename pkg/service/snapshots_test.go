package service_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/snapshot"
)

// launchedWorktree launches a worker and answers its worktree's handle.
func launchedWorktree(t *testing.T, e *env) (worker, worktree string) {
	t.Helper()
	r, _ := e.apply(t, call("run-1", "k-launch", launchBody("")))
	worker, worktree = r.CreatedHandle(protocol.KindWorker), r.CreatedHandle(protocol.KindWorktree)
	if worker == "" || worktree == "" {
		t.Fatalf("the launch created %+v, want a worker and a worktree", r.Created)
	}
	return worker, worktree
}

func releaseWorktree(key, worktree string) protocol.EffectCall {
	return call("run-1", key, `{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":"`+worktree+`"}}`)
}

// Releasing a worktree deletes its snapshot from the store the harnesses
// save to, and only its: another worktree's stays.
func TestReleasedWorktreeLosesItsSnapshot(t *testing.T) {
	store, err := snapshot.NewDirStore(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	e := newEnv(t, func(cfg *service.Config, opts *[]service.Option) {
		*opts = append(*opts, service.WithSnapshots(snapshot.Worktrees{Store: store, House: "origin89"}))
	})
	ctx := context.Background()
	worker, wt := launchedWorktree(t, e)
	for _, h := range []string{wt, "wt-another"} {
		if err := store.Put(ctx, snapshot.WorktreeKey("origin89", h), bytes.NewReader([]byte("an archive"))); err != nil {
			t.Fatal(err)
		}
	}
	// In use: refused, and the snapshot stays.
	e.refused(t, releaseWorktree("k-release-busy", wt), galleyerr.Invalid)
	if _, err := store.Get(ctx, snapshot.WorktreeKey("origin89", wt)); err != nil {
		t.Fatalf("a refused release deleted the snapshot: %v", err)
	}
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(worker)+`}`))
	e.apply(t, releaseWorktree("k-release-wt", wt))
	if _, err := store.Get(ctx, snapshot.WorktreeKey("origin89", wt)); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Errorf("the released worktree's snapshot: Get = %v, want NotFound", err)
	}
	if _, err := store.Get(ctx, snapshot.WorktreeKey("origin89", "wt-another")); err != nil {
		t.Errorf("another worktree's snapshot went with the release: %v", err)
	}
}

// brokenSnapshots fails every removal, as an unreachable bucket would.
type brokenSnapshots struct{ tried []string }

func (b *brokenSnapshots) RemoveSnapshot(_ context.Context, worktree string) error {
	b.tried = append(b.tried, worktree)
	return errors.New("the snapshot store is unreachable")
}

// A snapshot that cannot be deleted never fails the release.
func TestReleaseSurvivesAFailedSnapshotRemoval(t *testing.T) {
	broken := &brokenSnapshots{}
	e := newEnv(t, func(cfg *service.Config, opts *[]service.Option) {
		*opts = append(*opts, service.WithSnapshots(broken))
	})
	worker, wt := launchedWorktree(t, e)
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(worker)+`}`))
	r, _ := e.apply(t, releaseWorktree("k-release-wt", wt))
	if len(r.Touched) != 1 || r.Touched[0].Handle != wt {
		t.Fatalf("the release touched %+v, want the worktree", r.Touched)
	}
	if len(broken.tried) != 1 || broken.tried[0] != wt {
		t.Errorf("removals tried %v, want the worktree's once", broken.tried)
	}
	res, _, err := e.store.GetResource(context.Background(), protocol.KindWorktree, wt)
	if err != nil || !res.Released {
		t.Errorf("the worktree's record: %+v %v, want released", res, err)
	}
}
