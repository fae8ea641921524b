//go:build unix

package ecsrt_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parked workers on ECS (docs/parking.md): Resume starts one new task per
// parking, from the same task definition, once the parked task has ended.

// awaitStarts waits until handle's tasks' fake harnesses have started n
// times in all.
func (e *env) awaitStarts(t *testing.T, handle string, n int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for e.starts(handle) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the harnesses of %s started %d times, want %d", handle, e.starts(handle), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// task returns the stand-in's task arn.
func (e *env) task(t *testing.T, arn string) ecsstandin.TaskInfo {
	t.Helper()
	for _, ti := range e.srv.Tasks() {
		if ti.ARN == arn {
			return ti
		}
	}
	t.Fatalf("no task %s", arn)
	return ecsstandin.TaskInfo{}
}

// awaitTaskStopped waits until the stand-in shows task arn STOPPED.
func (e *env) awaitTaskStopped(t *testing.T, arn string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for e.task(t, arn).LastStatus != "STOPPED" {
		if time.Now().After(deadline) {
			t.Fatalf("task %s never stopped", arn)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestResumeStartsOneTaskPerParking(t *testing.T) {
	e := newEnv(t)
	e.srv.SetListLag(0)
	idx := &mapIndex{m: map[string]string{}}
	r := e.runtime(t, ecsrt.WithTaskIndex(idx))
	ctx := context.Background()

	launch := spec("w-parks", "exit") // its harness ends at once, as a parked one does
	if err := r.Start(ctx, launch); err != nil {
		t.Fatal(err)
	}
	// A warm process that read the parked task (and remembers it).
	warm := e.runtime(t, ecsrt.WithTaskIndex(idx))
	parked := e.awaitStopped(t, launch.Handle)
	awaitLiveness(t, warm, launch.Handle, service.LivenessExited)

	resume := spec("w-parks", "run")
	resume.IdempotencyToken = "t-resume-1"
	started, err := r.Resume(ctx, resume, 1)
	if err != nil || !started {
		t.Fatalf("Resume = %v, %v; want started", started, err)
	}
	tasks := e.tasksOf(launch.Handle)
	if len(tasks) != 2 {
		t.Fatalf("%d tasks after the resume, want 2", len(tasks))
	}
	e.awaitStarts(t, launch.Handle, 2)
	var next ecsstandin.TaskInfo
	for _, ti := range e.tasksOf(launch.Handle) {
		if ti.ARN != parked.ARN {
			next = ti
		}
	}
	env := next.Env
	if next.ClientToken == parked.ClientToken || len(next.ClientToken) > ecsrt.MaxClientToken {
		t.Errorf("the resumed task's clientToken %q (the launch's %q)", next.ClientToken, parked.ClientToken)
	}
	if env[contract.EnvParking] != "1" || env[contract.EnvWorkerBootstrap] != bootstrap.Code(resume.Token, resume.Handle) ||
		env[contract.EnvWorkerHandle] != resume.Handle || next.TaskDefinitionArn != parked.TaskDefinitionArn {
		t.Errorf("the resumed task's overrides = %v (definition %s), want parking 1 and the new credential's code",
			env, next.TaskDefinitionArn)
	}
	for k, v := range env {
		if strings.Contains(v, resume.Token) {
			t.Errorf("the resumed task's %s holds the worker's token", k)
		}
	}
	if arn, _, _ := idx.TaskARN(ctx, launch.Handle); arn != next.ARN {
		t.Errorf("the index names %s, want the resumed task %s", arn, next.ARN)
	}

	// Retries, here and in another process, converge on that task.
	for name, rt := range map[string]*ecsrt.Runtime{"same": r, "other": e.runtime(t, ecsrt.WithTaskIndex(idx))} {
		started, err := rt.Resume(ctx, resume, 1)
		if err != nil || started {
			t.Errorf("%s process: Resume again = %v, %v; want an earlier call's task", name, started, err)
		}
	}
	// A record that kept the parked task (the write of the new one's
	// ARN failed): the clientToken converges on the same task.
	if err := idx.SetTaskARN(ctx, launch.Handle, parked.ARN); err != nil {
		t.Fatal(err)
	}
	if _, err := e.runtime(t, ecsrt.WithTaskIndex(idx)).Resume(ctx, resume, 1); err != nil {
		t.Fatal(err)
	}
	if arn, _, _ := idx.TaskARN(ctx, launch.Handle); arn != next.ARN {
		t.Errorf("the index names %s after the retry, want the resumed task %s", arn, next.ARN)
	}
	if n := len(e.tasksOf(launch.Handle)); n != 2 {
		t.Fatalf("%d tasks after the retries, want 2", n)
	}

	// The warm process remembered the parked task: it reads the new one.
	awaitLiveness(t, warm, launch.Handle, service.LivenessLive)
	if l, err := warm.Livenesses(ctx, []string{launch.Handle}); err != nil || l[launch.Handle] != service.LivenessLive {
		t.Errorf("the warm process's Livenesses = %v, %v; want live", l, err)
	}
	// And a stop there stops the task that runs.
	warm2 := e.runtime(t, ecsrt.WithTaskIndex(idx))
	if err := idx.SetTaskARN(ctx, launch.Handle, parked.ARN); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, warm2, launch.Handle, service.LivenessExited) // remembers the parked task
	if err := idx.SetTaskARN(ctx, launch.Handle, next.ARN); err != nil {
		t.Fatal(err)
	}
	if err := warm2.Stop(ctx, launch.Handle); err != nil {
		t.Fatal(err)
	}
	e.awaitTaskStopped(t, next.ARN)
}

// TestResumeWaitsForTheParkedTask: while the task that parked still runs
// (its harness reported and is exiting), Resume refuses for now and
// starts nothing.
func TestResumeWaitsForTheParkedTask(t *testing.T) {
	e := newEnv(t)
	idx := &mapIndex{m: map[string]string{}}
	r := e.runtime(t, ecsrt.WithTaskIndex(idx))
	ctx := context.Background()
	launch := spec("w-slow", "run")
	if err := r.Start(ctx, launch); err != nil {
		t.Fatal(err)
	}
	resume := spec("w-slow", "run")
	resume.IdempotencyToken = "t-resume-slow"
	if _, err := r.Resume(ctx, resume, 1); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("Resume while the parked task runs = %v, want Unavailable", err)
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != 1 {
		t.Fatalf("%d RunTask calls, want the launch's only", n)
	}
	if err := r.StopTask(ctx, idx.m[launch.Handle]); err != nil {
		t.Fatal(err)
	}
	e.awaitStopped(t, launch.Handle)
	if started, err := r.Resume(ctx, resume, 1); err != nil || !started {
		t.Fatalf("Resume once the parked task ended = %v, %v", started, err)
	}
	for _, s := range []struct {
		spec service.WorkerSpec
		n    int
	}{{service.WorkerSpec{Token: "x"}, 1}, {service.WorkerSpec{Handle: "w-1"}, 1}, {resume, 0}} {
		if _, err := r.Resume(ctx, s.spec, s.n); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Resume(%+v, %d) = %v, want invalid", s.spec.Handle, s.n, err)
		}
	}
}

// TestParkedTaskEndSettlesNothing: the real service over the ECS runtime
// and the stand-in, its events through the reconciler. The parked task's
// STOPPED event settles nothing; the reply starts a new task, recorded on
// the worker; a redelivered STOPPED event of the parked task still
// settles nothing, and the resumed task's own STOPPED event (it ended
// without a report) settles the worker failed.
func TestParkedTaskEndSettlesNothing(t *testing.T) {
	e := newEnv(t)
	e.srv.SetListLag(0)
	st := memstore.New()
	r := e.runtime(t, ecsrt.WithTaskIndex(service.NewTaskIndex(st)))
	le := newLaunchEnv(t, r, st, newClock(), nil)
	rec := reconcile.New(le.svc, st, reconcile.WithStopper(r), reconcile.WithMetrics(io.Discard))
	ctx := context.Background()
	call := launchCall("k-park")
	call.Request.Effect.Effect = json.RawMessage(
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b","branch":"galley/test/run"}`)
	raw, err := le.svc.Apply(ctx, call, le.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var rc protocol.Receipt
	if err := json.Unmarshal(raw, &rc); err != nil {
		t.Fatal(err)
	}
	worker := rc.CreatedHandle(protocol.KindWorker)
	e.awaitStarted(t, worker)
	if err := le.svc.WorkerReady(ctx, worker, "test"); err != nil {
		t.Fatal(err)
	}
	q, err := le.svc.WorkerPost(ctx, worker, workerapi.PostRequest{Kind: protocol.MsgQuestion, Subject: "which?", Body: "v1 or v2?"})
	if err != nil {
		t.Fatal(err)
	}
	if err := le.svc.WorkerPark(ctx, worker, workerapi.ParkRequest{Parking: 1, State: json.RawMessage(`{"v":1}`)}); err != nil {
		t.Fatalf("park: %v", err)
	}
	parked := le.workers(t)[worker].Worker.TaskARN
	// Its harness ends (here: its task is stopped), and every event of the
	// task reaches the reconciler.
	if err := r.StopTask(ctx, parked); err != nil {
		t.Fatal(err)
	}
	e.awaitStopped(t, worker)
	feed := func(task string) int {
		t.Helper()
		n := 0
		for _, b := range e.srv.Events() {
			c, err := ecsrt.ParseTaskStateChange(b)
			if err != nil || c.TaskARN != task {
				continue
			}
			if err := rec.HandleEvent(ctx, b); err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	if feed(parked) == 0 {
		t.Fatal("no event of the parked task")
	}
	obs, err := le.svc.Observe(ctx, rc.Created[0])
	if err != nil || obs.State != protocol.StateAwaitingReply {
		t.Fatalf("after the parked task's end: %+v, %v; want awaiting-reply", obs, err)
	}
	reply := launchCall("k-reply")
	reply.Request.Effect.Effect = json.RawMessage(`{"type":"reply-to-worker","worker":{"kind":"worker","backend":"galley","handle":"` +
		worker + `"},"question":"` + q.ID + `","body":"v2"}`)
	if _, err := le.svc.Apply(ctx, reply, le.clock.Now()); err != nil {
		t.Fatal(err)
	}
	w := le.workers(t)[worker].Worker
	if w.TaskARN == parked || w.TaskARN == "" || w.Park == nil || !w.Park.Started {
		t.Fatalf("after the reply the worker's task is %s (parked %s), park %+v", w.TaskARN, parked, w.Park)
	}
	resumed := w.TaskARN
	e.awaitStarts(t, worker, 2)
	// A redelivery of the parked task's events changes nothing.
	feed(parked)
	if obs, _ := le.svc.Observe(ctx, rc.Created[0]); obs.State != protocol.StateStarting {
		t.Fatalf("after a redelivered event of the parked task: %+v, want starting", obs)
	}
	// The resumed task ends without a report: the worker settles failed.
	if err := r.StopTask(ctx, resumed); err != nil {
		t.Fatal(err)
	}
	e.awaitTaskStopped(t, resumed)
	feed(resumed)
	obs, err = le.svc.Observe(ctx, rc.Created[0])
	if err != nil || obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeFailed {
		t.Fatalf("after the resumed task's end: %+v, %v; want settled failed", obs, err)
	}
}
