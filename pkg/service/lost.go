package service

import (
	"context"
	"errors"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// LostAfter is how long after a worker's compute was asked for (its
// launch, or the resume of its latest parking) housekeeping takes a
// compute the runtime does not show for gone: well past any lag of the
// platform's listing (ECS shows a new task within seconds), and as long as
// a starting worker's bootstrap code lives.
const LostAfter = StartingStaleAfter

// SettleLost settles failed the workers whose compute is gone while their
// record says otherwise, for housekeeping: the event that would have said
// so (ECS's STOPPED task state change) was lost, or no task was ever made
// for a worker left starting. A worker counts as gone when the runtime
// reads its compute exited, or, once its compute was asked for (launched
// or resumed) longer than LostAfter ago, unknown (ECS shows no task) while
// it is starting or its task is recorded. A worker the runtime cannot read
// is left for the next pass. It answers how many it settled; each settle
// posts the worker-done row its coordinator is owed, once.
//
// It also resumes every parked worker whose inbox holds input after its
// parking's cursor (its resume was lost), so that no worker stays parked
// with input waiting; those are logged, not counted.
func (s *Service) SettleLost(ctx context.Context) (int, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return 0, err
	}
	_, rerr := s.resumeWaiting(ctx, all)
	n, err := s.settleLost(ctx, all)
	return n, errors.Join(err, rerr)
}

func (s *Service) settleLost(ctx context.Context, all []store.Resource) (int, error) {
	now := s.clock.Now()
	recs := map[string]store.Resource{}
	var handles []string
	for _, r := range all {
		if r.Kind == protocol.KindWorker && !r.Released && r.Worker != nil && r.Worker.State != protocol.StateSettled &&
			!r.Worker.Parked() {
			// A parked worker's compute is gone on purpose; one whose
			// resume is owed is started by WorkerExited below.
			recs[r.Handle] = r
			handles = append(handles, r.Handle)
		}
	}
	if len(handles) == 0 {
		return 0, nil
	}
	lv, lerr := s.runtime.Livenesses(ctx, handles)
	var errs []error
	if lerr != nil {
		errs = append(errs, lerr)
	}
	n := 0
	for _, h := range handles {
		r := recs[h]
		l, ok := lv[h]
		var reason string
		switch {
		case !ok:
			continue
		case l == LivenessExited:
			reason = "its compute ended and no report of the end arrived (housekeeping found it)"
		case l == LivenessUnknown && now.Sub(startedAt(r)) > LostAfter &&
			(r.Worker.State == protocol.StateStarting || r.Worker.TaskARN != ""):
			reason = "its compute is gone: the platform shows none (housekeeping found it)"
		default:
			continue
		}
		if err := s.WorkerExited(ctx, h, -1, reason); err != nil {
			errs = append(errs, err)
			continue
		}
		s.log.Warn("housekeeping settled a worker whose compute is gone", "worker", h, "why", reason)
		n++
	}
	return n, errors.Join(errs...)
}
