package service

import (
	"context"
	"encoding/json"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// The operator's actions (package operator serves them). They go through
// the paths kitchn's calls take, so they are idempotent the same way.

// OperatorWorkers lists every worker record, released ones included, in
// creation order.
func (s *Service) OperatorWorkers(ctx context.Context) ([]store.Resource, error) {
	rs, err := s.store.ListResources(ctx)
	if err != nil {
		return nil, err
	}
	out := rs[:0]
	for _, r := range rs {
		if r.Kind == protocol.KindWorker && r.Worker != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// OperatorCancel cancels a worker as kitchn's cancel-worker would, through
// the effect path under a key of its own per worker: a repeated cancel
// replays the first one's receipt, and a settled worker stays as it is.
func (s *Service) OperatorCancel(ctx context.Context, handle string) error {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return err
	}
	if res.Worker == nil {
		return galleyerr.Errorf(galleyerr.NotFound, "no such worker")
	}
	eff, err := json.Marshal(protocol.WorkerEffect{Type: protocol.OpCancel, Worker: &protocol.Resource{
		Kind: protocol.KindWorker, Backend: s.cfg.Backend, Handle: handle}})
	if err != nil {
		return err
	}
	call := protocol.EffectCall{Run: res.Worker.Run, Request: protocol.EffectRequest{
		House: s.cfg.House, Backend: s.cfg.Backend, Credential: s.cfg.Credential, Task: res.Worker.Task,
		Attempt: 1, Key: "operator-cancel:" + handle,
		Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: eff},
	}}
	if _, err := s.Apply(ctx, call, s.clock.Now()); err != nil {
		return err
	}
	s.event(handle, eventlog.KindAction, "the operator cancelled the worker", "action", "cancel")
	return nil
}
