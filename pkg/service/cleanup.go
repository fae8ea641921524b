package service

import (
	"context"
	"errors"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// Cleanups owed to the platform (store.Resource.Cleanup). The write that
// makes one owed (a worker settled by galley) records it; the cleanup
// itself follows, and once it is done a second write clears the record.
// A cleanup that failed, or whose caller died before it, stays recorded,
// and housekeeping (RetryCleanups) does it again on every tick until it
// is done; a cleanup done is never done again.

// stopOwed stops the worker's compute and, once the stop is requested,
// clears the stop its record owes. A failed clear only costs housekeeping
// one more stop, which succeeds on a stopped task.
func (s *Service) stopOwed(ctx context.Context, handle string) error {
	if err := s.runtime.Stop(ctx, handle); err != nil {
		return err
	}
	s.clearCleanup(ctx, handle, store.CleanupStop)
	return nil
}

// oweStop records on a worker's record, settled or released, that its
// compute is to be stopped, unless it owes that already.
func (s *Service) oweStop(ctx context.Context, handle string) error {
	for range claimAttempts {
		res, v, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
		if err != nil {
			return err
		}
		if res.Cleanup == store.CleanupStop {
			return nil
		}
		res.Cleanup = store.CleanupStop
		if _, err := s.store.PutResource(ctx, res, v); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "worker %s is contended", quoteShort(handle))
}

// clearCleanup clears the cleanup the record of handle (a worker's or a
// worktree's) owes, if it still owes want.
func (s *Service) clearCleanup(ctx context.Context, handle, want string) {
	if err := s.updateCleanup(ctx, handle, want, func(r *store.Resource) {
		r.Cleanup = ""
	}); err != nil {
		s.log.Warn("cleanup done but still recorded as owed: housekeeping repeats it", "resource", handle, "cleanup", want, "err", err)
	}
}

// updateCleanup applies fn to handle's record (worker or worktree, found by
// the kind its cleanup implies) in a conditional write, as long as the
// record still owes want.
func (s *Service) updateCleanup(ctx context.Context, handle, want string, fn func(*store.Resource)) error {
	kind := kindOfCleanup(want)
	for range claimAttempts {
		res, v, err := s.store.GetResource(ctx, kind, handle)
		if err != nil {
			return err
		}
		if res.Cleanup != want {
			return nil
		}
		fn(&res)
		if _, err := s.store.PutResource(ctx, res, v); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "resource %s is contended", quoteShort(handle))
}

func kindOfCleanup(c string) string {
	if c == store.CleanupWorkspace {
		return protocol.KindWorktree
	}
	return protocol.KindWorker
}

// RetryCleanups does, for housekeeping, every cleanup a record still owes:
// it stops the compute of a worker galley settled whose stop failed (or
// whose caller died before it), and removes a released worktree's files
// that an earlier version left owed (its ECS cleanup task, when worktrees
// were on EFS: today's runtime has nothing to remove, and the record is
// cleared). A cleanup done is cleared from its record and never repeated.
// It answers how many it finished this pass; a cleanup it could not do is
// left for the next one.
func (s *Service) RetryCleanups(ctx context.Context) (int, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, r := range all {
		var done bool
		var err error
		switch r.Cleanup {
		case "":
			continue
		case store.CleanupStop:
			done, err = true, s.runtime.Stop(ctx, r.Handle)
			if err == nil {
				s.clearCleanup(ctx, r.Handle, store.CleanupStop)
			}
		case store.CleanupWorkspace:
			done, err = s.retryRemoval(ctx, r)
		default:
			s.log.Warn("a record owes a cleanup this version does not know", "resource", r.Handle, "cleanup", r.Cleanup)
			continue
		}
		if err != nil {
			errs = append(errs, err)
			s.log.Warn("cleanup failed: the next housekeeping pass retries it", "resource", r.Handle, "cleanup", r.Cleanup, "err", err)
			continue
		}
		if done {
			s.log.Info("housekeeping did an owed cleanup", "resource", r.Handle, "cleanup", r.Cleanup)
			n++
		}
	}
	return n, errors.Join(errs...)
}

// retryRemoval removes a released worktree's files at once and clears
// what its record owes.
func (s *Service) retryRemoval(ctx context.Context, r store.Resource) (bool, error) {
	if err := s.runtime.RemoveWorkspace(ctx, r.Handle, r.Path); err != nil {
		return false, err
	}
	s.clearCleanup(ctx, r.Handle, store.CleanupWorkspace)
	return true, nil
}

// removeSnapshot deletes a released worktree's snapshot, once the release
// is recorded (a release that fails before keeps it). A failure is logged
// and fails nothing: the worktree is released, its pushed commits are on
// its branch, and the store's own expiry (the bucket's lifecycle rule on
// AWS) removes what is left.
func (s *Service) removeSnapshot(ctx context.Context, worktree string) {
	if s.snapshots == nil {
		return
	}
	if err := s.snapshots.RemoveSnapshot(ctx, worktree); err != nil {
		s.log.Warn("the released worktree's snapshot could not be deleted: it stays until the store expires it",
			"worktree", worktree, "err", err)
		return
	}
	s.log.Info("the released worktree's snapshot deleted", "worktree", worktree)
}
