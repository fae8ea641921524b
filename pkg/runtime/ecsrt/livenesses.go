package ecsrt

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Liveness reads the task's lastStatus: provisioning to running is live,
// deactivating to stopped has exited. A task ECS does not show (just
// launched and not yet visible, or stopped long ago and forgotten) is
// unknown, never exited.
func (r *Runtime) Liveness(ctx context.Context, handle string) (service.Liveness, error) {
	const op = galleyerr.Op("ecsrt.liveness")
	if handle == "" {
		return service.LivenessUnknown, galleyerr.E(op, galleyerr.Invalid, "no worker handle")
	}
	arns, err := r.tasksOf(ctx, handle)
	if err != nil || len(arns) == 0 {
		return service.LivenessUnknown, wrapNil(op, err)
	}
	tasks, err := r.describe(ctx, arns)
	if err != nil {
		return service.LivenessUnknown, wrap(op, err)
	}
	l := fold(tasks)
	if l != service.LivenessLive {
		// The task remembered may be one a resume replaced since.
		if arn := r.newerTask(ctx, handle, arns); arn != "" {
			if tasks, err = r.describe(ctx, []string{arn}); err != nil {
				return service.LivenessUnknown, wrap(op, err)
			}
			l = fold(tasks)
		}
	}
	return l, nil
}

// maxDescribe is how many tasks one DescribeTasks names, ECS's limit.
const maxDescribe = 100

// listEach is how many handles of unknown task Livenesses finds one by one
// (ListTasks by startedBy, one or two calls each); beyond it, one listing
// of the task definition's tasks costs less.
const listEach = 2

// Livenesses reads many workers' tasks at once, for the inventory: one
// DescribeTasks per 100 tasks, whatever the number of handles. A task this
// runtime (or its index) remembers is described directly; the others are
// found by their startedBy with ListTasks when they are at most listEach,
// or else by one listing of the worker task definition's running and
// stopped tasks, described with the rest. A task ECS no longer shows reads
// Unknown, as in Liveness. On error, the handles whose tasks could not be
// read are left out of the map.
func (r *Runtime) Livenesses(ctx context.Context, handles []string) (map[string]service.Liveness, error) {
	const op = galleyerr.Op("ecsrt.livenesses")
	out := make(map[string]service.Liveness, len(handles))
	taskARNs := map[string][]string{} // handle -> its task ARNs
	var unknown []string              // handles whose task is not remembered
	for _, h := range handles {
		switch arn, ok := r.remembered(ctx, h); {
		case h == "":
			out[h] = service.LivenessUnknown
		case ok:
			taskARNs[h] = []string{arn}
		default:
			unknown = append(unknown, h)
		}
	}
	var failed failures
	var listed []string                // ARNs of the task definition's tasks, when listed
	byStartedBy := map[string]string{} // startedBy -> an unknown handle
	if len(unknown) <= listEach {
		for _, h := range unknown {
			arns, err := r.tasksOf(ctx, h)
			switch {
			case err != nil:
				failed.add(1, err)
			case len(arns) == 0:
				out[h] = service.LivenessUnknown
			default:
				taskARNs[h] = arns
			}
		}
	} else {
		var err error
		if listed, err = r.listFamily(ctx); err != nil {
			failed.add(len(unknown), err)
		} else {
			for _, h := range unknown {
				byStartedBy[StartedBy(h)] = h
				out[h] = service.LivenessUnknown // unless a task of it is found
			}
		}
	}

	// Describe every task once, in chunks, and fold each handle's.
	owner := map[string]string{} // ARN -> remembered handle
	var arns []string
	for h, as := range taskARNs {
		for _, a := range as {
			if _, dup := owner[a]; !dup {
				arns = append(arns, a)
			}
			owner[a] = h
		}
	}
	for _, a := range listed {
		if _, dup := owner[a]; !dup {
			owner[a] = ""
			arns = append(arns, a)
		}
	}
	seen := map[string][]types.Task{} // handle -> its tasks ECS shows
	bad := map[string]bool{}          // handles with a task in a failed chunk
	for start := 0; start < len(arns); start += maxDescribe {
		chunk := arns[start:min(start+maxDescribe, len(arns))]
		tasks, err := r.describe(ctx, chunk)
		if err != nil {
			var hs []string
			for _, a := range chunk {
				hs = append(hs, owner[a])
			}
			if len(listed) > 0 {
				// Any unknown handle's task may be in this chunk.
				hs = slices.AppendSeq(hs, maps.Values(byStartedBy))
			}
			n := 0
			for _, h := range hs {
				if h != "" && !bad[h] {
					bad[h] = true
					n++
				}
			}
			failed.add(n, err)
			continue
		}
		for _, t := range tasks {
			h := owner[aws.ToString(t.TaskArn)]
			if h == "" {
				if h = byStartedBy[aws.ToString(t.StartedBy)]; h == "" {
					continue // a task of no handle asked about
				}
			}
			seen[h] = append(seen[h], t)
		}
	}
	for h, as := range taskARNs {
		out[h] = fold(seen[h])
		if out[h] != service.LivenessLive && !bad[h] {
			// The task remembered may be one a resume replaced since
			// (rare: one more read and describe for that worker).
			if arn := r.newerTask(ctx, h, as); arn != "" {
				tasks, err := r.describe(ctx, []string{arn})
				if err != nil {
					failed.add(1, err)
					bad[h] = true
					continue
				}
				out[h] = fold(tasks)
			}
		}
	}
	for _, h := range byStartedBy {
		if ts := seen[h]; len(ts) > 0 {
			out[h] = fold(ts)
			if len(ts) == 1 {
				r.memoPut(h, aws.ToString(ts[0].TaskArn))
			}
		}
	}
	for h := range bad {
		delete(out, h)
	}
	return out, failed.err(op)
}

