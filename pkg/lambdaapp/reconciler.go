package lambdaapp

import "github.com/galley-run/galley/pkg/reconcile"

// NewReconciler is the reconciler function's event handler on the App: it
// settles workers from task state changes, stops a settled worker's stray
// task when the runtime can stop tasks, and on the hourly scheduled event
// sweeps the doorbell queues unused for Config.QueueIdle when the doorbell
// can sweep (the SQS doorbell; localbell keeps no queues).
func (a *App) NewReconciler() *reconcile.Reconciler {
	opts := []reconcile.Option{reconcile.WithLogger(a.Log), reconcile.WithContainer(a.Config.WorkerContainer)}
	if s, ok := a.Runtime.(reconcile.Stopper); ok {
		opts = append(opts, reconcile.WithStopper(s))
	}
	if s, ok := a.Doorbell.(reconcile.Sweeper); ok {
		opts = append(opts, reconcile.WithSweeper(s, a.Config.QueueIdle))
	}
	return reconcile.New(a.Service, a.Store, opts...)
}
