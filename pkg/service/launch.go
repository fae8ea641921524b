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

// launching is one attempt at a launch: what it was asked, the plan it
// follows, and what its phases have learnt so far.
type launching struct {
	c    *claim
	call protocol.EffectCall
	eff  protocol.WorkerEffect
	key  string
	plan launchPlan
	// fresh is set when no predecessor planned: this attempt decided the
	// plan, and nothing it names can have been made before.
	fresh bool
	// branch is the worker's branch ("" for none); created is set when the
	// launch makes it.
	branch  string
	created bool
	// agent and worktreePath are set by recordWorker, nonce (the worker's
	// credential nonce, as its record holds it) by checkStartable.
	agent        protocol.AgentSelection
	worktreePath string
	nonce        string
}

// launchPhase is one step of a launch after its plan. answered reports
// that the launch is over and answers by its receipt: it happened, and
// nothing more is to be done.
type launchPhase func(ctx context.Context, l *launching) (answered bool, err error)

// launch makes a worker, in phases: a plan saved in the claim before
// anything is made, then the branch, the records, the compute, and the
// receipt. Every attempt of a key follows the same plan, so a retry after a
// lost lease converges on the same resources; a phase that finds the launch
// over (its worker gone, started, or failed) answers with the receipt.
func (s *Service) launch(ctx context.Context, c *claim, call protocol.EffectCall, eff protocol.WorkerEffect) (json.RawMessage, error) {
	l, err := s.planLaunch(ctx, c, call, eff)
	if err != nil {
		return nil, err
	}
	for _, phase := range []launchPhase{
		s.convergeIfGone,
		s.makeBranch,
		s.recordWorker,
		s.checkStartable,
		s.startCompute,
		s.stopIfSettledWhileStarting,
	} {
		if answered, err := phase(ctx, l); err != nil {
			return nil, err
		} else if answered {
			break
		}
	}
	return s.launchReceipt(l.key, l.plan, l.branch, l.created)
}

// planLaunch reads the plan a predecessor saved in the claim, or decides
// and saves one (decidePlan).
func (s *Service) planLaunch(ctx context.Context, c *claim, call protocol.EffectCall, eff protocol.WorkerEffect) (*launching, error) {
	l := &launching{c: c, call: call, eff: eff, key: call.Request.Key}
	if eff.Branch != nil {
		l.branch = *eff.Branch
	}
	if c.resumed && len(c.rec.Plan) > 0 {
		if err := json.Unmarshal(c.rec.Plan, &l.plan); err != nil {
			return nil, galleyerr.E(galleyerr.Other, "unreadable launch plan", err)
		}
	}
	l.fresh = l.plan.Worker == ""
	if l.fresh {
		if err := s.decidePlan(ctx, l); err != nil {
			return nil, err
		}
	}
	l.created = l.branch != "" && !l.plan.Existing
	if l.plan.Existing {
		l.branch = l.plan.Branch
	}
	return l, nil
}

// decidePlan decides a fresh launch's plan: its worker and worktree, the
// base of the branch it makes, after the checks that need the house (the
// pinned head, the capacity); then saves it in the claim before anything
// is made.
func (s *Service) decidePlan(ctx context.Context, l *launching) error {
	l.plan.Worker = s.derive("w-", l.key)
	if err := s.planWorktree(ctx, l); err != nil {
		return err
	}
	if err := s.planBase(ctx, l); err != nil {
		return err
	}
	if err := s.checkPinned(ctx, l.eff.Pinned, l.plan); err != nil {
		return err
	}
	if err := s.checkCapacity(ctx); err != nil {
		return err
	}
	return s.savePlan(ctx, l.c, l.plan)
}

// planWorktree names the worktree: the existing one the request names (and
// its branch), or a new one derived from the key.
func (s *Service) planWorktree(ctx context.Context, l *launching) error {
	if l.eff.Workspace.Type != "existing" {
		l.plan.Worktree = s.derive("wt-", l.key)
		return nil
	}
	wt, err := s.usableWorktree(ctx, l.eff.Workspace.Resource.Handle)
	if err != nil {
		return err
	}
	l.plan.Worktree, l.plan.Existing = wt.Handle, true
	// A worktree is a clone on one branch: a worker reusing it works
	// on that branch, and cannot be handed another.
	wtBranch, err := s.worktreeBranch(ctx, wt.Handle)
	if err != nil {
		return err
	}
	if l.branch != "" && l.branch != wtBranch {
		return galleyerr.Errorf(galleyerr.Invalid, "worktree %s is on branch %s; an existing workspace keeps its branch",
			quoteShort(wt.Handle), quoteShort(wtBranch))
	}
	l.plan.Branch = wtBranch
	return nil
}

