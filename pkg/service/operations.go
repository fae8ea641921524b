package service

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"strconv"

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

// createResource creates r, or accepts the record an earlier attempt of the
// same key made. A released record of a reused handle (a branch deleted and
// made again) is replaced; one the same key made is replaced only when
// replaceOwn is set (its own undo released it), and is otherwise
// errReleased: a released resource never comes back.
func (s *Service) createResource(ctx context.Context, r store.Resource, replaceOwn bool) error {
	for range claimAttempts {
		_, err := s.store.PutResource(ctx, r, store.NoVersion)
		if !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
		cur, ver, gerr := s.store.GetResource(ctx, r.Kind, r.Handle)
		if gerr != nil {
			return gerr
		}
		if cur.Owner == r.Owner && !cur.Released {
			return nil
		}
		if !cur.Released {
			return galleyerr.Errorf(galleyerr.Invalid, "%s %s already exists", r.Kind, quoteShort(r.Handle))
		}
		if cur.Owner == r.Owner && (!replaceOwn || (cur.Worker != nil && cur.Worker.State == protocol.StateSettled)) {
			// An undo releases a worker it never settled; a settled one
			// was cancelled or released by a key, and stays so.
			return errReleased
		}
		if _, err = s.store.PutResource(ctx, r, ver); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "resource %s is contended", quoteShort(r.Handle))
}

func (s *Service) message(ctx context.Context, c *claim, eff protocol.WorkerEffect) (json.RawMessage, error) {
	handle := eff.Worker.Handle
	if _, _, err := s.liveWorker(ctx, handle); err != nil {
		return s.actedBefore(ctx, c, handle, err)
	}
	if err := s.act(ctx, c); err != nil {
		return nil, err
	}
	item := store.InboxItem{Key: c.rec.Key, Kind: "message", Body: *eff.Body, At: s.clock.Now()}
	seq, err := s.store.AppendInbox(ctx, handle, item)
	if err != nil {
		return nil, err
	}
	s.event(handle, eventlog.KindMailbox, *eff.Body, "kind", "message", "inbox", strconv.FormatInt(seq, 10))
	s.ring(ctx, inboxTopic(handle))
	return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
}

func (s *Service) reply(ctx context.Context, c *claim, eff protocol.WorkerEffect) (json.RawMessage, error) {
	handle, question, body := eff.Worker.Handle, *eff.Question, *eff.Body
	res, _, err := s.liveWorker(ctx, handle)
	if err != nil {
		if c.acted && galleyerr.Is(galleyerr.Invalid, err) {
			// Taken over after the worker moved on (settled, released). A
			// reply reaches the agent only once its answer is recorded, and
			// none can be recorded any more: recorded with this body, it
			// was delivered; otherwise it never will be, whatever the
			// holder before did, and not applied is a promise galley keeps.
			if res.Worker != nil && answerMatches(res.Worker.Questions[question], body) {
				return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
			}
			c.acted = false
		}
		return nil, err
	}
	answer, asked := res.Worker.Questions[question]
	switch {
	case !asked:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "worker never asked question %s", quoteShort(question))
	case answer != "" && !answerMatches(answer, body):
		// Answered with another body: only the recorded answer reaches the
		// agent, so whatever an earlier holder appended never will.
		c.acted = false
		return nil, galleyerr.Errorf(galleyerr.Invalid, "question %s was already answered", quoteShort(question))
	}
	if answer == "" {
		// The copy it names reaches the agent once (deliverReply).
		if err := s.act(ctx, c); err != nil {
			return nil, err
		}
		if err := s.deliverReply(ctx, c, handle, question, body); err != nil {
			return nil, err
		}
	}
	return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
}

func (s *Service) cancel(ctx context.Context, c *claim, eff protocol.WorkerEffect) (json.RawMessage, error) {
	handle := eff.Worker.Handle
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case galleyerr.Is(galleyerr.NotFound, err) || (err == nil && res.Worker == nil):
		// A worker that never existed (records are never deleted): nothing
		// to cancel, and nothing any holder can have done.
		c.acted = false
		return nil, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
	case err != nil:
		return nil, err
	case res.Released && !c.acted:
		// Gone before this key acted: refused, definitely.
		return nil, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
	}
	if err := s.act(ctx, c); err != nil {
		return nil, err
	}
	if err := s.settle(ctx, handle, protocol.OutcomeCancelled, settleOther); err != nil {
		if galleyerr.Is(galleyerr.Invalid, err) {
			// Released since this key began (by a holder this claim was
			// taken over from, or by another key): it is stopped and
			// settled, as asked.
			if res, _, rerr := s.store.GetResource(ctx, protocol.KindWorker, handle); rerr == nil && res.Released {
				return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
			}
		}
		return nil, err
	}
	if err := s.stopOwed(ctx, handle); err != nil {
		return nil, err
	}
	s.event(handle, eventlog.KindCompute, "compute stop requested (cancel)", "event", "stop-requested")
	return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
}

