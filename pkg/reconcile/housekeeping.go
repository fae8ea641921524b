package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/metrics"
)

// housekeeping runs one tick scheduled at the RFC 3339 time at: it emits
// the gauges, then sweeps when the sweep is due. Either failing makes the
// tick an error (the function's error alarm), and a failure of the gauges
// does not keep the sweep from running.
func (r *Reconciler) housekeeping(ctx context.Context, eventID, at string) error {
	scheduled, err := time.Parse(time.RFC3339, at)
	if err != nil {
		scheduled = r.now()
		r.log.Warn("scheduled event without a readable time: the sweep is due by the reconciler's clock",
			"event", eventID, "time", at)
	}
	var errs []error
	if err := r.settleLost(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if err := r.retryCleanups(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if err := r.emitGauges(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if r.sweepDue(scheduled) {
		if err := r.sweep(ctx, eventID); err != nil {
			errs = append(errs, err)
		}
	} else {
		r.log.Debug("doorbell sweep not due", "event", eventID, "scheduled", scheduled.UTC().Format(time.RFC3339))
	}
	return errors.Join(errs...)
}

// settleLost settles the workers whose compute is gone: before the gauges,
// so they count what remains.
func (r *Reconciler) settleLost(ctx context.Context, eventID string) error {
	if r.lost == nil {
		return nil
	}
	n, err := r.lost.SettleLost(ctx)
	if err != nil {
		r.log.Error("housekeeping could not settle every lost worker", "event", eventID, "settled", n, "err", err.Error())
		return err
	}
	if n > 0 {
		r.log.Info("housekeeping settled lost workers", "event", eventID, "settled", n)
	}
	return nil
}

// retryCleanups does the owed cleanups: after settleLost, whose settles
// may owe none but must not wait a tick for the ones they do.
func (r *Reconciler) retryCleanups(ctx context.Context, eventID string) error {
	if r.cleaner == nil {
		return nil
	}
	n, err := r.cleaner.RetryCleanups(ctx)
	if err != nil {
		r.log.Error("housekeeping could not do every owed cleanup", "event", eventID, "done", n, "err", err.Error())
		return err
	}
	if n > 0 {
		r.log.Info("housekeeping did owed cleanups", "event", eventID, "done", n)
	}
	return nil
}

// sweepDue reports whether the tick scheduled at t sweeps: the one tick of
// the hour that falls in its first tick period.
func (r *Reconciler) sweepDue(t time.Time) bool {
	if r.tick <= 0 || r.tick >= time.Hour {
		return true
	}
	return t.Sub(t.Truncate(time.Hour)) < r.tick
}

// emitGauges writes the worker gauges as one embedded metric format line
// and logs them.
func (r *Reconciler) emitGauges(ctx context.Context, eventID string) error {
	if r.gauger == nil {
		return nil
	}
	live, stuck, err := r.gauger.WorkerGauges(ctx)
	if err != nil {
		r.log.Error("worker gauges not counted", "event", eventID, "err", err.Error())
		return err
	}
	if err := r.gauges.Emit(r.now(), metrics.Metric{Name: contract.MetricStuckWorkers, Unit: metrics.UnitCount, Value: float64(stuck)},
		metrics.Metric{Name: contract.MetricLiveWorkers, Unit: metrics.UnitCount, Value: float64(live)}); err != nil {
		r.log.Error("worker gauges not emitted", "event", eventID, "live", live, "stuck", stuck, "err", err.Error())
		return err
	}
	r.log.Info("worker gauges", "event", eventID, "live", live, "stuck", stuck)
	return nil
}

// sweep removes the idle doorbell queues within ctx's deadline. A failed
// or cut-short sweep is an error, so the function's error alarm tells the
// operator (a missing permission fails every hour); what it deleted stays
// deleted, and the next sweep goes on from there.
func (r *Reconciler) sweep(ctx context.Context, eventID string) error {
	if r.sweeper == nil {
		if r.gauger == nil {
			r.log.Warn("scheduled event dropped: this reconciler has no doorbell to sweep", "event", eventID)
		} else {
			r.log.Debug("no doorbell to sweep", "event", eventID)
		}
		return nil
	}
	n, err := r.sweeper.Sweep(ctx, r.idle)
	attrs := []any{"event", eventID, "idle", r.idle.String(), "queues", n}
	if err != nil {
		r.log.Error("doorbell sweep failed", append(attrs, "err", err.Error())...)
		return err
	}
	r.log.Info("doorbell sweep", attrs...)
	return nil
}