// planBase refuses a requested branch that exists already and records the
// commit a new one starts at: the default branch's head.
func (s *Service) planBase(ctx context.Context, l *launching) error {
	if l.branch == "" || l.plan.Existing {
		return nil
	}
	if _, exists, err := s.git.BranchHead(ctx, l.branch); err != nil {
		return err
	} else if exists {
		return galleyerr.Errorf(galleyerr.Invalid, "branch %s already exists", quoteShort(l.branch))
	}
	base, err := s.git.DefaultHead(ctx)
	if err != nil {
		return err
	}
	l.plan.Base = base
	return nil
}

// convergeIfGone answers a launch a predecessor acted on whose records
// have been settled or released since (a cancel, a cleanup by another
// key): the launch happened and its worker is gone, so nothing is made
// again, nothing started.
func (s *Service) convergeIfGone(ctx context.Context, l *launching) (bool, error) {
	if l.fresh {
		return false, nil
	}
	return s.launchGone(ctx, l.key, l.plan, l.branch, l.created)
}

// makeBranch creates the branch the launch makes, or accepts the one its
// predecessor made (branchOurs). From here on the launch has acted.
func (s *Service) makeBranch(ctx context.Context, l *launching) (bool, error) {
	if l.created {
		err := s.git.CreateBranch(ctx, l.branch, l.plan.Base)
		if err == nil {
			l.c.acted = true
		} else {
			if !galleyerr.Is(galleyerr.Conflict, err) {
				return false, err
			}
			if ours, err := s.branchOurs(ctx, l.key, l.branch, l.plan, l.fresh); err != nil {
				return false, err
			} else if !ours {
				return false, galleyerr.Errorf(galleyerr.Invalid, "branch %s already exists", quoteShort(l.branch))
			}
		}
	}
	l.c.acted = true
	return false, nil
}

// recordWorker writes the launch's records: the worktree (unless reused),
// the branch it made, and the worker, starting. A record found released
// since an earlier attempt made it answers the launch (errReleased).
func (s *Service) recordWorker(ctx context.Context, l *launching) (bool, error) {
	now := s.clock.Now()
	l.agent = protocol.AgentSelection{Agent: s.cfg.DefaultAgent}
	if l.eff.Agent != nil {
		l.agent = *l.eff.Agent
	}
	// Only a fresh plan may replace a released record of its own key: one
	// its own undo released (the launch answered not-applied). A record a
	// predecessor made and someone released since stays released.
	l.worktreePath = path.Join(s.cfg.WorkspaceRoot, l.plan.Worktree)
	if l.plan.Existing {
		wt, _, err := s.store.GetResource(ctx, protocol.KindWorktree, l.plan.Worktree)
		if err != nil {
			return false, err
		}
		l.worktreePath = wt.Path
	} else if err := s.createResource(ctx, store.Resource{Kind: protocol.KindWorktree, Handle: l.plan.Worktree,
		Owner: l.key, Created: now, Path: l.worktreePath}, l.fresh); err != nil {
		return releasedSince(err)
	}
	if l.created {
		if err := s.createResource(ctx, store.Resource{Kind: protocol.KindBranch, Handle: l.branch, Owner: l.key, Created: now}, l.fresh); err != nil {
			return releasedSince(err)
		}
	}
	uid, err := s.launchAgentUID(ctx, l.plan.Worker, l.key)
	if err != nil {
		return false, err
	}
	req, eff := l.call.Request, l.eff
	worker := store.Resource{Kind: protocol.KindWorker, Handle: l.plan.Worker, Owner: l.key, Created: now,
		Worker: &store.Worker{
			Run: l.call.Run, Task: req.Task, Role: eff.Role, Branch: l.branch, Worktree: l.plan.Worktree,
			Brief: *eff.Brief, Agent: &l.agent, State: protocol.StateStarting, Updated: now,
			CredentialNonce: s.launchNonce(l.key), AgentUID: uid,
		}}
	if err := s.createResource(ctx, worker, l.fresh); err != nil {
		return releasedSince(err)
	}
	return false, nil
}