// fold is a worker's liveness from its tasks: live while any runs (one
// task per handle; a second would be a bug), exited once one has ended,
// unknown when ECS shows none.
func fold(tasks []types.Task) service.Liveness {
	l := service.LivenessUnknown
	for _, t := range tasks {
		switch LivenessOf(aws.ToString(t.LastStatus)) {
		case service.LivenessLive:
			return service.LivenessLive
		case service.LivenessExited:
			l = service.LivenessExited
		}
	}
	return l
}

// listFamily lists the ARNs of the worker task definitions' tasks that ECS
// shows (every family's: the default's and each agent family's), running
// then stopped, every page.
func (r *Runtime) listFamily(ctx context.Context) ([]string, error) {
	var arns []string
	for _, family := range r.taskFamilies() {
		for _, d := range []types.DesiredStatus{types.DesiredStatusRunning, types.DesiredStatusStopped} {
			in := &ecs.ListTasksInput{Cluster: aws.String(r.cfg.Cluster), Family: aws.String(family),
				DesiredStatus: d, MaxResults: aws.Int32(100)}
			for {
				out, err := r.ecs.ListTasks(ctx, in)
				if err != nil {
					return nil, apiError("ListTasks", err)
				}
				arns = append(arns, out.TaskArns...)
				if aws.ToString(out.NextToken) == "" {
					break
				}
				in.NextToken = out.NextToken
			}
		}
	}
	return arns, nil
}

// taskFamily is the family of a task definition given as family,
// family:revision or ARN.
func taskFamily(td string) string {
	if _, after, ok := strings.Cut(td, ":task-definition/"); ok {
		td = after
	}
	family, _, _ := strings.Cut(td, ":")
	return family
}

// failures gathers the errors of a batch read: how many handles went
// unanswered and the first cause.
type failures struct {
	n     int
	first error
}

func (f *failures) add(n int, err error) {
	f.n += n
	if f.first == nil {
		f.first = err
	}
}

func (f *failures) err(op galleyerr.Op) error {
	if f.first == nil {
		return nil
	}
	return galleyerr.E(op, strconv.Itoa(f.n)+" workers unverifiable", f.first)
}
