package awslocal_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
)

// TestWorktreeSnapshotAWSLocal: a worktree lives on its task's own
// storage, and what the agent left uncommitted outlives the task by its
// snapshot. A scripted worker commits a file, then changes it and writes
// an untracked one, both left uncommitted, and waits; it is released (its
// task stopped: the harness saves the worktree's snapshot to the S3
// stand-in through the S3 gate, with the task role). A second launch
// names the worktree as existing: its new task restores the snapshot, and
// its agent sees both files as the first left them. The worktree's
// release then deletes the snapshot (the effects function, through the
// gate).
func TestWorktreeSnapshotAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := sharedStack(t)
	k := newKitchn(t, s, token, "run-snapshot")
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	bucket := s.FunctionEnv(lambdaapp.Effects)[contract.EnvSnapshotBucket]
	if bucket == "" {
		t.Fatalf("the effects function has no %s: the template keeps no snapshots", contract.EnvSnapshotBucket)
	}

	first := "#!galley-script\ncommit tracked.txt committed\nwrite tracked.txt changed, not committed\n" +
		"write notes/untracked.txt never committed\nstatus written\nwait-message\n"
	worker, wt := launchSnapshotScript(t, k, "k-snap-1", `{"type":"isolated"},"branch":"snap/run-snapshot"`, first)
	if wt == "" {
		t.Fatal("the first launch created no worktree")
	}
	k.next("the first worker's status", kind(protocol.MsgStatus, "written"))
	if task := workerTaskInfo(t, s, worker); task.Env["GALLEY_WORKSPACE"] != "/workspace/"+wt {
		t.Fatalf("the worktree is at %q in its task, want /workspace/%s (the task's own storage)", task.Env["GALLEY_WORKSPACE"], wt)
	}
	if st, _ := k.effect("k-snap-release-1", `{"type":"release-resource","resource":`+k.worker(worker)+`}`); st != "applied" {
		t.Fatalf("release of the first worker: %s", st)
	}
	// The release stops the task; the harness saves before it exits. A
	// relaunch that raced the save would find the older snapshot (a known
	// limit: docs/snapshots.md), so the test waits for the task's end.
	waitStopped(t, s, worker)
	key := snapshot.WorktreeKey(house, wt)
	if _, ok, err := s.S3().Object(bucket, key); err != nil || !ok {
		t.Fatalf("no snapshot %s in the bucket after the first worker's end (%v)", key, err)
	}

	second := "#!galley-script\nshow tracked.txt\nshow notes/untracked.txt\ndone succeeded\n"
	existing := `{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"` + wt + `"}}`
	worker2, _ := launchSnapshotScript(t, k, "k-snap-2", existing, second)
	// In the script's order: next passes over the rows before its match.
	for _, f := range []struct{ path, want string }{{"tracked.txt", "changed, not committed"}, {"notes/untracked.txt", "never committed"}} {
		path, want := f.path, f.want
		got := k.next("show "+path, kind(protocol.MsgStatus, "show "+path+": "))
		if got.Body != "show "+path+": "+want {
			t.Errorf("the relaunched agent sees %q, want %q", got.Body, "show "+path+": "+want)
		}
	}
	k.next("the second worker's worker-done", kind(protocol.MsgWorkerDone, ""))
	waitStopped(t, s, worker2)

	if st, _ := k.effect("k-snap-release-wt", `{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":"`+wt+`"}}`); st != "applied" {
		t.Fatalf("release of the worktree: %s", st)
	}
	if _, ok, err := s.S3().Object(bucket, key); err != nil || ok {
		t.Errorf("the released worktree's snapshot is still in the bucket (%v)", err)
	}
	// The gate decided each call, with the task role (save, restore) and
	// the effects role (delete).
	var ops []string
	for _, d := range s.Gate(iamgate.S3).Decisions() {
		if d.Allowed && d.Resource == "arn:aws:s3:::"+bucket+"/"+key && !slices.Contains(ops, d.Action) {
			ops = append(ops, d.Action)
		}
	}
	for _, want := range []string{"s3:PutObject", "s3:GetObject", "s3:DeleteObject"} {
		if !slices.Contains(ops, want) {
			t.Errorf("the S3 gate allowed %v on the snapshot, want %s among them", ops, want)
		}
	}
}

// launchSnapshotScript launches a scripted worker (the stack's default
// agent) in workspace (with the launch's other members after it, such as
// its branch) and answers its handle and its worktree's.
func launchSnapshotScript(t *testing.T, k *kitchn, key, workspace, brief string) (worker, worktree string) {
	t.Helper()
	st, rc := k.effect(key, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":%s,"brief":%q}`, workspace, brief))
	if st != "applied" {
		t.Fatalf("launch %s: %s", key, st)
	}
	worker, worktree = rc.CreatedHandle(protocol.KindWorker), rc.CreatedHandle(protocol.KindWorktree)
	if worker == "" {
		t.Fatalf("launch %s created no worker: %+v", key, rc)
	}
	return worker, worktree
}

// workerTaskInfo finds the worker's task (the stack is shared).
func workerTaskInfo(t *testing.T, s *awslocal.Stack, worker string) ecsstandin.TaskInfo {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, task := range s.ECS().Tasks() {
			if task.Env["GALLEY_WORKER_HANDLE"] == worker {
				return task
			}
		}
	}
	t.Fatalf("no task for worker %s", worker)
	return ecsstandin.TaskInfo{}
}

// waitStopped waits for the worker's task to stop (its harness has
// exited, its snapshot saved).
func waitStopped(t *testing.T, s *awslocal.Stack, worker string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if task := workerTaskInfo(t, s, worker); task.LastStatus == "STOPPED" {
			return
		}
	}
	t.Fatalf("the task of worker %s did not stop", worker)
}
