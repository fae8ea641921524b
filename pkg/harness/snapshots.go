package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
)

// SnapshotStore keeps the worktree's snapshots by key (docs/snapshots.md):
// snapshot.DirStore locally, snapshot.S3Store on AWS. Its methods are
// snapshot.Store's, which snapshot.SaveTo and RestoreFrom take; the
// harness deletes nothing (galley does, when it releases the worktree).
type SnapshotStore interface {
	Put(ctx context.Context, key string, r io.Reader) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Delete(ctx context.Context, key string) error
}

// How long a save may take: after the agent ended by itself, and once the
// harness was told to stop (SIGTERM; Fargate kills the task 120 s later,
// and the exit report still has to go out).
const (
	snapshotPatience     = 10 * time.Minute
	snapshotStopPatience = 80 * time.Second
)

// snapshotKey is the key of the worktree's snapshot, "" when the harness
// keeps none: no store, or a service that names no worktree.
func (h *harness) snapshotKey() string {
	if h.cfg.Snapshots == nil || h.self.Worktree == "" {
		return ""
	}
	return snapshot.WorktreeKey(h.cfg.House, h.self.Worktree)
}

// workspaceOnDisk reports whether dir holds a clone before Prepare: a
// worktree that outlived its last worker (locally, or on a shared file
// system) is its own latest state, newer than any snapshot of it (whose
// save may have failed).
func workspaceOnDisk(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, ".git"))
	return err == nil && fi.IsDir()
}

// restoreWorktree puts the worktree's snapshot back into the prepared
// workspace when the launch named the worktree as existing and its
// workspace was not on disk (a new task's own storage): as the agent's
// uid under ConfineUser, after galley's last git command in it and before
// the agent starts. A reused worktree with no snapshot and no workspace is
// an error that says so: the agent never starts on a worktree that
// silently lost its uncommitted files.
func (h *harness) restoreWorktree(ctx context.Context, onDisk bool, j *jail) error {
	key := h.snapshotKey()
	switch {
	case key == "" || !h.self.WorktreeReused && h.resumed == nil:
		// A resumed worker's worktree is the one its parking saved.
		return nil
	case onDisk:
		h.log.Info("the reused worktree is on disk: its snapshot is not restored", "worktree", h.self.Worktree)
		return nil
	}
	var opts []snapshot.RestoreOption
	if j.mode == ConfineUser {
		opts = append(opts, snapshot.AsOwner(j.uid, j.gid))
	}
	start := time.Now()
	st, err := snapshot.RestoreFrom(ctx, h.cfg.Snapshots, key, h.cfg.Workspace, h.cfg.SnapshotLimits, opts...)
	if galleyerr.Is(galleyerr.NotFound, err) && h.resumed != nil {
		return galleyerr.E(galleyerr.NotFound, fmt.Sprintf(
			"worktree %s was saved when the worker parked, and its snapshot is gone: its uncommitted files are lost "+
				"(its pushed commits are on branch %s)", h.self.Worktree, h.self.Branch))
	}
	if galleyerr.Is(galleyerr.NotFound, err) {
		return galleyerr.E(galleyerr.NotFound, fmt.Sprintf(
			"worktree %s was launched as existing, but its workspace is not on this disk and no snapshot of it was kept: "+
				"its uncommitted files are lost (its pushed commits are on branch %s)", h.self.Worktree, h.self.Branch))
	}
	if err != nil {
		return fmt.Errorf("restoring worktree %s from its snapshot: %w", h.self.Worktree, err)
	}
	took := time.Since(start)
	h.log.Info("worktree restored from its snapshot", "worktree", h.self.Worktree, "files", st.Files, "bytes", st.Bytes, "took", took)
	h.rep.report(workerapi.EventWorkspace, "worktree restored from its snapshot", "worktree", h.self.Worktree,
		"files", strconv.Itoa(st.Files), "bytes", strconv.FormatInt(st.Bytes, 10), "took", took.Round(time.Millisecond).String())
	return nil
}

// endAgent ends whatever of the agent still runs (endJail) and then
// saves the worktree's snapshot: at every end of a worker whose agent ran
// (its own exit, a release or cancel, the harness stopped), before the
// harness reports the agent's exit, so that a launch reusing the worktree
// finds it. It answers endJail's error.
func (h *harness) endAgent(ctx context.Context, j *jail) error {
	err := h.endJail(ctx, j)
	h.saveWorktree(ctx)
	return err
}

// saveWorktree saves the worktree's snapshot, replacing the earlier one
// only once the whole archive is stored. A failure is logged and reported
// as an error event, and costs nothing earlier: the commits the agent
// pushed are on its branch, and the earlier snapshot stays. The save goes
// on when ctx ends (the harness told to stop), for at most
// snapshotStopPatience more.
func (h *harness) saveWorktree(ctx context.Context) {
	key := h.snapshotKey()
	if key == "" || !h.saved.CompareAndSwap(false, true) {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotPatience)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(snapshotStopPatience)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-sctx.Done():
		}
	})
	defer stop()
	if err := h.snapshotWorktree(sctx, key); err != nil {
		msg := redactSecrets(err.Error(), h.secrets()...)
		h.log.Error("the worktree's snapshot could not be saved; the earlier one is kept", "worktree", h.self.Worktree, "err", msg)
		h.rep.report(workerapi.EventError, "the worktree's snapshot could not be saved; the earlier one is kept: "+msg,
			"worktree", h.self.Worktree)
	}
}

// snapshotWorktree saves the worktree's snapshot under key, and says so.
func (h *harness) snapshotWorktree(ctx context.Context, key string) error {
	start := time.Now()
	st, err := snapshot.SaveTo(ctx, h.cfg.Snapshots, key, h.cfg.Workspace, h.cfg.SnapshotLimits)
	took := time.Since(start)
	if err != nil {
		return err
	}
	h.log.Info("worktree snapshot saved", "worktree", h.self.Worktree, "files", st.Files, "bytes", st.Bytes, "skipped", st.Skipped, "took", took)
	h.rep.report(workerapi.EventWorkspace, "worktree snapshot saved", "worktree", h.self.Worktree,
		"files", strconv.Itoa(st.Files), "bytes", strconv.FormatInt(st.Bytes, 10), "took", took.Round(time.Millisecond).String())
	return nil
}

// saveWorktreeForPark saves the worktree's snapshot as the agent parks
// (docs/parking.md), where the workspace goes with the compute: the
// resumed harness restores it. Unlike the end's save, it must succeed:
// a failure keeps the agent running. saved says whether it saved one.
func (h *harness) saveWorktreeForPark(ctx context.Context) (saved bool, err error) {
	key := h.snapshotKey()
	if key == "" {
		return false, nil
	}
	sctx, cancel := context.WithTimeout(ctx, snapshotPatience)
	defer cancel()
	if err := h.snapshotWorktree(sctx, key); err != nil {
		return false, err
	}
	return true, nil
}
