package reconcile_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// env is a real service on a real store, a worker launched through it, and
// a reconciler in front.
type env struct {
	t       *testing.T
	svc     *service.Service
	st      store.Store
	stopper *stopper
	rec     *reconcile.Reconciler
	clock   *servicetest.ManualClock
	worker  string
	task    string
	run     string
}

type stopper struct {
	mu      sync.Mutex
	stopped []string
}

func (s *stopper) StopTask(_ context.Context, arn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = append(s.stopped, arn)
	return nil
}

func (s *stopper) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.stopped...)
}

// stores are the stores the tests run on: the memory store always, and
// DynamoDB Local when its endpoint is set.
func stores(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"memstore": func(*testing.T) store.Store { return memstore.New() },
		"dynamostore": func(t *testing.T) store.Store {
			standins.Require(t, standins.DynamoDB)
			c, err := dynamostore.NewClientFromEnv(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var b [6]byte
			rand.Read(b[:])
			name := "galley-reconcile-" + hex.EncodeToString(b[:])
			s := dynamostore.New(c, name)
			if err := s.EnsureTable(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
			})
			return s
		},
	}
}

func newEnv(t *testing.T, st store.Store, opts ...reconcile.Option) *env {
	t.Helper()
	clock := servicetest.NewManualClock(time.Now()) // the service bounds work by lease deadlines on this clock
	te := servicetest.New(t, nil, service.WithStore(st), service.WithClock(clock))
	e := &env{t: t, svc: te.Service, st: st, stopper: &stopper{}, clock: clock, run: "run-1"}
	e.rec = reconcile.New(te.Service, st, append([]reconcile.Option{reconcile.WithStopper(e.stopper),
		reconcile.WithClock(clock.Now)}, opts...)...)
	e.worker = e.launch("k-launch")
	e.task = "arn:aws:ecs:us-east-1:000000000000:task/galley/" + strings.Repeat("a", 32)
	return e
}

func (e *env) call(key, effect string) protocol.EffectCall {
	return protocol.EffectCall{Run: e.run, Request: protocol.EffectRequest{
		House: "origin89", Backend: "galley", Credential: "galley-token", Task: "issue-1", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(effect)},
	}}
}

