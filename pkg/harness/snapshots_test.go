package harness_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// These tests run the harness with a real DirStore and real git
// repositories: a worker whose workspace goes with it (a task's own disk)
// keeps its worktree's snapshot, and a launch that reuses the worktree in
// an empty workspace gets it back (docs/snapshots.md).

// snapStore is a DirStore in the test's temporary folder.
func snapStore(t *testing.T) *snapshot.DirStore {
	t.Helper()
	s, err := snapshot.NewDirStore(filepath.Join(t.TempDir(), "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// snapRun is one run of the harness: what its agent printed, the harness's
// error, and the run (its fake worker API and log).
type snapRun struct {
	out string
	err error
	*inproc
}

// runSnapshotted runs the harness under mode for self (family "id") with
// script as its agent, the repository repo, the store and limits, in the
// workspace ws ("" for a new, empty one); during, when set, runs beside it
// with its fake worker API.
func runSnapshotted(t *testing.T, self workerapi.Self, mode harness.Confinement, script, repo string, store harness.SnapshotStore,
	limits snapshot.Limits, ws string, during func(context.Context, *fakeapi.Server)) snapRun {
	t.Helper()
	var (
		mu  sync.Mutex
		out string
	)
	d := idDriver{mu: &mu, out: &out, script: script}
	var exe string
	if mode == harness.ConfineUser {
		if ok, why := harness.CanSwitchUser(); !ok {
			t.Skip("the uid confinement needs root here: " + why)
		}
		exe = openExe(t)
		if ws == "" {
			ws = filepath.Join(filepath.Dir(exe), "ws")
		}
	}
	ctx := testCtx(t)
	self.Agent = protocol.AgentSelection{Agent: "id"}
	f := fakeFor(t, self)
	r := snapRun{inproc: runInProcess(t, ctx, f, "id", d, func(c *harness.Config) {
		c.Repository, c.Snapshots, c.SnapshotLimits, c.House = repo, store, limits, "test-house"
		c.Confine, c.ConfineExe = mode, exe
		if ws != "" {
			c.Workspace = ws
		}
	})}
	if during != nil {
		during(ctx, f)
	}
	r.err = r.wait(t, ctx)
	mu.Lock()
	r.out = out
	mu.Unlock()
	return r
}

// openExe is a copy of galley-worker in a folder open to other users (the
// agent's uid runs it), as an operator's must be.
func openExe(t *testing.T) string {
	t.Helper()
	open, err := os.MkdirTemp("", "galley-snapshot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(workerBin)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(open, "galley-worker")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

// exitReason is the reason of the run's one exit report, failing the test
// when there is none.
func (r snapRun) exitReason(t *testing.T) (int, string) {
	t.Helper()
	for _, c := range r.fake.Snapshot().Calls {
		if c.Exited != nil {
			return c.Exited.Code, c.Exited.Reason
		}
	}
	t.Fatalf("no exit was reported; calls %+v", r.fake.Snapshot().Calls)
	return 0, ""
}

// A worker released (while its agent waits) with uncommitted changes and untracked files (in a
// folder of their own, an executable, a link) keeps them in its
// worktree's snapshot; a launch that reuses the worktree in an empty
// workspace (a new task) finds them back, owned by its own agent's uid,
// beside the clone's .git, which sees them as the changes they were.
func TestReusedWorktreeComesBackFromItsSnapshot(t *testing.T) {
	repo, store := bareRepo(t), snapStore(t)
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	first := workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, AgentUID: uid, Worktree: "wt-1", ReportEvents: true}
	// The agent works, then waits; galley releases the worker (settles it)
	// while it waits, and the harness stops it.
	parent, err := os.MkdirTemp("", "galley-snapshot-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o711); err != nil { // the agent's uid passes through
		t.Fatal(err)
	}
	ws := filepath.Join(parent, "ws")
	release := func(ctx context.Context, f *fakeapi.Server) {
		for {
			if _, err := os.Lstat(filepath.Join(ws, "written")); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Error("the first agent never wrote its files")
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		f.Settle(protocol.OutcomeCancelled)
	}
	r := runSnapshotted(t, first, harness.ConfineUser,
		`echo started; echo changed > README.md && mkdir -p notes/deep && echo todo > notes/deep/todo.txt &&
		 printf '#!/bin/sh\n' > run.sh && chmod 750 run.sh && ln -s notes/deep/todo.txt link &&
		 stat -c '%a %n' notes/deep/todo.txt run.sh && rm -f written && : > written && exec sleep 600`,
		repo, store, snapshot.Limits{}, ws, release)
	if r.err != nil || r.fake.Snapshot().Count(workerapi.PathExited) != 0 {
		t.Fatalf("the released worker: %v, %d exit reports (want none: galley settled it)", r.err, r.fake.Snapshot().Count(workerapi.PathExited))
	}
	if err := os.RemoveAll(ws); err != nil { // the task's disk goes with the task
		t.Fatal(err)
	}
	modes := strings.Split(strings.TrimPrefix(r.out, "started\n"), "\n")
	if r.err != nil || len(modes) != 3 || modes[1] != "750 run.sh" {
		t.Fatalf("the first agent: %v, printed %q", r.err, r.out)
	}
	if !hasEvent(r.fake.Snapshot().Events, workerapi.EventWorkspace, "worktree snapshot saved") {
		t.Errorf("no event says the snapshot was saved: %+v", r.fake.Snapshot().Events)
	}

	second := workerapi.Self{Handle: "w-2", Run: "run-1", Brief: "x", Branch: testBranch, AgentUID: uid + 1,
		Worktree: "wt-1", WorktreeReused: true, ReportEvents: true}
	r = runSnapshotted(t, second, harness.ConfineUser,
		`echo started; cat README.md notes/deep/todo.txt; stat -c '%u %a %n' notes/deep/todo.txt run.sh; readlink link;
		 git status --porcelain --untracked-files=all`,
		repo, store, snapshot.Limits{}, "", nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	u := strconv.FormatUint(uint64(uid+1), 10)
	want := "started\nchanged\ntodo\n" + u + " " + modes[0] + "\n" + u + " " + modes[1] + "\nnotes/deep/todo.txt\n" +
		" M README.md\n?? link\n?? notes/deep/todo.txt\n?? run.sh\n?? written\n"
	if r.out != want {
		t.Errorf("the second agent printed\n%s\nwant\n%s", r.out, want)
	}
	if !hasEvent(r.fake.Snapshot().Events, workerapi.EventWorkspace, "worktree restored from its snapshot") {
		t.Errorf("no event says the worktree was restored: %+v", r.fake.Snapshot().Events)
	}
}

// A save that fails (here a worktree past the snapshot's limits) is
// reported as an error event, and the worker ends as it would have: the
// earlier snapshot is kept, whole.
func TestFailedSnapshotSaveReportsAndKeepsTheEarlier(t *testing.T) {
	repo, store := bareRepo(t), snapStore(t)
	limits := snapshot.Limits{MaxBytes: 64 << 10}
	ws := filepath.Join(t.TempDir(), "ws")
	first := workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Worktree: "wt-1", ReportEvents: true}
	r := runSnapshotted(t, first, harness.ConfineNone, `echo keep me > kept.txt`, repo, store, limits, ws, nil)
	if r.err != nil {
		t.Fatal(r.err)
	}
	second := workerapi.Self{Handle: "w-2", Run: "run-1", Brief: "x", Branch: testBranch, Worktree: "wt-1", WorktreeReused: true, ReportEvents: true}
	r = runSnapshotted(t, second, harness.ConfineNone,
		`echo lost > kept.txt && head -c 100000 /dev/zero > big.bin`, repo, store, limits, ws, nil)
	if r.err != nil {
		t.Fatalf("a failed save failed the run: %v", r.err)
	}
	if code, _ := r.exitReason(t); code != 0 {
		t.Errorf("the agent's exit was reported with code %d, want 0", code)
	}
	if !hasEvent(r.fake.Snapshot().Events, workerapi.EventError, "the worktree's snapshot could not be saved; the earlier one is kept") {
		t.Errorf("no error event says the save failed: %+v", r.fake.Snapshot().Events)
	}
	if !strings.Contains(r.log.String(), "the worktree's snapshot could not be saved") {
		t.Error("the harness log does not say the save failed")
	}
	restored := filepath.Join(t.TempDir(), "ws")
	if _, err := snapshot.RestoreFrom(context.Background(), store, snapshot.Key("test-house", "wt-1", "worktree"), restored, limits); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(restored, "kept.txt")); err != nil || string(b) != "keep me\n" {
		t.Errorf("the kept snapshot's kept.txt: %q %v, want the first worker's", b, err)
	}
	if _, err := os.Lstat(filepath.Join(restored, "big.bin")); !os.IsNotExist(err) {
		t.Errorf("the kept snapshot holds the failed save's file: %v", err)
	}
}

// A launch that reuses a worktree whose workspace is not on disk and that
// has no snapshot is refused with a clear reason, before its agent runs;
// one whose workspace is on disk runs on its own files, snapshot or not.
func TestMissingSnapshotOfAReusedWorktree(t *testing.T) {
	repo := bareRepo(t)
	reused := workerapi.Self{Handle: "w-2", Run: "run-1", Brief: "x", Branch: testBranch, Worktree: "wt-1", WorktreeReused: true}
	r := runSnapshotted(t, reused, harness.ConfineNone, `echo started; echo ran`, repo, snapStore(t), snapshot.Limits{}, "", nil)
	if r.err == nil {
		t.Error("the harness answered no error")
	}
	code, reason := r.exitReason(t)
	if code != harness.CodeNotStarted || !strings.Contains(reason, "worktree wt-1 was launched as existing, but its workspace is not on this disk and no snapshot of it was kept") {
		t.Errorf("exit %d %q, want %d saying no snapshot was kept", code, reason, harness.CodeNotStarted)
	}
	if r.out != "" {
		t.Errorf("the agent ran: %q", r.out)
	}

	ws := filepath.Join(t.TempDir(), "ws")
	first := workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Worktree: "wt-1"}
	if r := runSnapshotted(t, first, harness.ConfineNone, `echo mine > mine.txt`, repo, nil, snapshot.Limits{}, ws, nil); r.err != nil {
		t.Fatal(r.err)
	}
	r = runSnapshotted(t, reused, harness.ConfineNone, `echo started; cat mine.txt`, repo, snapStore(t), snapshot.Limits{}, ws, nil)
	if r.err != nil || r.out != "started\nmine\n" {
		t.Errorf("on a worktree on disk the agent printed %q (%v), want its own file", r.out, r.err)
	}
}

func hasEvent(evs []workerapi.HarnessEvent, event, text string) bool {
	for _, e := range evs {
		if e.Event == event && strings.HasPrefix(e.Text, text) {
			return true
		}
	}
	return false
}

// The environment names the snapshot store: a folder, or an S3 bucket
// (with the process's AWS configuration), never both.
func TestSnapshotStoreFromEnv(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	dir := filepath.Join(t.TempDir(), "snapshots")
	base := map[string]string{
		contract.EnvWorkerEndpoint: "http://127.0.0.1:8080",
		contract.EnvWorkerToken:    testToken,
		contract.EnvWorkspace:      "/workspace/wt-1",
		contract.EnvRepository:     "/tmp/repo.git",
	}
	tests := []struct {
		name   string
		set    map[string]string
		ok     bool
		store  string // the store's type, "" for none
		limits snapshot.Limits
	}{
		{"none", nil, true, "", snapshot.Limits{}},
		{"a folder", map[string]string{contract.EnvSnapshotDir: dir}, true, "*snapshot.DirStore", snapshot.Limits{}},
		{"a bucket", map[string]string{contract.EnvSnapshotBucket: "galley-snapshots"}, true, "*snapshot.S3Store", snapshot.Limits{}},
		{"limits", map[string]string{contract.EnvSnapshotDir: dir, contract.EnvSnapshotMaxBytes: "1048576", contract.EnvSnapshotMaxEntries: "1000"},
			true, "*snapshot.DirStore", snapshot.Limits{MaxBytes: 1 << 20, MaxEntries: 1000}},
		{"both", map[string]string{contract.EnvSnapshotDir: dir, contract.EnvSnapshotBucket: "galley-snapshots"}, false, "", snapshot.Limits{}},
		{"a relative folder", map[string]string{contract.EnvSnapshotDir: "snapshots"}, false, "", snapshot.Limits{}},
		{"no bytes", map[string]string{contract.EnvSnapshotMaxBytes: "0"}, false, "", snapshot.Limits{}},
		{"entries not a number", map[string]string{contract.EnvSnapshotMaxEntries: "many"}, false, "", snapshot.Limits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := configFromEnvWith(base, tt.set)
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil {
				if !galleyerr.Is(galleyerr.Invalid, err) {
					t.Errorf("kind = %v", galleyerr.KindOf(err))
				}
				return
			}
			got := ""
			if cfg.Snapshots != nil {
				got = fmt.Sprintf("%T", cfg.Snapshots)
			}
			if got != tt.store || cfg.SnapshotLimits != tt.limits {
				t.Errorf("store %q limits %+v, want %q %+v", got, cfg.SnapshotLimits, tt.store, tt.limits)
			}
		})
	}
}
