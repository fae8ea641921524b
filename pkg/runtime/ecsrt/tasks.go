package ecsrt

import (
	"context"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// tasksOf returns handle's task: the one this runtime or the index
// remembers, else those ListTasks finds by startedBy. ECS takes startedBy
// only as the one filter of a ListTasks (the API reference: "it must be the
// only filter that you use"), so the listing is of the tasks whose desired
// status is RUNNING, ECS's default: a stopped task is found only through
// the memo or the index, and callers read what DescribeTasks says of the
// tasks listed.
func (r *Runtime) tasksOf(ctx context.Context, handle string) ([]string, error) {
	if arn, ok := r.remembered(ctx, handle); ok {
		return []string{arn}, nil
	}
	out, err := r.ecs.ListTasks(ctx, &ecs.ListTasksInput{
		Cluster: aws.String(r.cfg.Cluster), StartedBy: aws.String(StartedBy(handle)),
	})
	if err != nil {
		return nil, apiError("ListTasks", err)
	}
	if len(out.TaskArns) == 1 {
		r.memoPut(handle, out.TaskArns[0])
	}
	return out.TaskArns, nil
}

// currentTasks returns handle's task as the index records it now, read
// afresh, with the one this runtime remembers when it differs: another
// process may have resumed the worker in a new task since this one
// remembered the parked one (docs/parking.md). Without either, those
// ListTasks finds by startedBy. Stop and Resume read it.
func (r *Runtime) currentTasks(ctx context.Context, handle string) ([]string, error) {
	var arns []string
	if r.index != nil {
		arn, ok, err := r.index.TaskARN(ctx, handle)
		switch {
		case err != nil:
			r.log.Warn("task index unreadable", "handle", handle, "err", err)
		case ok && arn != "":
			arns = append(arns, arn)
		}
	}
	if arn, ok := r.memoGet(handle); ok && !slices.Contains(arns, arn) {
		arns = append(arns, arn)
	}
	if len(arns) > 0 {
		return arns, nil
	}
	return r.tasksOf(ctx, handle)
}

// newerTask returns the task the index records for handle when it is none
// of arns (a worker resumed in a new task by another process since this
// one remembered its earlier task), and remembers it; "" otherwise.
// Liveness asks it when the task it remembers does not run.
func (r *Runtime) newerTask(ctx context.Context, handle string, arns []string) string {
	if r.index == nil {
		return ""
	}
	arn, ok, err := r.index.TaskARN(ctx, handle)
	if err != nil || !ok || arn == "" || slices.Contains(arns, arn) {
		return ""
	}
	r.memoPut(handle, arn)
	return arn
}

// describe returns the tasks ECS shows among arns; a task it reports
// MISSING is left out.
func (r *Runtime) describe(ctx context.Context, arns []string) ([]types.Task, error) {
	if len(arns) > 100 {
		arns = arns[:100]
	}
	out, err := r.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(r.cfg.Cluster), Tasks: arns})
	if err != nil {
		return nil, apiError("DescribeTasks", err)
	}
	return out.Tasks, nil
}

// remember records handle's task here and in the index. A failed index
// write costs a ListTasks later, nothing more.
func (r *Runtime) remember(ctx context.Context, handle, arn string) {
	r.memoPut(handle, arn)
	if r.index != nil {
		if err := r.index.SetTaskARN(ctx, handle, arn); err != nil {
			r.log.Warn("cannot record the worker's task", "handle", handle, "task", arn, "err", err)
		}
	}
}

// remembered returns the task this runtime or its index has for handle,
// without asking ECS.
func (r *Runtime) remembered(ctx context.Context, handle string) (string, bool) {
	if handle == "" {
		return "", false
	}
	if arn, ok := r.memoGet(handle); ok {
		return arn, true
	}
	if r.index == nil {
		return "", false
	}
	arn, ok, err := r.index.TaskARN(ctx, handle)
	if err != nil {
		r.log.Warn("task index unreadable; listing tasks", "handle", handle, "err", err)
		return "", false
	}
	if ok && arn != "" {
		r.memoPut(handle, arn)
		return arn, true
	}
	return "", false
}

func (r *Runtime) memoGet(handle string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	arn, ok := r.memo[handle]
	return arn, ok
}

func (r *Runtime) memoPut(handle, arn string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.memo[handle]; !ok && len(r.memo) >= r.memoMax {
		// Forget any one: a forgotten task is found again with ListTasks.
		for k := range r.memo {
			delete(r.memo, k)
			break
		}
	}
	r.memo[handle] = arn
}
