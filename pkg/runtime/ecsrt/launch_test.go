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
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// The real service over the real ECS runtime and the stand-in: what a
// launch answers when RunTask fails as ECS and Fargate fail it (issue 20,
// item 9 and 10).

// launchEnv is a service whose runtime is r, on st, with clock.
type launchEnv struct {
	svc   *service.Service
	st    store.Store
	clock *servicetest.ManualClock
}

func newLaunchEnv(t *testing.T, r *ecsrt.Runtime, st store.Store, clock *servicetest.ManualClock, mod func(*service.Config)) *launchEnv {
	t.Helper()
	te := servicetest.New(t, func(c *service.Config) {
		c.WorkspaceRoot = "/workspace"
		if mod != nil {
			mod(c)
		}
	}, service.WithRuntime(r), service.WithStore(st), service.WithClock(clock))
	return &launchEnv{svc: te.Service, st: st, clock: clock}
}

func launchCall(key string) protocol.EffectCall {
	return protocol.EffectCall{Run: "run-1", Request: protocol.EffectRequest{
		House: "origin89", Backend: "galley", Credential: "galley-token", Task: "issue-20", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(
			`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b"}`)},
	}}
}

func (e *launchEnv) apply(key string) (protocol.Receipt, error) {
	raw, err := e.svc.Apply(context.Background(), launchCall(key), e.clock.Now())
	var r protocol.Receipt
	if err == nil {
		err = json.Unmarshal(raw, &r)
	}
	return r, err
}

// workers lists the worker records: handle to record.
func (e *launchEnv) workers(t *testing.T) map[string]store.Resource {
	t.Helper()
	all, err := e.st.ListResources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.Resource{}
	for _, r := range all {
		if r.Kind == protocol.KindWorker {
			out[r.Handle] = r
		}
	}
	return out
}

func (e *launchEnv) live(t *testing.T) int {
	t.Helper()
	live, _, err := e.svc.WorkerGauges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func newClock() *servicetest.ManualClock {
	return servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
}

// A fresh account whose Fargate vCPU quota is zero: the launch answers a
// definite not-applied rate-limited (with a long retry hint), its worker
// is undone, and it never counts against maxWorkers: the next launch meets
// the quota again, not the cap.
func TestLaunchFreshAccountVCPUQuotaZero(t *testing.T) {
	e := newStandinEnv(t, fakeHarness, nil, ecsstandin.WithVCPUQuota(0))
	le := newLaunchEnv(t, e.runtime(t), memstore.New(), newClock(), func(c *service.Config) { c.MaxWorkers = 1 })
	for _, key := range []string{"k-fresh-1", "k-fresh-2"} {
		_, err := le.apply(key)
		ge := galleyerr.As(err)
		if !galleyerr.Is(galleyerr.RateLimited, err) || ge.RetryAfterSeconds == 0 ||
			!strings.Contains(err.Error(), ecsstandin.ReasonVCPUQuota) {
			t.Fatalf("%s: %v, want rate-limited by the vCPU quota with a retry hint", key, err)
		}
	}
	for h, w := range le.workers(t) {
		if !w.Released {
			t.Errorf("worker %s stays %s, unreleased", h, w.Worker.State)
		}
	}
	if n := le.live(t); n != 0 {
		t.Errorf("%d workers count against maxWorkers, want 0", n)
	}
	if n := len(e.srv.Tasks()); n != 0 {
		t.Errorf("%d tasks, want none", n)
	}
}

// EC2 throttling, which ECS passes on inside an InvalidParameterException,
// is throttling: retried, then rate-limited and undone.
func TestLaunchEC2ThrottlingIsRateLimited(t *testing.T) {
	e := newEnv(t)
	e.srv.Inject(ecsstandin.FaultEC2Throttled)
	le := newLaunchEnv(t, e.runtime(t), memstore.New(), newClock(), nil)
	if _, err := le.apply("k-throttled"); !galleyerr.Is(galleyerr.RateLimited, err) {
		t.Fatalf("launch: %v, want rate-limited", err)
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != ecsrt.DefaultAttempts {
		t.Errorf("%d RunTask calls, want %d", n, ecsrt.DefaultAttempts)
	}
	if n := le.live(t); n != 0 {
		t.Errorf("%d live workers after an undone launch", n)
	}
}

// A launch whose first attempt ended uncertain (a server fault: a task may
// exist) and whose retry is refused for good (no CPU to place it, or a
// refusal of the request) ends definite: applied, its worker settled
// failed, never starting for ever.
func TestLaunchResumedRefusalSettlesFailed(t *testing.T) {
	for name, refusal := range map[string]ecsstandin.Fault{
		"capacity": ecsstandin.FaultNoCPU,
		"refused": {Op: ecsstandin.OpRunTask, Code: "ClientException",
			Message: "Fargate requires task definition to have execution role ARN to support ECR images."},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			le := newLaunchEnv(t, e.runtime(t), memstore.New(), newClock(), func(c *service.Config) { c.MaxWorkers = 1 })
			e.srv.Inject(ecsstandin.Fault{Op: ecsstandin.OpRunTask, Code: "ServerException", Message: "boom", Status: 500,
				Times: ecsrt.DefaultAttempts})
			if _, err := le.apply("k-resumed"); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first attempt: %v, want uncertain", err)
			}
			e.srv.Inject(refusal)
			r, err := le.apply("k-resumed")
			if err != nil {
				t.Fatalf("retry: %v, want the launch applied with its worker failed", err)
			}
			obs, err := le.svc.Observe(context.Background(), r.Created[0])
			if err != nil || obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeFailed {
				t.Fatalf("observe = %+v, %v; want settled failed", obs, err)
			}
			if n := le.live(t); n != 0 {
				t.Errorf("%d workers count against maxWorkers, want 0", n)
			}
		})
	}
}

