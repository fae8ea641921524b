package ecsrt

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Stop stops the worker's task with StopTask. A worker with no task
// (never started, or not yet listed) and a stopped task succeed: ECS
// answers StopTask of a stopped task with the task.
func (r *Runtime) Stop(ctx context.Context, handle string) error {
	const op = galleyerr.Op("ecsrt.stop")
	if handle == "" {
		return galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	}
	// Afresh: the worker may have been resumed in a new task elsewhere.
	arns, err := r.currentTasks(ctx, handle)
	if err != nil {
		return wrap(op, err)
	}
	for _, arn := range arns {
		if err := r.StopTask(ctx, arn); err != nil {
			return wrap(op, err)
		}
	}
	if len(arns) > 0 {
		r.log.Info("worker task stopping", "handle", handle, "tasks", arns)
	}
	return nil
}

// StopTask stops one task by its ARN, as the reconciler does for a task that
// appears after its worker settled. An unknown or stopped task succeeds.
func (r *Runtime) StopTask(ctx context.Context, taskARN string) error {
	_, err := r.ecs.StopTask(ctx, &ecs.StopTaskInput{
		Cluster: aws.String(r.cfg.Cluster), Task: aws.String(taskARN), Reason: aws.String(stopReason),
	})
	if err == nil || taskNotFound(err) {
		return nil
	}
	return apiError("StopTask", err)
}
