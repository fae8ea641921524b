package lambdaapp

import (
	"context"
	"encoding/json"
	"os"

	"github.com/galley-run/galley/pkg/reconcile"
)

// NewReconciler is the reconciler function's event handler on the App: it
// settles workers from task state changes, stops a settled worker's stray
// task when the runtime can stop tasks, and on every housekeeping tick (the
// 5-minute scheduled event) writes the worker gauges as an embedded metric
// format line on the function's stdout, where CloudWatch Logs extracts
// them (with the function's JSON log format a JSON object line is kept as
// it is). The tick in each hour's first five minutes also sweeps the
// doorbell queues unused for Config.QueueIdle when the doorbell can sweep
// (the SQS doorbell; localbell keeps no queues). Each tick also settles
// the workers whose task is gone without a settle (service.SettleLost),
// and does again the cleanups a record still owes (service.RetryCleanups).
// opts apply after these,
// so a test can send the metrics elsewhere.
func (a *App) NewReconciler(opts ...reconcile.Option) *reconcile.Reconciler {
	all := []reconcile.Option{reconcile.WithLogger(a.Log), reconcile.WithContainer(a.Config.WorkerContainer),
		reconcile.WithGauges(a.Service, a.Config.House), reconcile.WithMetrics(os.Stdout)}
	if s, ok := a.Runtime.(reconcile.Stopper); ok {
		// A runtime that can stop tasks can read them: housekeeping
		// settles the workers whose task is gone (a lost STOPPED event).
		// It also retries the cleanups the records owe (a failed
		// stop, a worktree removal whose task failed to start).
		all = append(all, reconcile.WithStopper(s), reconcile.WithLostSettler(a.Service), reconcile.WithCleaner(a.Service))
	}
	if a.Events != nil {
		all = append(all, reconcile.WithEvents(a.Events))
	}
	if s, ok := a.Doorbell.(reconcile.Sweeper); ok {
		all = append(all, reconcile.WithSweeper(s, a.Config.QueueIdle))
	}
	return reconcile.New(a.Service, a.Store, append(all, opts...)...)
}

// ReconcilerHandler is the reconciler function's handler: NewReconciler's
// HandleEvent within the invocation's deadline (Invocation), then the
// events it recorded flushed (FlushEvents).
func (a *App) ReconcilerHandler(opts ...reconcile.Option) func(context.Context, json.RawMessage) error {
	h := Invocation(a.NewReconciler(opts...).HandleEvent)
	return func(ctx context.Context, ev json.RawMessage) error {
		err := h(ctx, ev)
		a.FlushEvents(ctx)
		return err
	}
}
