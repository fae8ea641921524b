package service

import (
	"context"
	"encoding/json"
	"errors"
	"path"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// launch makes a worker: a plan saved in the claim, then a branch, the
// records, the compute, the receipt. Every attempt of a key converges on
// the same plan, so a retry after a lost lease makes nothing twice.

// launchPlan is what a launch decides before acting, saved in the claim so
// a retry after a lost lease converges on the same resources.
type launchPlan struct {
	Worker   string `json:"worker"`
	Worktree string `json:"worktree"`
	// Existing is set when the worker reuses a worktree the request names.
	Existing bool `json:"existing,omitempty"`
	// Base is the commit the requested branch starts at.
	Base string `json:"base,omitempty"`
	// Branch is the branch an existing worktree is on, which the worker
	// inherits.
	Branch string `json:"branch,omitempty"`
}

func (s *Service) launch(ctx context.Context, c *claim, call protocol.EffectCall, eff protocol.WorkerEffect) (json.RawMessage, error) {
	req := call.Request
	branch := ""
	if eff.Branch != nil {
		branch = *eff.Branch
	}
	var plan launchPlan
	if c.resumed && len(c.rec.Plan) > 0 {
		if err := json.Unmarshal(c.rec.Plan, &plan); err != nil {
			return nil, galleyerr.E(galleyerr.Other, "unreadable launch plan", err)
		}
	}
	fresh := plan.Worker == ""
	if fresh {
		plan.Worker = s.derive("w-", req.Key)
		if eff.Workspace.Type == "existing" {
			wt, err := s.usableWorktree(ctx, eff.Workspace.Resource.Handle)
			if err != nil {
				return nil, err
			}
			plan.Worktree, plan.Existing = wt.Handle, true
			// A worktree is a clone on one branch: a worker reusing it works
			// on that branch, and cannot be handed another.
			wtBranch, err := s.worktreeBranch(ctx, wt.Handle)
			if err != nil {
				return nil, err
			}
			if branch != "" && branch != wtBranch {
				return nil, galleyerr.Errorf(galleyerr.Invalid, "worktree %s is on branch %s; an existing workspace keeps its branch",
					quoteShort(wt.Handle), quoteShort(wtBranch))
			}
			plan.Branch = wtBranch
		} else {
			plan.Worktree = s.derive("wt-", req.Key)
		}
		if branch != "" && !plan.Existing {
			if _, exists, err := s.git.BranchHead(ctx, branch); err != nil {
				return nil, err
			} else if exists {
				return nil, galleyerr.Errorf(galleyerr.Invalid, "branch %s already exists", quoteShort(branch))
			}
			base, err := s.git.DefaultHead(ctx)
			if err != nil {
				return nil, err
			}
			plan.Base = base
		}
		if err := s.checkPinned(ctx, eff.Pinned, plan); err != nil {
			return nil, err
		}
		if err := s.checkCapacity(ctx); err != nil {
			return nil, err
		}
		if err := s.savePlan(ctx, c, plan); err != nil {
			return nil, err
		}
	}

	created := branch != "" && !plan.Existing
	if plan.Existing {
		branch = plan.Branch
	}
	receipt := func() (json.RawMessage, error) { return s.launchReceipt(req.Key, plan, branch, created) }
	if !fresh {
		// A predecessor acted. If what it made has been settled or released
		// since (a cancel, a cleanup by another key), the launch happened
		// and its worker is gone: nothing is made again, nothing started.
		if gone, err := s.launchGone(ctx, req.Key, plan, branch, created); err != nil {
			return nil, err
		} else if gone {
			return receipt()
		}
	}
	if created {
		err := s.git.CreateBranch(ctx, branch, plan.Base)
		if err == nil {
			c.acted = true
		} else {
			if !galleyerr.Is(galleyerr.Conflict, err) {
				return nil, err
			}
			if ours, err := s.branchOurs(ctx, req.Key, branch, plan, fresh); err != nil {
				return nil, err
			} else if !ours {
				return nil, galleyerr.Errorf(galleyerr.Invalid, "branch %s already exists", quoteShort(branch))
			}
		}
	}
	c.acted = true

	now := s.clock.Now()
	agent := protocol.AgentSelection{Agent: s.cfg.DefaultAgent}
	if eff.Agent != nil {
		agent = *eff.Agent
	}
	// Only a fresh plan may replace a released record of its own key: one
	// its own undo released (the launch answered not-applied). A record a
	// predecessor made and someone released since stays released.
	worktreePath := path.Join(s.cfg.WorkspaceRoot, plan.Worktree)
	if plan.Existing {
		wt, _, err := s.store.GetResource(ctx, protocol.KindWorktree, plan.Worktree)
		if err != nil {
			return nil, err
		}
		worktreePath = wt.Path
	} else if err := s.createResource(ctx, store.Resource{Kind: protocol.KindWorktree, Handle: plan.Worktree,
		Owner: req.Key, Created: now, Path: worktreePath}, fresh); err != nil {
		return s.goneOr(err, receipt)
	}
	if created {
		if err := s.createResource(ctx, store.Resource{Kind: protocol.KindBranch, Handle: branch, Owner: req.Key, Created: now}, fresh); err != nil {
			return s.goneOr(err, receipt)
		}
	}
	uid, err := s.launchAgentUID(ctx, plan.Worker, req.Key)
	if err != nil {
		return nil, err
	}
	worker := store.Resource{Kind: protocol.KindWorker, Handle: plan.Worker, Owner: req.Key, Created: now,
		Worker: &store.Worker{
			Run: call.Run, Task: req.Task, Role: eff.Role, Branch: branch, Worktree: plan.Worktree,
			Brief: *eff.Brief, Agent: &agent, State: protocol.StateStarting, Updated: now,
			CredentialNonce: s.launchNonce(req.Key), AgentUID: uid,
		}}
	if err := s.createResource(ctx, worker, fresh); err != nil {
		return s.goneOr(err, receipt)
	}
	// The credential is made with the nonce the record holds: an earlier
	// attempt's record is the one kept.
	made, _, err := s.store.GetResource(ctx, protocol.KindWorker, plan.Worker)
	if err != nil {
		return nil, err
	}
	if made.Worker == nil {
		return nil, galleyerr.Errorf(galleyerr.Other, "worker %s has no worker record", quoteShort(plan.Worker))
	}
	switch {
	case workerGone(made):
		// Cancelled or released before it was started (or while): a
		// settled worker never runs again.
		return receipt()
	case made.Worker.State != protocol.StateStarting:
		// Its harness has reported: an earlier attempt started it.
		return receipt()
	case !fresh && s.startExpired(made.Created, made.Worker.CredentialClaim):
		// A retry long after the first attempt (kitchn's, after a lost
		// answer): a task started now could never get its credential, and
		// past ECS's clientToken window would be a second task.
		if err := s.failStart(ctx, plan.Worker, "its launch was retried after its start window had passed"); err != nil {
			return nil, err
		}
		return receipt()
	}
	spec := WorkerSpec{
		Handle: plan.Worker, Token: s.workerToken(plan.Worker, made.Worker.CredentialNonce), IdempotencyToken: s.derive("t-", req.Key),
		Workspace: plan.Worktree, WorkspacePath: worktreePath, Branch: branch, Agent: agent.Agent,
		Run: call.Run, Task: req.Task, Key: req.Key,
	}
	if err := s.runtime.Start(ctx, spec); err != nil {
		if galleyerr.Is(galleyerr.RateLimited, err) && fresh {
			// No compute could be had (ECS capacity, a quota, throttling)
			// and no earlier attempt may have started any: undo what this
			// launch made, so that its not-applied answer is true.
			return nil, s.undoLaunch(ctx, c, plan, branch, created, err)
		}
		if definiteStart(err) {
			// Refused for good, or rate-limited after an earlier attempt
			// that may have acted: the launch happened and its worker
			// failed, rather than a worker left starting for ever.
			if ferr := s.failStart(ctx, plan.Worker, err.Error()); ferr != nil {
				return nil, ferr
			}
			return receipt()
		}
		return nil, err
	}
	s.event(plan.Worker, eventlog.KindCompute, "compute start requested", "event", "started", "agent", agent.Agent, "branch", branch)
	// A cancel or release may have settled the worker while it was being
	// started, its Stop before this Start. Either this read sees it settled
	// and stops the compute, or the settling write (and so its Stop) came
	// after the Start.
	if cur, _, err := s.store.GetResource(ctx, protocol.KindWorker, plan.Worker); err != nil {
		return nil, err
	} else if workerGone(cur) {
		// The settle's own stop came before this Start, and may have
		// cleared the stop its record owed: owe this one again.
		if err := s.oweStop(ctx, plan.Worker); err != nil {
			return nil, err
		}
		if err := s.stopOwed(ctx, plan.Worker); err != nil {
			return nil, err
		}
	}
	return receipt()
}

// launchReceipt is a launch's receipt, the same on every attempt.
func (s *Service) launchReceipt(key string, plan launchPlan, branch string, created bool) (json.RawMessage, error) {
	r := protocol.Receipt{Reference: s.derive("req-", key), Touched: []protocol.Resource{}}
	r.Created = append(r.Created, s.resource(protocol.KindWorker, plan.Worker))
	if created {
		r.Created = append(r.Created, s.resource(protocol.KindBranch, branch))
	}
	if plan.Existing {
		r.Touched = append(r.Touched, s.resource(protocol.KindWorktree, plan.Worktree))
	} else {
		r.Created = append(r.Created, s.resource(protocol.KindWorktree, plan.Worktree))
	}
	return protocol.EncodeReceipt(r)
}

// errReleased is createResource's answer when the record exists, made by
// the same key, and was released since.
var errReleased = errors.New("released since it was made")

// goneOr answers a launch whose record was found released: the launch
// happened, and its receipt is the answer; any other error stays.
func (s *Service) goneOr(err error, receipt func() (json.RawMessage, error)) (json.RawMessage, error) {
	if errors.Is(err, errReleased) {
		return receipt()
	}
	return nil, err
}

// workerGone reports whether a worker record is settled or released: the
// states it never leaves.
func workerGone(r store.Resource) bool {
	return r.Released || (r.Worker != nil && r.Worker.State == protocol.StateSettled)
}

// launchGone reports whether a record the launch's key made has been
// released, or its worker settled: then the launch was applied (a
// predecessor made them) and must converge without making anything again.
func (s *Service) launchGone(ctx context.Context, key string, plan launchPlan, branch string, created bool) (bool, error) {
	type rec struct{ kind, handle string }
	recs := []rec{{protocol.KindWorker, plan.Worker}}
	if !plan.Existing {
		recs = append(recs, rec{protocol.KindWorktree, plan.Worktree})
	}
	if created {
		recs = append(recs, rec{protocol.KindBranch, branch})
	}
	for _, r := range recs {
		res, _, err := s.store.GetResource(ctx, r.kind, r.handle)
		switch {
		case galleyerr.Is(galleyerr.NotFound, err):
			continue
		case err != nil:
			return false, err
		case res.Owner == key && workerGone(res):
			return true, nil
		}
	}
	return false, nil
}

// branchOurs decides whether a branch that exists at a resumed launch's
// CreateBranch is the one its predecessor made. The branch record owned by
// this key says so (the worker may have pushed since, so the head no longer
// tells); without a record, the predecessor may have died between creating
// the branch and recording it, before any worker ran, so the branch is
// its own if it still points at the planned base.
func (s *Service) branchOurs(ctx context.Context, key, branch string, plan launchPlan, fresh bool) (bool, error) {
	if fresh {
		return false, nil
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindBranch, branch)
	switch {
	case err == nil && res.Owner == key:
		return true, nil
	case err == nil && !res.Released:
		return false, nil // another key's branch
	case err != nil && !galleyerr.Is(galleyerr.NotFound, err):
		return false, err
	}
	head, exists, err := s.git.BranchHead(ctx, branch)
	if err != nil {
		return false, err
	}
	return exists && head == plan.Base, nil
}

// undoLaunch removes what a fresh launch made before its runtime refused
// for capacity, then answers cause as a refusal. If anything cannot be
// undone, the answer stays uncertain.
func (s *Service) undoLaunch(ctx context.Context, c *claim, plan launchPlan, branch string, branchCreated bool, cause error) error {
	ctx = context.WithoutCancel(ctx)
	uncertain := func(err error) error {
		return galleyerr.E(galleyerr.Unavailable, "could not undo a launch the runtime refused", err)
	}
	if err := s.markReleasedIfExists(ctx, protocol.KindWorker, plan.Worker); err != nil {
		return uncertain(err)
	}
	if !plan.Existing {
		if err := s.markReleasedIfExists(ctx, protocol.KindWorktree, plan.Worktree); err != nil {
			return uncertain(err)
		}
	}
	if branchCreated {
		if err := s.git.DeleteBranch(ctx, branch); err != nil {
			return uncertain(err)
		}
		if err := s.markReleasedIfExists(ctx, protocol.KindBranch, branch); err != nil {
			return uncertain(err)
		}
	}
	c.acted = false
	return cause
}

func (s *Service) markReleasedIfExists(ctx context.Context, kind, handle string) error {
	err := s.markReleased(ctx, kind, handle)
	if galleyerr.Is(galleyerr.NotFound, err) {
		return nil
	}
	return err
}
