package snapshot

import "context"

// WorktreeName names a worktree's own snapshot among its keys: the
// harness saves and restores WorktreeKey(house, worktree), and galley
// deletes it when the worktree is released (Worktrees).
const WorktreeName = "worktree"

// WorktreeKey is the key of the snapshot of the house's worktree (its
// handle): per worktree, not per worker, so the next worker that reuses
// the worktree finds it.
func WorktreeKey(house, worktree string) string { return Key(house, worktree, WorktreeName) }

// Worktrees are a house's worktree snapshots in a store, as galley's
// service removes them when it releases a worktree.
type Worktrees struct {
	Store Store
	House string
}

// RemoveSnapshot deletes the worktree's snapshot; a worktree without one
// is no error.
func (w Worktrees) RemoveSnapshot(ctx context.Context, worktree string) error {
	return w.Store.Delete(ctx, WorktreeKey(w.House, worktree))
}
