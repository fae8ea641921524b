package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/agents/effort"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// The effects: a request is checked, its key claimed (claims.go), and its
// effect performed: a launch (launch.go), or a message, reply, cancel or
// release (this file).

// Apply performs one effect and returns the encoded receipt. Errors carry
// the kind that decides the answer (see package api).
func (s *Service) Apply(ctx context.Context, call protocol.EffectCall, arrived time.Time) (json.RawMessage, error) {
	const op galleyerr.Op = "effects.apply"
	req := call.Request
	if err := s.checkScope(req); err != nil {
		return nil, err
	}
	if req.Effect.Executor != protocol.ExecutorWorker {
		// The protocol has no capability for foreign executors; galley names
		// the closest real one, the capability it would need to serve
		// requests for any executor idempotently.
		return nil, &galleyerr.Error{Op: string(op), Kind: galleyerr.Unsupported,
			Msg: "executor " + quoteShort(req.Effect.Executor) + " is not served", Capability: "effect.idempotent_requests"}
	}
	eff, err := protocol.DecodeWorkerEffect(req.Effect.Effect)
	if err != nil {
		return nil, err
	}
	if err := s.checkEffect(eff); err != nil {
		return nil, err
	}
	fp, err := protocol.Fingerprint(call)
	if err != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, err)
	}
	c, receipt, err := s.claim(ctx, req.Key, fp, eff.Type, arrived)
	if err != nil || receipt != nil {
		return receipt, err
	}
	// Bound the work by the lease, so a holder never acts after a retry may
	// have taken the key over.
	wctx, cancel := context.WithDeadline(ctx, c.rec.LeaseExpires.Add(-time.Second))
	defer cancel()
	receipt, err = s.perform(wctx, c, call, eff)
	if err != nil {
		if refusal(err) && !c.acted {
			return nil, s.refuse(ctx, c, err)
		}
		s.abandon(ctx, c)
		if refusal(err) {
			// Something may have happened: the answer must stay uncertain,
			// and a retry converges.
			return nil, galleyerr.E(galleyerr.Unavailable, "the effect was interrupted after it began acting", err)
		}
		return nil, err
	}
	return s.complete(ctx, c, receipt)
}

func (s *Service) perform(ctx context.Context, c *claim, call protocol.EffectCall, eff protocol.WorkerEffect) (json.RawMessage, error) {
	switch eff.Type {
	case protocol.OpLaunch:
		return s.launch(ctx, c, call, eff)
	case protocol.OpMessage:
		return s.message(ctx, c, eff)
	case protocol.OpReply:
		return s.reply(ctx, c, eff)
	case protocol.OpCancel:
		return s.cancel(ctx, c, eff)
	case protocol.OpRelease:
		return s.release(ctx, c, eff)
	}
	return nil, galleyerr.Errorf(galleyerr.Invalid, "unknown effect type")
}

// checkScope refuses a request for another house, namespace or credential.
func (s *Service) checkScope(req protocol.EffectRequest) error {
	switch {
	case req.House != s.cfg.House:
		return galleyerr.Errorf(galleyerr.CrossHouse, "request names house %s; this service serves %s", quoteShort(req.House), s.cfg.House)
	case req.Backend != s.cfg.Backend:
		return galleyerr.Errorf(galleyerr.ForeignBackend, "request names backend %s; this service serves %s", quoteShort(req.Backend), s.cfg.Backend)
	case req.Credential != s.cfg.Credential:
		return galleyerr.Errorf(galleyerr.Invalid, "request names credential %s; this service authenticates %s", quoteShort(req.Credential), s.cfg.Credential)
	}
	return nil
}

