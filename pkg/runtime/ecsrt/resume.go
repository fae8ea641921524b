package ecsrt

import (
	"context"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
)

// Resume starts the task that resumes parking n of spec.Handle
// (service.Resumer, docs/parking.md): a RunTask of the same task
// definition with the launch's overrides, spec.Token's bootstrap code
// (the resumed harness's own credential) and the parking's number
// (contract.EnvParking), under a clientToken of its own
// (spec.IdempotencyToken, which the service derives from the launch's key
// and n), so that every retry, here or in another process, converges on
// one task per parking. The new task becomes the handle's task (the memo
// and the index), which Liveness and Stop then read.
//
// started is false when an earlier call had started this parking's task:
// the handle's task already carries parking n, or ECS answered the
// clientToken's task as already ended (the service then asks Liveness
// whether it runs). While the task that parked still runs (the harness
// reported and is exiting), Resume answers Unavailable: the service tries
// again when that task's STOPPED event reaches the reconciler
// (WorkerExited), so that two harnesses never run the worker at once.
func (r *Runtime) Resume(ctx context.Context, spec service.WorkerSpec, n int) (started bool, err error) {
	const op = galleyerr.Op("ecsrt.resume")
	switch {
	case spec.Handle == "":
		return false, galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	case spec.Token == "":
		return false, galleyerr.E(op, galleyerr.Invalid, "no worker token")
	case n < 1:
		return false, galleyerr.E(op, galleyerr.Invalid, "a parking's number is at least 1")
	}
	arns, err := r.currentTasks(ctx, spec.Handle)
	if err != nil {
		return false, wrap(op, err)
	}
	if len(arns) > 0 {
		tasks, err := r.describe(ctx, arns)
		if err != nil {
			return false, wrap(op, err)
		}
		for _, t := range tasks {
			if parkingOf(t, r.cfg.Container) == n {
				// This parking's task: an earlier call started it.
				r.remember(ctx, spec.Handle, aws.ToString(t.TaskArn))
				return false, nil
			}
		}
		// A task ECS no longer shows stopped long ago.
		if fold(tasks) == service.LivenessLive {
			return false, galleyerr.E(op, galleyerr.Unavailable, "the task that parked worker "+strconv.Quote(spec.Handle)+" has not ended yet")
		}
	}
	idem := spec.IdempotencyToken
	if idem == "" {
		idem = "handle:" + spec.Handle
	}
	// Never the launch's clientToken, whatever the caller passed.
	idem += "\x00resume\x00" + strconv.Itoa(n)
	in := r.runTaskInput(spec, n)
	in.ClientToken = aws.String(ClientToken(idem))
	arn, status, err := r.runTask(ctx, in, bootstrap.Code(spec.Token, spec.Handle))
	if err != nil {
		return false, wrap(op, err)
	}
	r.remember(ctx, spec.Handle, arn)
	if LivenessOf(status) == service.LivenessExited {
		// ECS answered the task an earlier call made, and it has ended.
		return false, nil
	}
	r.log.Info("worker task started to resume it", "handle", spec.Handle, "parking", n, "task", arn)
	return true, nil
}

// parkingOf is the parking a task resumes, from its container overrides:
// 0 for a launch's task.
func parkingOf(t types.Task, container string) int {
	if t.Overrides == nil {
		return 0
	}
	for _, co := range t.Overrides.ContainerOverrides {
		if aws.ToString(co.Name) != container {
			continue
		}
		for _, kv := range co.Environment {
			if aws.ToString(kv.Name) == contract.EnvParking {
				n, err := strconv.Atoi(aws.ToString(kv.Value))
				if err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return 0
}