func (e *env) launch(key string) string {
	e.t.Helper()
	raw, err := e.svc.Apply(context.Background(), e.call(key,
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"Fix it."}`), e.clock.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		e.t.Fatal(err)
	}
	return r.Created[0].Handle
}

func (e *env) cancel() {
	e.t.Helper()
	if _, err := e.svc.Apply(context.Background(), e.call("k-cancel",
		`{"type":"cancel-worker","worker":{"kind":"worker","backend":"galley","handle":"`+e.worker+`"}}`), e.clock.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// event is the EventBridge event ECS would send for the worker's task.
func (e *env) event(status string, version int64, mod func(detail map[string]any)) []byte {
	detail := map[string]any{
		"taskArn": e.task, "clusterArn": "arn:aws:ecs:us-east-1:000000000000:cluster/galley",
		"startedBy": ecsrt.StartedBy(e.worker), "lastStatus": status, "desiredStatus": "RUNNING",
		"version": version, "containers": []map[string]any{{"name": "worker", "lastStatus": status}},
	}
	if status == ecsrt.StatusStopped {
		detail["desiredStatus"] = "STOPPED"
		detail["stopCode"] = "EssentialContainerExited"
		detail["stoppedReason"] = "Essential container in task exited"
		detail["containers"] = []map[string]any{{"name": "worker", "lastStatus": "STOPPED", "exitCode": 2, "reason": "agent crashed"}}
	}
	if mod != nil {
		mod(detail)
	}
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": fmt.Sprintf("ev-%s-%d", status, version), "detail-type": "ECS Task State Change",
		"source": "aws.ecs", "account": "000000000000", "time": "2023-11-14T22:13:20Z", "region": "us-east-1",
		"resources": []string{e.task}, "detail": detail,
	})
	return b
}

func (e *env) deliver(ev []byte) {
	e.t.Helper()
	if err := e.rec.HandleEvent(context.Background(), ev); err != nil {
		e.t.Fatalf("HandleEvent: %v", err)
	}
}

func (e *env) observe() protocol.Observation {
	e.t.Helper()
	o, err := e.svc.Observe(context.Background(), protocol.Resource{Kind: "worker", Backend: "galley", Handle: e.worker})
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

// doneRows reads the run's mailbox (as a coordinator would, without
// acknowledging) and returns its worker-done rows.
func (e *env) doneRows() []protocol.MailMessage {
	e.t.Helper()
	ans, err := e.svc.Next(context.Background(), e.run, "coord-1")
	if err != nil {
		e.t.Fatal(err)
	}
	var rows []protocol.MailMessage
	if ans.Delivery != nil {
		for _, m := range ans.Delivery.Messages {
			if m.Kind == protocol.MsgWorkerDone {
				rows = append(rows, m)
			}
		}
	}
	return rows
}

func (e *env) exited() bool {
	res, _, err := e.st.GetResource(context.Background(), protocol.KindWorker, e.worker)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Worker.Exited
}

func forEachStore(t *testing.T, f func(t *testing.T, st store.Store)) {
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) { f(t, open(t)) })
	}
}

func TestStoppedWithoutReportSettlesFailed(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		e.deliver(e.event("PROVISIONING", 1, nil))
		e.deliver(e.event("RUNNING", 2, nil))
		if o := e.observe(); o.State != protocol.StateStarting {
			t.Fatalf("a running task changed the worker: %+v", o)
		}
		e.deliver(e.event("STOPPED", 4, nil))
		if o := e.observe(); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
			t.Fatalf("after the stop: %+v", o)
		}
		rows := e.doneRows()
		if len(rows) != 1 {
			t.Fatalf("worker-done rows: %+v", rows)
		}
		r := rows[0]
		if r.Outcome != protocol.OutcomeFailed || r.Worker == nil || r.Worker.Handle != e.worker {
			t.Errorf("row: %+v", r)
		}
		for _, want := range []string{"code 2", "EssentialContainerExited", "Essential container in task exited", "agent crashed"} {
			if !strings.Contains(r.Body, want) {
				t.Errorf("row body %q lacks %q", r.Body, want)
			}
		}
		if !e.exited() {
			t.Error("worker not marked exited")
		}
		if got := e.stopper.calls(); len(got) != 0 {
			t.Errorf("stopped tasks %v", got)
		}
	})
}

// Late, duplicated and out-of-order events never move a settled worker
// and never post a second report.
func TestLateDuplicateOutOfOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		stop := e.event("STOPPED", 5, nil)
		e.deliver(stop)
		for _, ev := range [][]byte{
			e.event("RUNNING", 3, nil), // late
			stop,                       // duplicate
			e.event("PENDING", 2, nil),
			e.event("DEPROVISIONING", 4, nil),
			e.event("STOPPED", 5, func(d map[string]any) { d["stoppedReason"] = "another reason" }),
			stop,
		} {
			e.deliver(ev)
			if o := e.observe(); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
				t.Fatalf("moved: %+v", o)
			}
		}
		if rows := e.doneRows(); len(rows) != 1 {
			t.Errorf("worker-done rows: %d", len(rows))
		}
		if got := e.stopper.calls(); len(got) != 0 {
			t.Errorf("stale events stopped tasks: %v", got)
		}
	})
}

// Copies of the stop delivered at once settle the worker once: one claim
// wins, the others are told to retry (or find it settled).
func TestConcurrentDuplicates(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		stop := e.event("STOPPED", 5, nil)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- e.rec.HandleEvent(context.Background(), stop)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil && !galleyerr.Is(galleyerr.InFlight, err) {
				t.Errorf("HandleEvent: %v", err)
			}
		}
		e.deliver(stop) // EventBridge's retry of a copy told to retry
		if rows := e.doneRows(); len(rows) != 1 {
			t.Errorf("worker-done rows: %d", len(rows))
		}
		if o := e.observe(); o.Outcome != protocol.OutcomeFailed {
			t.Errorf("observe: %+v", o)
		}
	})
}

func TestStopAfterCancelStaysCancelled(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		e.deliver(e.event("RUNNING", 2, nil))
		e.cancel()
		e.deliver(e.event("STOPPED", 3, func(d map[string]any) {
			d["stopCode"] = "UserInitiated"
			d["stoppedReason"] = "galley: worker stopped"
		}))
		if o := e.observe(); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeCancelled {
			t.Fatalf("observe: %+v", o)
		}
		if rows := e.doneRows(); len(rows) != 0 {
			t.Errorf("the reconciler reported a cancelled worker: %+v", rows)
		}
		if !e.exited() {
			t.Error("a stopped task's worker is not marked exited")
		}
		inv, err := e.svc.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range inv.Resources {
			if row.Resource.Handle == e.worker && row.Liveness != protocol.LivenessExited {
				t.Errorf("inventory liveness %s", row.Liveness)
			}
		}
	})
}

func TestReportedThenStoppedKeepsReport(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st)
		if _, err := e.svc.WorkerPost(context.Background(), e.worker, workerapi.PostRequest{
			Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded, Body: "done"}); err != nil {
			t.Fatal(err)
		}
		e.deliver(e.event("STOPPED", 4, func(d map[string]any) {
			d["containers"] = []map[string]any{{"name": "worker", "lastStatus": "STOPPED", "exitCode": 0}}
		}))
		if o := e.observe(); o.Outcome != protocol.OutcomeSucceeded {
			t.Fatalf("observe: %+v", o)
		}
		if rows := e.doneRows(); len(rows) != 1 || rows[0].Outcome != protocol.OutcomeSucceeded {
			t.Errorf("rows: %+v", rows)
		}
	})
}

// A task that shows up running after its worker was cancelled (the stop
// found no task yet) is stopped; the worker stays cancelled.
func TestOrphanTaskStopped(t *testing.T) {
	e := newEnv(t, memstore.New())
	e.cancel()
	e.deliver(e.event("RUNNING", 2, nil))
	if got := e.stopper.calls(); len(got) != 1 || got[0] != e.task {
		t.Errorf("stopped %v, want the task", got)
	}
	if o := e.observe(); o.Outcome != protocol.OutcomeCancelled {
		t.Errorf("observe: %+v", o)
	}
	// A task already on its way down is left alone.
	e.deliver(e.event("DEACTIVATING", 3, func(d map[string]any) { d["desiredStatus"] = "STOPPED" }))
	if got := e.stopper.calls(); len(got) != 1 {
		t.Errorf("stopped again: %v", got)
	}
}

func TestIgnored(t *testing.T) {
	e := newEnv(t, memstore.New())
	for name, ev := range map[string][]byte{
		"another startedBy": e.event("STOPPED", 3, func(d map[string]any) { d["startedBy"] = "ecs-svc/123" }),
		"unknown worker":    e.event("STOPPED", 3, func(d map[string]any) { d["startedBy"] = ecsrt.StartedBy("w-nobody") }),
		"not an ECS event":  []byte(`{"version":"0","id":"x","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{}}`),
		"not JSON":          []byte(`{`),
	} {
		if err := e.rec.HandleEvent(context.Background(), ev); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if o := e.observe(); o.State != protocol.StateStarting {
		t.Errorf("observe: %+v", o)
	}
}

// flaky fails its first WorkerExited, as a function killed mid-settle
// would leave things.
type flaky struct {
	reconcile.Settler
	failed bool
}

func (f *flaky) WorkerExited(ctx context.Context, h string, code int, reason string) error {
	if !f.failed {
		f.failed = true
		return galleyerr.E(galleyerr.Unavailable, errors.New("store timed out"))
	}
	return f.Settler.WorkerExited(ctx, h, code, reason)
}

// A claim left by a failed or killed invocation is taken over: at once
// after a failure, after the lease when the holder vanished.
func TestClaimTakenOver(t *testing.T) {
	st := memstore.New()
	e := newEnv(t, st)
	f := &flaky{Settler: e.svc}
	r := reconcile.New(f, st, reconcile.WithClock(e.clock.Now))
	stop := e.event("STOPPED", 5, nil)
	if err := r.HandleEvent(context.Background(), stop); err == nil {
		t.Fatal("a failed settle answered success")
	}
	if err := r.HandleEvent(context.Background(), stop); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if o := e.observe(); o.Outcome != protocol.OutcomeFailed {
		t.Errorf("observe: %+v", o)
	}

	// A holder that vanished: its claim is in flight until the lease ends.
	e2 := newEnv(t, memstore.New())
	e2.worker = e2.launch("k-second")
	if _, err := e2.st.PutEffect(context.Background(), store.Effect{Key: "reconcile " + e2.worker, Fingerprint: "reconcile",
		Operation: "reconcile", State: store.EffectInFlight, Lease: "gone", LeaseExpires: e2.clock.Now().Add(reconcile.DefaultLease)},
		store.NoVersion); err != nil {
		t.Fatal(err)
	}
	stop2 := e2.event("STOPPED", 5, nil)
	if err := e2.rec.HandleEvent(context.Background(), stop2); !galleyerr.Is(galleyerr.InFlight, err) {
		t.Fatalf("held claim: %v", err)
	}
	e2.clock.Advance(reconcile.DefaultLease)
	e2.deliver(stop2)
	if o := e2.observe(); o.Outcome != protocol.OutcomeFailed {
		t.Errorf("observe after takeover: %+v", o)
	}
	if rows := e2.doneRows(); len(rows) != 1 {
		t.Errorf("rows: %d", len(rows))
	}
}