func (s *Service) release(ctx context.Context, c *claim, eff protocol.WorkerEffect) (json.RawMessage, error) {
	r := *eff.Resource
	res, _, err := s.store.GetResource(ctx, r.Kind, r.Handle)
	if err == nil && res.Released && c.acted {
		// Released by the holder this claim was taken over from (or by
		// another key): what this release asked for holds.
		return s.touchedReceipt(c, s.resource(r.Kind, r.Handle))
	}
	if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && res.Released) {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "%s %s does not exist", r.Kind, quoteShort(r.Handle))
	}
	if err != nil {
		return nil, err
	}
	if r.Kind == protocol.KindWorker || r.Kind == protocol.KindBranch {
		if err := s.act(ctx, c); err != nil {
			return nil, err
		}
	}
	switch r.Kind {
	case protocol.KindWorker:
		if err := s.settle(ctx, r.Handle, protocol.OutcomeCancelled, settleOther); err != nil {
			return nil, err
		}
		if err := s.stopOwed(ctx, r.Handle); err != nil {
			return nil, err
		}
	case protocol.KindWorktree:
		if busy, err := s.worktreeBusy(ctx, r.Handle); err != nil {
			return nil, err
		} else if busy {
			return nil, galleyerr.Errorf(galleyerr.Invalid, "worktree %s is in use by a running worker", quoteShort(r.Handle))
		}
		if err := s.act(ctx, c); err != nil {
			return nil, err
		}
		ref, err := s.startRemoval(ctx, r.Handle, res.Path, res.CleanupTries)
		if err != nil {
			return nil, err
		}
		if err := s.markReleasedOwing(ctx, r.Kind, r.Handle, ref); err != nil {
			return nil, err
		}
		return s.touchedReceipt(c, s.resource(r.Kind, r.Handle))
	case protocol.KindBranch:
		if err := s.git.DeleteBranch(ctx, r.Handle); err != nil {
			return nil, err
		}
	default:
		return nil, galleyerr.Errorf(galleyerr.Invalid, "%s resources cannot be released here", r.Kind)
	}
	if err := s.markReleased(ctx, r.Kind, r.Handle); err != nil {
		return nil, err
	}
	return s.touchedReceipt(c, s.resource(r.Kind, r.Handle))
}

func (s *Service) markReleased(ctx context.Context, kind, handle string) error {
	return s.markReleasedOwing(ctx, kind, handle, "")
}

// markReleasedOwing is markReleased, recording in the same write the
// workspace removal ref that runs behind the release (a removal the
// runtime did at once is ""): housekeeping follows it to its end.
func (s *Service) markReleasedOwing(ctx context.Context, kind, handle, removal string) error {
	for range claimAttempts {
		res, v, err := s.store.GetResource(ctx, kind, handle)
		if err != nil {
			return err
		}
		if res.Released {
			return nil
		}
		res.Released = true
		if removal != "" {
			res.Cleanup, res.CleanupRef = store.CleanupWorkspace, removal
		}
		if _, err = s.store.PutResource(ctx, res, v); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "resource %s is contended", quoteShort(handle))
}

func (s *Service) touchedReceipt(c *claim, touched ...protocol.Resource) (json.RawMessage, error) {
	return protocol.EncodeReceipt(protocol.Receipt{
		Reference: s.derive("req-", c.rec.Key), Created: []protocol.Resource{}, Touched: touched,
	})
}

func (s *Service) resource(kind, handle string) protocol.Resource {
	return protocol.Resource{Kind: kind, Backend: s.cfg.Backend, Handle: handle}
}