// A launch retried 25 hours after its first attempt started the task
// (kitchn's retry after a lost answer, served by another function): ECS
// has forgotten the clientToken, and the bootstrap code has expired. The
// retry calls RunTask no more: it settles the worker failed and stops the
// first task, where it would have started a second task that could never
// get its credential.
func TestLaunchRetriedAfterTheTokenWindow(t *testing.T) {
	clock := newClock()
	e := newStandinEnv(t, fakeHarness, nil, ecsstandin.WithClock(clock.Now))
	e.srv.SetListLag(0)
	fs := faultstore.New(memstore.New())
	first := newLaunchEnv(t, e.runtime(t), fs, clock, nil)
	// The receipt's writes (and the one that would end the lease) fail: the
	// claim stays in flight, its task started.
	fs.Inject(faultstore.Fault{Method: "PutEffect", Key: "k-day", Skip: 2, When: faultstore.Before, Times: 4})
	if _, err := first.apply("k-day"); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("first attempt: %v, want uncertain", err)
	}
	fs.Clear()
	if n := len(e.srv.Tasks()); n != 1 {
		t.Fatalf("%d tasks after the first attempt, want 1", n)
	}
	clock.Advance(ecsstandin.TokenWindow + time.Hour)
	other := newLaunchEnv(t, e.runtime(t), fs, clock, nil)
	r, err := other.apply("k-day")
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if n := len(e.srv.Tasks()); n != 1 {
		t.Fatalf("%d tasks after the retry, want still 1", n)
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n != 1 {
		t.Errorf("%d RunTask calls, want 1", n)
	}
	obs, err := other.svc.Observe(context.Background(), r.Created[0])
	if err != nil || obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeFailed {
		t.Fatalf("observe = %+v, %v; want settled failed", obs, err)
	}
	e.awaitStopped(t, r.Created[0].Handle)
}

// Issue 20, item 12: a worker whose task stopped while its STOPPED event
// was lost is settled failed by the next housekeeping tick, its
// coordinator told, with no redrive by hand.
func TestHousekeepingSettlesAWorkerWhoseStoppedEventWasLost(t *testing.T) {
	e := newEnv(t)
	st := memstore.New()
	le := newLaunchEnv(t, e.runtime(t, ecsrt.WithTaskIndex(service.NewTaskIndex(st))), st, newClock(), nil)
	call := launchCall("k-lost")
	// The fake harness exits by itself at once (its branch says so).
	call.Request.Effect.Effect = json.RawMessage(
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"b","branch":"galley/test/exit"}`)
	raw, err := le.svc.Apply(context.Background(), call, le.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	worker := r.Created[0]
	e.awaitStopped(t, worker.Handle) // its events go nowhere: lost
	if obs, _ := le.svc.Observe(context.Background(), worker); obs.State != protocol.StateStarting {
		t.Fatalf("before housekeeping the worker is %+v", obs)
	}
	rec := reconcile.New(le.svc, st, reconcile.WithLostSettler(le.svc), reconcile.WithMetrics(io.Discard))
	tick := `{"id":"tick-1","source":"aws.events","detail-type":"Scheduled Event","time":"2027-01-15T10:05:00Z","detail":{}}`
	if err := rec.HandleEvent(context.Background(), json.RawMessage(tick)); err != nil {
		t.Fatal(err)
	}
	obs, err := le.svc.Observe(context.Background(), worker)
	if err != nil || obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeFailed {
		t.Fatalf("after housekeeping: %+v, %v; want settled failed", obs, err)
	}
	msgs, err := st.ListMessages(context.Background(), "run-1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, m := range msgs {
		if m.Row.Kind == protocol.MsgWorkerDone {
			done++
		}
	}
	if done != 1 {
		t.Errorf("%d worker-done rows, want 1", done)
	}
	// A second tick finds nothing to settle and posts nothing more.
	if err := rec.HandleEvent(context.Background(), json.RawMessage(strings.Replace(tick, "tick-1", "tick-2", 1))); err != nil {
		t.Fatal(err)
	}
	if again, _ := st.ListMessages(context.Background(), "run-1", 0, 100); len(again) != len(msgs) {
		t.Errorf("the second tick posted %d rows", len(again)-len(msgs))
	}
}