// checkStartable reads the worker's record back and answers the launch
// without starting anything when its compute must not start (any more).
func (s *Service) checkStartable(ctx context.Context, l *launching) (bool, error) {
	// The credential is made with the nonce the record holds: an earlier
	// attempt's record is the one kept.
	made, _, err := s.store.GetResource(ctx, protocol.KindWorker, l.plan.Worker)
	if err != nil {
		return false, err
	}
	if made.Worker == nil {
		return false, galleyerr.Errorf(galleyerr.Other, "worker %s has no worker record", quoteShort(l.plan.Worker))
	}
	switch {
	case workerGone(made):
		// Cancelled or released before it was started (or while): a
		// settled worker never runs again.
		return true, nil
	case made.Worker.State != protocol.StateStarting:
		// Its harness has reported: an earlier attempt started it.
		return true, nil
	case !l.fresh && s.startExpired(made.Created, made.Worker.CredentialClaim):
		// A retry long after the first attempt (kitchn's, after a lost
		// answer): a task started now could never get its credential, and
		// past ECS's clientToken window would be a second task.
		if err := s.failStart(ctx, l.plan.Worker, "its launch was retried after its start window had passed"); err != nil {
			return false, err
		}
		return true, nil
	}
	l.nonce = made.Worker.CredentialNonce
	return false, nil
}

// startCompute asks the runtime for the worker's compute. A refusal for
// capacity undoes a fresh launch (its answer is not applied); a definite
// refusal fails the worker.
func (s *Service) startCompute(ctx context.Context, l *launching) (bool, error) {
	req := l.call.Request
	spec := WorkerSpec{
		Handle: l.plan.Worker, Token: s.workerToken(l.plan.Worker, l.nonce), IdempotencyToken: s.derive("t-", req.Key),
		Workspace: l.plan.Worktree, WorkspacePath: l.worktreePath, Branch: l.branch, Agent: l.agent.Agent,
		Run: l.call.Run, Task: req.Task, Key: req.Key,
	}
	if err := s.runtime.Start(ctx, spec); err != nil {
		if galleyerr.Is(galleyerr.RateLimited, err) && l.fresh {
			// No compute could be had (ECS capacity, a quota, throttling)
			// and no earlier attempt may have started any: undo what this
			// launch made, so that its not-applied answer is true.
			return false, s.undoLaunch(ctx, l.c, l.plan, l.branch, l.created, err)
		}
		if definiteStart(err) {
			// Refused for good, or rate-limited after an earlier attempt
			// that may have acted: the launch happened and its worker
			// failed, rather than a worker left starting for ever.
			if ferr := s.failStart(ctx, l.plan.Worker, err.Error()); ferr != nil {
				return false, ferr
			}
			return true, nil
		}
		return false, err
	}
	s.event(l.plan.Worker, eventlog.KindCompute, "compute start requested", "event", "started", "agent", l.agent.Agent, "branch", l.branch)
	return false, nil
}

// stopIfSettledWhileStarting stops the compute of a worker a cancel or
// release settled while it was being started, its Stop before this Start.
// Either this read sees it settled and stops the compute, or the settling
// write (and so its Stop) came after the Start.
func (s *Service) stopIfSettledWhileStarting(ctx context.Context, l *launching) (bool, error) {
	if cur, _, err := s.store.GetResource(ctx, protocol.KindWorker, l.plan.Worker); err != nil {
		return false, err
	} else if workerGone(cur) {
		// The settle's own stop came before this Start, and may have
		// cleared the stop its record owed: owe this one again.
		if err := s.oweStop(ctx, l.plan.Worker); err != nil {
			return false, err
		}
		if err := s.stopOwed(ctx, l.plan.Worker); err != nil {
			return false, err
		}
	}
	return false, nil
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

// releasedSince answers a launch whose record was found released: the
// launch happened, and its receipt is the answer; any other error stays.
func releasedSince(err error) (answered bool, _ error) {
	if errors.Is(err, errReleased) {
		return true, nil
	}
	return false, err
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