// checkEffect refuses what no state could make acceptable: a target in
// another namespace, an agent selection this deployment cannot honour.
func (s *Service) checkEffect(eff protocol.WorkerEffect) error {
	for _, r := range []*protocol.Resource{eff.Worker, eff.Resource} {
		if r != nil && r.Backend != s.cfg.Backend {
			return galleyerr.Errorf(galleyerr.ForeignBackend, "resource is in backend %s", quoteShort(r.Backend))
		}
	}
	if eff.Workspace != nil && eff.Workspace.Resource != nil && eff.Workspace.Resource.Backend != s.cfg.Backend {
		return galleyerr.Errorf(galleyerr.ForeignBackend, "workspace is in backend %s", quoteShort(eff.Workspace.Resource.Backend))
	}
	if a := eff.Agent; a != nil {
		known := false
		for _, f := range s.cfg.Families {
			known = known || f == a.Agent
		}
		switch {
		case !known:
			return galleyerr.Errorf(galleyerr.Invalid, "agent family %s is not available here", quoteShort(a.Agent))
		case a.Model != "" && !s.cfg.Model:
			return galleyerr.Errorf(galleyerr.Invalid, "this service cannot choose a model")
		case a.Effort != "" && s.cfg.Effort == "unsupported":
			return galleyerr.Errorf(galleyerr.Invalid, "this service cannot choose an effort")
		case a.Effort != "" && s.cfg.Effort == "with-model" && a.Model == "":
			return galleyerr.Errorf(galleyerr.Invalid, "an effort needs a model here")
		}
		return effort.Check(a.Agent, a.Model, a.Effort) // a value the family's CLI cannot honour
	}
	return nil
}

// refusal reports whether err is a definite not-applied answer.
func refusal(err error) bool {
	switch galleyerr.KindOf(err) {
	case galleyerr.Invalid, galleyerr.Unsupported, galleyerr.CrossHouse, galleyerr.ForeignBackend, galleyerr.RateLimited:
		return true
	}
	return false
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// quoteShort quotes a client-supplied value for a message, cut short so an
// error never echoes a whole body.
func quoteShort(v string) string {
	const max = 64
	if len(v) > max {
		v = v[:max] + "…"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (s *Service) message(ctx context.Context, c *claim, eff protocol.WorkerEffect) (json.RawMessage, error) {
	handle := eff.Worker.Handle
	if _, _, err := s.liveWorker(ctx, handle); err != nil {
		return s.actedBefore(ctx, c, handle, err)
	}
	if err := s.act(ctx, c); err != nil {
		return nil, err
	}
	seq, err := s.appendMessage(ctx, c, handle, *eff.Body)
	if err != nil {
		return nil, err
	}
	s.event(handle, eventlog.KindMailbox, *eff.Body, "kind", "message", "inbox", strconv.FormatInt(seq, 10))
	s.ring(ctx, inboxTopic(handle))
	// After the append: a parking written before this read is seen here,
	// and one written after it finds the item (WorkerPark). A resume that
	// could not be recorded fails the effect (Unavailable): kitchn's
	// retry finds the item appended and resumes the worker then.
	if err := s.resumeIfParked(ctx, handle, "a message arrived"); err != nil {
		return nil, err
	}
	return s.touchedReceipt(c, s.resource(protocol.KindWorker, handle))
}

// appendMessage appends the message to the worker's inbox under the
// claim's key, once: a claim taken over finds the copy its predecessor
// appended (which failed after it, a resume that could not be written)
// and appends nothing more, so a retry gives a parked worker no second
// copy after its cursor to be woken by.
func (s *Service) appendMessage(ctx context.Context, c *claim, handle, body string) (int64, error) {
	if c.resumed {
		v, err := s.inboxes.read(ctx, s.store, handle)
		if err != nil {
			return 0, err
		}
		for _, it := range v.items {
			if it.Key == c.rec.Key && it.Kind == "message" {
				return it.Seq, nil
			}
		}
	}
	return s.store.AppendInbox(ctx, handle, store.InboxItem{Key: c.rec.Key, Kind: "message", Body: body, At: s.clock.Now()})
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
	} else {
		// Recorded by a holder this claim took over: its write resumed
		// a parked worker, but the start may be owed.
		if err := s.resumeIfParked(ctx, handle, "its reply arrived"); err != nil {
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
		if err := s.runtime.RemoveWorkspace(ctx, r.Handle, res.Path); err != nil {
			return nil, err
		}
		if err := s.markReleased(ctx, r.Kind, r.Handle); err != nil {
			return nil, err
		}
		s.removeSnapshot(ctx, r.Handle)
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
	items, err := s.store.ListInbox(ctx, handle, 0, 0)
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
