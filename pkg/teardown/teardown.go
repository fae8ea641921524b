// Package teardown stops a deployment's worker tasks before its stack is
// deleted: CloudFormation cannot delete a cluster that still has tasks, nor
// the subnets and security groups their network interfaces hold, so
// `make destroy` (docs/deploy.md, Tearing down) stops every task of the
// worker cluster through the ECS API and waits until ECS reports each one
// stopped.
package teardown

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// ECS is what StopWorkers calls; *ecs.Client has it.
type ECS interface {
	ecs.ListTasksAPIClient
	ecs.DescribeTasksAPIClient
	StopTask(ctx context.Context, in *ecs.StopTaskInput, optFns ...func(*ecs.Options)) (*ecs.StopTaskOutput, error)
}

// Reason is the stopped reason StopWorkers gives each task.
const Reason = "galley: the stack is being torn down"

// describeBatch is DescribeTasks' limit of tasks per call.
const describeBatch = 100

// Options tune StopWorkers; the zero value takes the defaults.
type Options struct {
	// Wait bounds the whole wait for the tasks to stop; default 15 min (a
	// worker's stopTimeout is 120 s, and ECS then needs its network
	// interface detached).
	Wait time.Duration
	// Poll is the wait between DescribeTasks rounds; default 6 s, as the
	// SDK's waiter polls.
	Poll time.Duration
}

// StopWorkers stops every task of cluster that is not stopped yet and
// returns once ECS reports all of them STOPPED (and those that were
// already stopping), with the number it stopped. Tasks started meanwhile (a launch that raced the teardown) are
// found by the next listing and stopped too: it returns only when a
// listing finds none left.
func StopWorkers(ctx context.Context, api ECS, cluster string, o Options) (int, error) {
	op := galleyerr.Op("teardown.StopWorkers")
	if cluster == "" {
		return 0, galleyerr.E(op, galleyerr.Invalid, "no cluster named")
	}
	if o.Wait <= 0 {
		o.Wait = 15 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 6 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	stopped, stopping := map[string]bool{}, map[string]bool{}
	for {
		// ListTasks lists RUNNING (the default desired status) tasks,
		// which includes PENDING ones; a task StopTask was sent to is
		// desired STOPPED and no longer listed, so each round lists what
		// is new.
		var arns []string
		p := ecs.NewListTasksPaginator(api, &ecs.ListTasksInput{Cluster: aws.String(cluster)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return len(stopped), galleyerr.E(op, galleyerr.Unavailable, "listing the cluster's tasks", err)
			}
			arns = append(arns, page.TaskArns...)
		}
		if len(arns) == 0 {
			break
		}
		fresh := 0
		for _, arn := range arns {
			if !stopped[arn] {
				fresh++
			}
			if _, err := api.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String(arn), Reason: aws.String(Reason)}); err != nil {
				return len(stopped), galleyerr.E(op, galleyerr.Unavailable, "stopping task "+arn, err)
			}
			stopped[arn] = true
		}
		if fresh == 0 {
			// Listed again though already stopped (ListTasks is
			// eventually consistent): give it a poll before the next.
			select {
			case <-ctx.Done():
				return len(stopped), galleyerr.E(op, galleyerr.Unavailable, "the cluster still lists stopped tasks", ctx.Err())
			case <-time.After(o.Poll):
			}
		}
	}
	// Wait until every task is STOPPED, those it stopped and those already
	// on their way (desired STOPPED: a worker cancelled just before, whose
	// network interface is still attached). Desired STOPPED is only the
	// request.
	p := ecs.NewListTasksPaginator(api, &ecs.ListTasksInput{Cluster: aws.String(cluster), DesiredStatus: types.DesiredStatusStopped})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return len(stopped), galleyerr.E(op, galleyerr.Unavailable, "listing the cluster's stopping tasks", err)
		}
		for _, arn := range page.TaskArns {
			if _, ok := stopped[arn]; !ok {
				stopping[arn] = true
			}
		}
	}
	var all []string
	for arn := range stopped {
		all = append(all, arn)
	}
	for arn := range stopping {
		all = append(all, arn)
	}
	for len(all) > 0 {
		n := min(describeBatch, len(all))
		batch := all[:n]
		w := ecs.NewTasksStoppedWaiter(api, func(w *ecs.TasksStoppedWaiterOptions) {
			w.MinDelay, w.MaxDelay = o.Poll, o.Poll
		})
		deadline, _ := ctx.Deadline()
		if err := w.Wait(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: batch}, time.Until(deadline)); err != nil {
			return len(stopped), galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("waiting for %d tasks to stop", len(batch)), err)
		}
		all = all[n:]
	}
	return len(stopped), nil
}
