// Command reconciler is galley's reconciler Lambda function: EventBridge
// delivers it the worker cluster's ECS "Task State Change" events, and it
// settles workers whose tasks stopped without a report (package reconcile).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/reconcile"
)

func main() {
	app := lambdaapp.MustFromEnv(lambdaapp.Reconciler)
	opts := []reconcile.Option{reconcile.WithLogger(app.Log), reconcile.WithContainer(app.Config.WorkerContainer)}
	if s, ok := app.Runtime.(reconcile.Stopper); ok {
		opts = append(opts, reconcile.WithStopper(s))
	}
	r := reconcile.New(app.Service, app.Store, opts...)
	lambda.Start(lambdaapp.Invocation(r.HandleEvent))
}
