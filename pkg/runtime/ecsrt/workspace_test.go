//go:build unix

package ecsrt_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
)

// newEFSEnv is a stand-in whose tasks share root (the EFS mount, at the
// same path on the host) and run harness, with a runtime configured to keep
// workspaces there.
func newEFSEnv(t *testing.T, harness string) (*env, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "workspaces")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	e := newStandinEnv(t, harness, []ecsstandin.KeyValue{{Name: "GALLEY_WORKSPACE_ROOT", Value: root}},
		ecsstandin.WithVolume(root))
	e.cfg.WorkspaceRoot = root
	return e, root
}

// clone makes a directory that workspace.Remove takes for a clone.
func clone(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "work.txt"), []byte("work"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// cleanupTasks returns the stand-in's tasks that are not workers'.
func (e *env) cleanupTasks() []ecsstandin.TaskInfo {
	var out []ecsstandin.TaskInfo
	for _, ti := range e.srv.Tasks() {
		if !ecsrt.IsGalleyStartedBy(ti.StartedBy) {
			out = append(out, ti)
		}
	}
	return out
}

// awaitGone waits until dir no longer exists.
func awaitGone(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still there after %v", dir, patience)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRemoveWorkspaceRunsCleanupTask(t *testing.T) {
	e, root := newEFSEnv(t, galleyWorker)
	r := e.runtime(t)
	ws := filepath.Join(root, "wt-remove")
	clone(t, ws)
	keep := filepath.Join(root, "wt-keep")
	clone(t, keep)

	if err := r.RemoveWorkspace(context.Background(), "wt-remove", ws); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	reqs := e.srv.Requests(ecsstandin.OpRunTask)
	if len(reqs) != 1 {
		t.Fatalf("%d RunTask calls, want 1", len(reqs))
	}
	var in struct {
		ClientToken string
		StartedBy   string
		Overrides   struct {
			ContainerOverrides []struct {
				Name        string
				Command     []string
				Environment []struct{ Name, Value string }
			}
		}
	}
	if err := json.Unmarshal(reqs[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if in.ClientToken != ecsrt.ClientToken("rm:wt-remove") {
		t.Errorf("clientToken = %q, want one derived from rm:wt-remove", in.ClientToken)
	}
	if ecsrt.IsGalleyStartedBy(in.StartedBy) {
		t.Errorf("startedBy %q looks like a worker's: the reconciler would take it for one", in.StartedBy)
	}
	if co := in.Overrides.ContainerOverrides; len(co) != 1 || co[0].Name != "worker" ||
		!slices.Equal(co[0].Command, []string{contract.CleanupCommand, ws}) {
		t.Errorf("container overrides = %+v, want the worker container with command [%s %s]", co, contract.CleanupCommand, ws)
	} else if len(co[0].Environment) != 0 {
		t.Errorf("the cleanup task's overrides carry environment %+v, want none", co[0].Environment)
	}
	for _, secret := range []string{"GALLEY_WORKER_BOOTSTRAP", "GALLEY_WORKER_TOKEN", "environment"} {
		if strings.Contains(string(reqs[0].Body), secret) {
			t.Errorf("the cleanup RunTask request mentions %s", secret)
		}
	}

	awaitGone(t, ws)
	if _, err := os.Stat(filepath.Join(keep, "work.txt")); err != nil {
		t.Errorf("another worktree was touched: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the workspace root went: %v", err)
	}
	// The cleanup task exits 0: the command really ran and succeeded.
	deadline := time.Now().Add(patience)
	for {
		ts := e.cleanupTasks()
		if len(ts) == 1 && ts[0].LastStatus == "STOPPED" {
			if ts[0].ExitCode == nil || *ts[0].ExitCode != 0 {
				t.Errorf("the cleanup task exited %v, want 0", ts[0].ExitCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cleanup task never stopped: %+v", ts)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRemoveWorkspaceRetriedMakesOneTask(t *testing.T) {
	e, root := newEFSEnv(t, galleyWorker)
	ws := filepath.Join(root, "wt-retried")
	clone(t, ws)
	// Two runtimes are two Lambda invocations: only the clientToken joins
	// them.
	for _, r := range []*ecsrt.Runtime{e.runtime(t), e.runtime(t), e.runtime(t)} {
		if err := r.RemoveWorkspace(context.Background(), "wt-retried", ws); err != nil {
			t.Fatalf("RemoveWorkspace: %v", err)
		}
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != 3 {
		t.Errorf("%d RunTask calls, want 3 (each retry asks ECS)", n)
	}
	if n := len(e.cleanupTasks()); n != 1 {
		t.Errorf("%d cleanup tasks for one worktree, want 1", n)
	}
	awaitGone(t, ws)
}

func TestRemoveWorkspaceRefusesOutsideRoot(t *testing.T) {
	e, root := newEFSEnv(t, galleyWorker)
	r := e.runtime(t)
	outside := t.TempDir()
	clone(t, outside)
	for _, tc := range []struct{ name, path string }{
		{"outside", outside},
		{"the root itself", root},
		{"the root with a slash", root + "/"},
		{"dot-dot", root + "/../" + filepath.Base(outside)},
		{"dot-dot inside", root + "/wt/../../x"},
		{"relative", "wt-relative"},
		{"empty", ""},
		{"a sibling sharing the prefix", root + "-x/wt"},
	} {
		err := r.RemoveWorkspace(context.Background(), "wt-x", tc.path)
		if !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%s: RemoveWorkspace(%q) = %v, want an invalid error", tc.name, tc.path, err)
		}
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != 0 {
		t.Errorf("%d RunTask calls for refused paths, want 0", n)
	}
	if _, err := os.Stat(filepath.Join(outside, "work.txt")); err != nil {
		t.Errorf("the outside folder was touched: %v", err)
	}
}

func TestRemoveWorkspaceWithoutRootDoesNothing(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(t)
	if err := r.RemoveWorkspace(context.Background(), "wt-x", "/workspace/wt-x"); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Errorf("%d ECS calls, want none: the workspace goes with its task", n)
	}
}

func TestWorkspaceOutlivesTask(t *testing.T) {
	e, root := newEFSEnv(t, fakeHarness)
	r := e.runtime(t)
	ws := filepath.Join(root, "wt-shared")
	// Two workers, one after the other, on the same worktree (the second
	// launched with an existing workspace).
	for _, h := range []string{"w-first", "w-second"} {
		s := spec(h, "exit")
		s.Workspace, s.WorkspacePath = "wt-shared", ws
		if err := r.Start(context.Background(), s); err != nil {
			t.Fatalf("Start(%s): %v", h, err)
		}
		awaitLiveness(t, r, h, service.LivenessExited)
		if ts := e.tasksOf(h); len(ts) != 1 || ts[0].Workspace != ws {
			t.Fatalf("tasks of %s = %+v, want one with workspace %s", h, ts, ws)
		}
	}
	b, err := os.ReadFile(filepath.Join(ws, "starts"))
	if err != nil {
		t.Fatalf("the workspace did not outlive the tasks: %v", err)
	}
	if n := strings.Count(string(b), "\n"); n != 2 {
		t.Errorf("the workspace holds %d starts, want 2 (one per task)", n)
	}
}

func TestStartRefusesWorkspaceOutsideRoot(t *testing.T) {
	e, _ := newEFSEnv(t, fakeHarness)
	r := e.runtime(t)
	for _, p := range []string{"", "/workspace/wt-x", "relative"} {
		s := spec("w-outside", "run")
		s.WorkspacePath = p
		if err := r.Start(context.Background(), s); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Start with workspace %q = %v, want an invalid error", p, err)
		}
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != 0 {
		t.Errorf("%d RunTask calls, want 0", n)
	}
}