// actedBefore answers a message that found its worker gone
// (settled or released: refused) when its claim was taken over from a
// holder that acted and then failed to record the receipt: the worker moved
// on meanwhile, so the operation cannot run again, yet it happened if the
// worker's inbox holds the item the holder appended under this key. Then
// the answer is the receipt the holder would have recorded; otherwise
// refused stays refused (uncertain, as a taken-over claim counts as acted).
func (s *Service) actedBefore(ctx context.Context, c *claim, handle string, refused error) (json.RawMessage, error) {
	if !c.acted || !galleyerr.Is(galleyerr.Invalid, refused) {
		return nil, refused
	}
	items, err := s.store.ListInbox(ctx, handle, 0)
	if err != nil {
		return nil, err
	}
	for _, it := range items {
		if it.Key == c.rec.Key {
			return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
		}
	}
	return nil, refused
}

// liveWorker returns a worker that exists, is not released and has not
// settled: the only kind a message or reply can reach.
func (s *Service) liveWorker(ctx context.Context, handle string) (store.Resource, store.Version, error) {
	res, ver, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case galleyerr.Is(galleyerr.NotFound, err) || (err == nil && (res.Released || res.Worker == nil)):
		return res, ver, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
	case err != nil:
		return res, ver, err
	case res.Worker.State == protocol.StateSettled:
		return res, ver, galleyerr.Errorf(galleyerr.Invalid, "worker %s has settled", quoteShort(handle))
	}
	return res, ver, nil
}

var errNoChange = errors.New("no change")

// updateWorker applies fn to the worker's record in a conditional write,
// retrying from a fresh read when the record changed underneath. fn returns
// errNoChange to write nothing. A missing or released worker is Invalid.
func (s *Service) updateWorker(ctx context.Context, handle string, fn func(*store.Worker) error) (store.Resource, error) {
	return s.updateWorkerWhy(ctx, handle, "", fn)
}

// updateWorkerWhy is updateWorker, recording a state change its write
// makes in the worker's event log with why as its evidence.
func (s *Service) updateWorkerWhy(ctx context.Context, handle, why string, fn func(*store.Worker) error) (store.Resource, error) {
	return s.updateWorkerRecord(ctx, handle, why, func(r *store.Resource) error { return fn(r.Worker) })
}

// updateWorkerRecord is updateWorkerWhy with the whole record given to fn
// (its Cleanup beside the worker).
func (s *Service) updateWorkerRecord(ctx context.Context, handle, why string, fn func(*store.Resource) error) (store.Resource, error) {
	for range claimAttempts {
		res, ver, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
		if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && (res.Released || res.Worker == nil)) {
			return res, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
		}
		if err != nil {
			return res, err
		}
		if res.Worker.Questions == nil {
			res.Worker.Questions = map[string]string{}
		}
		before := res.Worker.State
		if err := fn(&res); err != nil {
			if errors.Is(err, errNoChange) {
				return res, nil
			}
			return res, err
		}
		res.Worker.Updated = s.clock.Now()
		if _, err = s.store.PutResource(ctx, res, ver); !galleyerr.Is(galleyerr.Conflict, err) {
			if err == nil && res.Worker.State != before {
				s.event(handle, eventlog.KindState, why, "from", before, "state", res.Worker.State, "outcome", res.Worker.Outcome)
			}
			return res, err
		}
	}
	return store.Resource{}, galleyerr.Errorf(galleyerr.InFlight, "worker %s is contended", quoteShort(handle))
}

// event records one event in the worker's log; kv are field names and
// values.
func (s *Service) event(handle, kind, text string, kv ...string) {
	if s.events == nil {
		return
	}
	e := store.Event{At: s.clock.Now(), Kind: kind, Text: text}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			if e.Fields == nil {
				e.Fields = map[string]string{}
			}
			e.Fields[kv[i]] = kv[i+1]
		}
	}
	s.events.Record(handle, e)
}

func hasOpenQuestion(w *store.Worker) bool {
	for _, a := range w.Questions {
		if a == "" {
			return true
		}
	}
	return false
}

func (s *Service) ring(ctx context.Context, topic string) {
	if err := s.bell.Ring(context.WithoutCancel(ctx), topic); err != nil {
		// A lost ring costs latency, never a message: waiters re-read the
		// store at their deadline.
		s.log.Warn("doorbell ring failed", "topic", topic, "err", err)
	}
}

func inboxTopic(handle string) string { return "inbox:" + handle }
func runTopic(run string) string      { return "run:" + run }

// InboxTopic is the doorbell topic a worker's harness waits on (its wake
// grant's queue is this topic's).
func InboxTopic(handle string) string { return inboxTopic(handle) }
