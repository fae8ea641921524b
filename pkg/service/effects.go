package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/galley-run/galley/pkg/agents/effort"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

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
