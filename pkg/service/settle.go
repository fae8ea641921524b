package service

import (
	"context"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// How a worker settles: one conditional write decides its outcome, and the
// first to land wins.

// How a worker settles.
type settleHow int

const (
	settleOther  settleHow = iota // cancel or release
	settleOwn                     // its own worker-done
	settleExited                  // its compute ended without one
)

var errSettled = galleyerr.Errorf(galleyerr.Conflict, "worker has settled")

// settle settles a worker with outcome unless it settled already, and
// rings its inbox: the harness's long poll answers "settled" at once
// instead of holding its call (on AWS, a Lambda instance) to the deadline.
// It writes only a bounded record (the worker's pending rows are dropped:
// it posts nothing more), so it succeeds whatever the worker posted.
func (s *Service) settle(ctx context.Context, handle, outcome string, how settleHow) error {
	// A settle by the coordinator is followed by a stop of the compute,
	// owed in the record until done.
	_, err := s.settleRecord(ctx, handle, outcome, how, how == settleOther)
	return err
}

// settleRecord is settle, answering the worker record as it stands after:
// settled, by this call or before it. A settle that owes a worker-done row
// (settleOwn, settleExited) lists it on the record in the same write.
//
// owesStop records in the same write that the worker's compute is to be
// stopped (store.CleanupStop), unless it is known to have ended: the
// caller stops it next (stopOwed), and housekeeping retries that stop if
// it fails.
func (s *Service) settleRecord(ctx context.Context, handle, outcome string, how settleHow, owesStop bool) (store.Resource, error) {
	settled := false
	why := map[settleHow]string{settleOther: "cancelled or released by the coordinator", settleOwn: "the worker's own worker-done",
		settleExited: "the worker's compute ended"}[how]
	res, err := s.updateWorkerRecord(ctx, handle, why, func(r *store.Resource) error {
		w := r.Worker
		changed := false
		if owesStop && !w.Exited && r.Cleanup == "" {
			r.Cleanup, changed = store.CleanupStop, true
		}
		if how == settleExited && !w.Exited {
			w.Exited, changed = true, true
		}
		settled = w.State != protocol.StateSettled
		if settled {
			now := s.clock.Now()
			w.State, w.Outcome, w.Pending, changed = protocol.StateSettled, outcome, nil, true
			if how == settleOwn {
				w.FinalReportUntil = now.Add(s.cfg.FinalReportGrace)
			}
			if how != settleOther {
				w.Pending = []store.PendingRow{{ID: s.doneRowID(handle), Kind: protocol.MsgWorkerDone, At: now}}
			}
		}
		if !changed {
			return errNoChange
		}
		return nil
	})
	if err == nil && settled {
		s.budgets.forget(handle)
		s.ring(ctx, inboxTopic(handle))
	}
	if err == nil && (settled || how == settleExited) {
		// What its parkings saved: at the settle, and again at its
		// compute's end, after which nothing can save more (a delete
		// that failed is tried once more then).
		s.forgetParked(ctx, handle)
	}
	return res, err
}
