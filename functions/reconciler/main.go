// Command reconciler is galley's reconciler Lambda function: EventBridge
// delivers it the worker cluster's ECS "Task State Change" events, and it
// settles workers whose tasks stopped without a report (package reconcile);
// an hourly scheduled event has it delete the doorbell queues idle for
// longer than GALLEY_QUEUE_IDLE_HOURS (default 24).
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

func main() {
	app := lambdaapp.MustFromEnv(lambdaapp.Reconciler)
	lambda.Start(app.ReconcilerHandler())
}
