package service

import (
	"context"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// The checks a launch makes before it acts: the worktree it reuses, the
// head it was pinned to, the deployment's capacity.

// checkPinned refuses a launch whose pinned head is not its worktree's
// head. galley reads a worktree's head where its workers keep it: the head
// of its branch in the house repository (galley never reads worktree
// files, which live in the runtime's storage). A reused worktree without a
// branch pushed nothing galley can read, so its head cannot be checked,
// and the launch is refused rather than run on an unchecked head. A new
// worktree starts at the planned base (the default branch's head).
func (s *Service) checkPinned(ctx context.Context, p *protocol.Pinned, plan launchPlan) error {
	if p == nil {
		return nil
	}
	var head string
	switch {
	case plan.Existing && plan.Branch == "":
		return galleyerr.Errorf(galleyerr.Invalid, "worktree %s has no branch, so its head cannot be checked against pinned.head",
			quoteShort(plan.Worktree))
	case plan.Existing:
		h, exists, err := s.git.BranchHead(ctx, plan.Branch)
		if err != nil {
			return err
		}
		if !exists {
			return galleyerr.Errorf(galleyerr.Invalid, "branch %s of worktree %s no longer exists", quoteShort(plan.Branch), quoteShort(plan.Worktree))
		}
		head = h
	case plan.Base != "":
		head = plan.Base
	default:
		h, err := s.git.DefaultHead(ctx)
		if err != nil {
			return err
		}
		head = h
	}
	if head != p.Head {
		return galleyerr.Errorf(galleyerr.Invalid, "worktree %s is at %s, not at pinned.head %s",
			quoteShort(plan.Worktree), quoteShort(head), quoteShort(p.Head))
	}
	return nil
}

// usableWorktree returns a worktree galley made that is not released and
// that no unsettled worker uses.
func (s *Service) usableWorktree(ctx context.Context, handle string) (store.Resource, error) {
	wt, _, err := s.store.GetResource(ctx, protocol.KindWorktree, handle)
	if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && wt.Released) {
		return wt, galleyerr.Errorf(galleyerr.Invalid, "worktree %s does not exist", quoteShort(handle))
	}
	if err != nil {
		return wt, err
	}
	if busy, err := s.worktreeBusy(ctx, handle); err != nil {
		return wt, err
	} else if busy {
		return wt, galleyerr.Errorf(galleyerr.Invalid, "worktree %s is in use by a running worker", quoteShort(handle))
	}
	return wt, nil
}

// worktreeBranch is the branch of the worker that made the worktree.
func (s *Service) worktreeBranch(ctx context.Context, handle string) (string, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range all {
		if r.Kind == protocol.KindWorker && r.Worker != nil && r.Worker.Worktree == handle {
			return r.Worker.Branch, nil
		}
	}
	return "", nil
}

func (s *Service) worktreeBusy(ctx context.Context, handle string) (bool, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return false, err
	}
	for _, r := range all {
		if r.Kind == protocol.KindWorker && !r.Released && r.Worker != nil &&
			r.Worker.Worktree == handle && r.Worker.State != protocol.StateSettled {
			return true, nil
		}
	}
	return false, nil
}

// checkCapacity refuses a launch beyond MaxWorkers unsettled workers.
func (s *Service) checkCapacity(ctx context.Context) error {
	if s.cfg.MaxWorkers <= 0 {
		return nil
	}
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range all {
		if r.Kind == protocol.KindWorker && !r.Released && r.Worker != nil && r.Worker.State != protocol.StateSettled {
			n++
		}
	}
	if n >= s.cfg.MaxWorkers {
		return &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: 60, Msg: "the deployment runs its maximum number of workers"}
	}
	return nil
}
