//go:build unix

package ecsrt_test

import (
	"context"
	"testing"
)

// A worktree's removal calls ECS for nothing: the workspace is on its
// task's own storage and went with the task.
func TestRemoveWorkspaceDoesNothing(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(t)
	if err := r.RemoveWorkspace(context.Background(), "wt-x", "/workspace/wt-x"); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Errorf("%d ECS calls, want none: the workspace goes with its task", n)
	}
}
