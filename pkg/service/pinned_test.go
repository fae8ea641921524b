package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

func pinnedLaunch(workspace, head, branch string) string {
	b := `{"type":"launch-worker","role":"inspector","workspace":` + workspace + `,"brief":"Check the work."`
	if branch != "" {
		b += `,"branch":"` + branch + `"`
	}
	return b + `,"pinned":{"head":"` + head + `","report_path":"reports/inspection.md"}}`
}

func existingWorktree(handle string) string {
	return `{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"` + handle + `"}}`
}

// TestPinnedHeadIsChecked (issue 13, item 10): a launch that reuses a
// worktree with pinned.head runs only when the worktree's head (its
// branch's head) is that commit; otherwise it answers not-applied rejected,
// starts nothing and writes no record. A new worktree starts at the
// default branch's head, which pinned.head must then name.
func TestPinnedHeadIsChecked(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, _ := e.apply(t, call("run-1", "k-cook", launchBody("feature/pin")))
	cook, wt := r.Created[0].Handle, r.Created[2].Handle
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(cook)+`}`))
	base, _ := e.git.DefaultHead(ctx)
	pushed := pushTo(t, e, "feature/pin")
	stale := base

	starts := e.rt.StartCount()
	for _, tc := range []struct {
		name, key, body string
	}{
		{"a reused worktree that moved on", "k-stale", pinnedLaunch(existingWorktree(wt), stale, "")},
		{"a new worktree at another commit", "k-new-stale", pinnedLaunch(`{"type":"isolated"}`, pushed, "")},
		{"a new branch at another commit", "k-branch-stale", pinnedLaunch(`{"type":"isolated"}`, pushed, "feature/new")},
	} {
		c := call("run-1", tc.key, tc.body)
		if err := applyErr(e, c); !galleyerr.Is(galleyerr.Invalid, err) || !strings.Contains(err.Error(), "pinned.head") {
			t.Fatalf("%s: %v, want not-applied rejected naming pinned.head", tc.name, err)
		}
		if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusAbsent {
			t.Fatalf("%s: lookup %+v %v, want absent", tc.name, ans, err)
		}
	}
	if e.rt.StartCount() != starts {
		t.Fatal("a refused pinned launch started a worker")
	}
	if _, exists, _ := e.git.BranchHead(ctx, "feature/new"); exists {
		t.Fatal("a refused pinned launch created its branch")
	}

	r, _ = e.apply(t, call("run-1", "k-inspect", pinnedLaunch(existingWorktree(wt), pushed, "")))
	if len(r.Touched) != 1 || r.Touched[0].Handle != wt {
		t.Fatalf("pinned launch on the worktree: %+v", r)
	}
	e.apply(t, call("run-1", "k-new", pinnedLaunch(`{"type":"isolated"}`, base, "feature/fresh")))

	// A worktree without a branch pushed nothing galley can read.
	r, _ = e.apply(t, call("run-1", "k-detached", launchBody("")))
	e.apply(t, call("run-1", "k-cancel-d", `{"type":"cancel-worker","worker":`+workerRef(r.Created[0].Handle)+`}`))
	if err := applyErr(e, call("run-1", "k-pin-d", pinnedLaunch(existingWorktree(r.Created[1].Handle), base, ""))); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("pinned launch on a worktree without a branch: %v, want not-applied rejected", err)
	}
}
