package ecsrt

import "context"

// RemoveWorkspace does nothing: a worker's workspace lives on its task's
// own (ephemeral) storage and goes with the task; what outlives it is the
// worktree's snapshot, which the service deletes at the release
// (docs/snapshots.md).
func (r *Runtime) RemoveWorkspace(context.Context, string, string) error { return nil }
