package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

type env struct {
	svc   *service.Service
	store store.Store
	rt    *servicetest.Runtime
	git   *githost.Repo
	clock service.Clock
}

type manualClock = servicetest.ManualClock

func newEnv(t *testing.T, mods ...func(*service.Config, *[]service.Option)) *env {
	t.Helper()
	// Each mod sets configuration and adds options; the options are
	// collected first, the configuration set on the real one.
	var opts []service.Option
	var scratch service.Config
	for _, m := range mods {
		m(&scratch, &opts)
	}
	te := servicetest.New(t, func(cfg *service.Config) {
		var ignored []service.Option
		for _, m := range mods {
			m(cfg, &ignored)
		}
	}, opts...)
	return &env{svc: te.Service, store: te.Store, rt: te.Runtime, git: te.Git, clock: service.SystemClock}
}

func call(run, key string, effect string) protocol.EffectCall {
	return protocol.EffectCall{Run: run, Request: protocol.EffectRequest{
		House: "origin89", Backend: "galley", Credential: "galley-token", Task: "issue-195", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(effect)},
	}}
}

func launchBody(branch string) string {
	b := `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"Fix the flaky test."`
	if branch != "" {
		b += `,"branch":"` + branch + `"`
	}
	return b + `}`
}

func workerRef(handle string) string {
	return fmt.Sprintf(`{"kind":"worker","backend":"galley","handle":%q}`, handle)
}

func (e *env) apply(t *testing.T, c protocol.EffectCall) (protocol.Receipt, json.RawMessage) {
	t.Helper()
	raw, err := e.svc.Apply(context.Background(), c, e.clock.Now())
	if err != nil {
		t.Fatalf("apply %s: %v", c.Request.Key, err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r, raw
}

func (e *env) refused(t *testing.T, c protocol.EffectCall, kind galleyerr.Kind) {
	t.Helper()
	_, err := e.svc.Apply(context.Background(), c, e.clock.Now())
	if galleyerr.KindOf(err) != kind {
		t.Fatalf("apply %s: got %v, want kind %v", c.Request.Key, err, kind)
	}
}

func (e *env) launch(t *testing.T, run, key, branch string) string {
	t.Helper()
	r, _ := e.apply(t, call(run, key, launchBody(branch)))
	return r.Created[0].Handle
}

func (e *env) observe(t *testing.T, handle string) protocol.Observation {
	t.Helper()
	o, err := e.svc.Observe(context.Background(), protocol.Resource{Kind: "worker", Backend: "galley", Handle: handle})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestLaunchReceiptAndRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	r, raw := e.apply(t, call("run-1", "k-1", launchBody("kitchen/issue-195")))
	if err := r.Validate("galley"); err != nil {
		t.Fatal(err)
	}
	if len(r.Created) != 3 || r.Created[0].Kind != "worker" || r.Created[1] != (protocol.Resource{Kind: "branch", Backend: "galley", Handle: "kitchen/issue-195"}) || r.Created[2].Kind != "worktree" {
		t.Fatalf("created = %+v", r.Created)
	}
	if !strings.Contains(string(raw), `"touched":[]`) {
		t.Fatalf("touched must be an empty array: %s", raw)
	}
	worker := r.Created[0].Handle
	if got := e.observe(t, worker); got.State != "starting" {
		t.Fatalf("observe after launch = %+v", got)
	}
	if e.rt.Starts[worker] != 1 {
		t.Fatalf("starts = %d", e.rt.Starts[worker])
	}
	head, exists, err := e.git.BranchHead(ctx, "kitchen/issue-195")
	if err != nil || !exists {
		t.Fatalf("branch not created: %v", err)
	}
	base, _ := e.git.DefaultHead(ctx)
	if head != base {
		t.Fatalf("branch at %s, default head %s", head, base)
	}
	inv, err := e.svc.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{}
	for _, row := range inv.Resources {
		if row.Owner == nil || *row.Owner != "k-1" {
			t.Fatalf("owner of %+v", row)
		}
		live[row.Resource.Kind] = row.Liveness
	}
	if live["worker"] != "live" || live["branch"] != "live" || live["worktree"] != "live" {
		t.Fatalf("inventory liveness %v", live)
	}
	// The worker's credential is its own, never kitchn's token.
	spec := e.rt.Specs[worker]
	if h, err := e.svc.AuthenticateWorker(ctx, spec.Token); err != nil || h != worker {
		t.Fatalf("worker token authenticates as %q, %v", h, err)
	}
	if _, err := e.svc.AuthenticateWorker(ctx, worker+".forged"); err == nil {
		t.Fatal("forged worker token accepted")
	}
}

func TestIdempotentResubmissionAndLookup(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := call("run-1", "k-1", launchBody("b1"))
	_, first := e.apply(t, c)
	_, second := e.apply(t, c)
	if string(first) != string(second) {
		t.Fatalf("resubmission changed the receipt:\n%s\n%s", first, second)
	}
	ans, raw, err := e.svc.Lookup(ctx, c)
	if err != nil || ans.Status != "applied" || string(raw) != string(first) {
		t.Fatalf("lookup = %+v %s %v", ans, raw, err)
	}
	// Same key, other payload: nothing applied.
	e.refused(t, call("run-1", "k-1", launchBody("b2")), galleyerr.Invalid)
	if _, exists, _ := e.git.BranchHead(ctx, "b2"); exists {
		t.Fatal("a reused key created a branch")
	}
	if n := len(e.rt.Starts); n != 1 {
		t.Fatalf("%d workers started", n)
	}
}

func TestConcurrentIdenticalLaunches(t *testing.T) {
	e := newEnv(t)
	c := call("run-1", "k-race", launchBody("race/branch"))
	var wg sync.WaitGroup
	receipts := make([]string, 24)
	errs := make([]error, 24)
	for i := range receipts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raw, err := e.svc.Apply(context.Background(), c, time.Now())
			receipts[i], errs[i] = string(raw), err
		}()
	}
	wg.Wait()
	applied := ""
	for i, err := range errs {
		switch {
		case err == nil && applied == "":
			applied = receipts[i]
		case err == nil && receipts[i] != applied:
			t.Fatalf("two receipts:\n%s\n%s", applied, receipts[i])
		case err != nil && !galleyerr.Is(galleyerr.InFlight, err):
			t.Fatalf("unexpected answer %v", err)
		}
	}
	if applied == "" {
		t.Fatal("no copy applied")
	}
	if len(e.rt.Starts) != 1 {
		t.Fatalf("%d workers started", len(e.rt.Starts))
	}
	for h, n := range e.rt.Starts {
		if n != 1 {
			t.Fatalf("worker %s started %d times", h, n)
		}
	}
}

func TestBranchThatExistsIsRejectedAndNothingHappens(t *testing.T) {
	e := newEnv(t)
	e.launch(t, "run-1", "k-1", "taken")
	e.refused(t, call("run-1", "k-2", launchBody("taken")), galleyerr.Invalid)
	if len(e.rt.Starts) != 1 {
		t.Fatal("a refused launch started a worker")
	}
	ans, _, err := e.svc.Lookup(context.Background(), call("run-1", "k-2", launchBody("taken")))
	if err != nil || ans.Status != "absent" {
		t.Fatalf("lookup of refused key = %+v %v", ans, err)
	}
}

func TestRefusalsBeforeAnything(t *testing.T) {
	e := newEnv(t)
	cases := []struct {
		name string
		mod  func(*protocol.EffectCall)
		kind galleyerr.Kind
	}{
		{"other house", func(c *protocol.EffectCall) { c.Request.House = "elsewhere" }, galleyerr.CrossHouse},
		{"other backend", func(c *protocol.EffectCall) { c.Request.Backend = "sandbox" }, galleyerr.ForeignBackend},
		{"other credential", func(c *protocol.EffectCall) { c.Request.Credential = "other" }, galleyerr.Invalid},
		{"github executor", func(c *protocol.EffectCall) { c.Request.Effect.Executor = "github" }, galleyerr.Unsupported},
		{"unknown family", func(c *protocol.EffectCall) {
			c.Request.Effect.Effect = json.RawMessage(`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"x","agent":{"agent":"gemini"}}`)
		}, galleyerr.Invalid},
		{"effort without model", func(c *protocol.EffectCall) {
			c.Request.Effect.Effect = json.RawMessage(`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"x","agent":{"agent":"codex","effort":"high"}}`)
		}, galleyerr.Invalid},
		{"foreign worker", func(c *protocol.EffectCall) {
			c.Request.Effect.Effect = json.RawMessage(`{"type":"cancel-worker","worker":{"kind":"worker","backend":"sandbox","handle":"w-1"}}`)
		}, galleyerr.ForeignBackend},
		{"message to unknown worker", func(c *protocol.EffectCall) {
			c.Request.Effect.Effect = json.RawMessage(`{"type":"message-worker","worker":` + workerRef("w-nope") + `,"body":"hi"}`)
		}, galleyerr.Invalid},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := call("run-1", fmt.Sprintf("k-%d", i), launchBody(""))
			tc.mod(&c)
			e.refused(t, c, tc.kind)
		})
	}
	if len(e.rt.Starts) != 0 {
		t.Fatal("a refused request started a worker")
	}
}

// TestLookupAbsentIsAPromise delays a request between its arrival and its
// claim: once lookup answered absent, that copy can never apply, while a
// retry that arrives after the lookup can.
func TestLookupAbsentIsAPromise(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithClock(clock)) })
	e.clock = clock
	ctx := context.Background()
	c := call("run-1", "k-late", launchBody("late"))
	arrived := clock.Now()
	clock.Advance(time.Second)
	if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != "absent" {
		t.Fatalf("lookup = %+v, %v", ans, err)
	}
	clock.Advance(time.Second)
	// The delayed copy claims only now.
	if _, err := e.svc.Apply(ctx, c, arrived); !galleyerr.Is(galleyerr.RateLimited, err) {
		t.Fatalf("delayed copy: %v, want a rate-limited refusal", err)
	}
	if len(e.rt.Starts) != 0 {
		t.Fatal("the delayed copy started a worker after absent was promised")
	}
	if ans, _, _ := e.svc.Lookup(ctx, c); ans.Status != "absent" {
		t.Fatalf("lookup after the refused copy = %s", ans.Status)
	}
	clock.Advance(time.Second)
	if _, err := e.svc.Apply(ctx, c, clock.Now()); err != nil {
		t.Fatalf("retry after lookup: %v", err)
	}
	if len(e.rt.Starts) != 1 {
		t.Fatal("retry did not launch")
	}
}

// TestLeaseTakeoverConverges kills a holder mid-launch (its claim and plan
// stay, the branch and records exist, the runtime never started) and
// checks that a retry after the lease expired converges on one worker and
// one branch.
func TestLeaseTakeoverConverges(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	var inner store.Store
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.Lease = 10 * time.Second
		*o = append(*o, service.WithClock(clock))
	})
	inner = e.store
	ctx := context.Background()
	c := call("run-1", "k-dead", launchBody("dead/branch"))
	// First holder: run the launch fully, then roll the effect record back to
	// in flight, as if the holder died after acting and before completing.
	first, _ := e.apply(t, c)
	rec, ver, err := inner.GetEffect(ctx, "k-dead")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Plan) == 0 {
		t.Fatal("launch saved no plan")
	}
	rec.State, rec.Receipt, rec.Lease, rec.LeaseExpires = store.EffectInFlight, nil, "dead", clock.Now().Add(10*time.Second)
	if _, err := inner.PutEffect(ctx, rec, ver); err != nil {
		t.Fatal(err)
	}
	// While the lease runs, a copy is uncertain and a lookup says unknown.
	if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.InFlight, err) {
		t.Fatalf("during lease: %v", err)
	}
	if ans, _, _ := e.svc.Lookup(ctx, c); ans.Status != "unknown" {
		t.Fatalf("lookup during lease = %s", ans.Status)
	}
	clock.Advance(11 * time.Second)
	second, _ := e.apply(t, c)
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("takeover receipt differs:\n%+v\n%+v", first, second)
	}
	if len(e.rt.Starts) != 1 {
		t.Fatalf("takeover started %d distinct workers", len(e.rt.Starts))
	}
}

func TestMessageReplyCancelRelease(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-1", "feature/x")
	e.apply(t, call("run-1", "k-msg", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`))

	// A question makes the worker awaiting-reply; the reply makes it ready.
	if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
		t.Fatal(err)
	}
	q, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: "question", Subject: "Which API?", Body: "v1 or v2?"})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.observe(t, w); got.State != "awaiting-reply" {
		t.Fatalf("after question: %+v", got)
	}
	e.refused(t, call("run-1", "k-rq", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"msg-never","body":"v2"}`), galleyerr.Invalid)
	e.apply(t, call("run-1", "k-r1", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q.ID+`","body":"v2"}`))
	if got := e.observe(t, w); got.State != "ready" {
		t.Fatalf("after reply: %+v", got)
	}
	e.refused(t, call("run-1", "k-r2", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q.ID+`","body":"v1"}`), galleyerr.Invalid)
	inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
	if err != nil || len(inbox.Items) != 2 || inbox.Items[0].Body != "hello" || inbox.Items[1].Kind != "reply" || inbox.Items[1].Body != "v2" {
		t.Fatalf("inbox = %+v %v", inbox, err)
	}

	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(w)+`}`))
	if got := e.observe(t, w); got != (protocol.Observation{State: "settled", Outcome: "cancelled"}) {
		t.Fatalf("after cancel: %+v", got)
	}
	if !e.rt.Stopped[w] {
		t.Fatal("cancel did not stop the worker")
	}
	// A settled worker never changes state again.
	if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: "worker-done", Outcome: "succeeded"}); err == nil {
		t.Fatal("worker-done after cancel accepted")
	}
	if err := e.svc.WorkerExited(ctx, w, 1, "killed"); err != nil {
		t.Fatal(err)
	}
	if got := e.observe(t, w); got.Outcome != "cancelled" {
		t.Fatalf("settled worker changed: %+v", got)
	}
	e.refused(t, call("run-1", "k-msg2", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"late"}`), galleyerr.Invalid)

	r, _ := e.apply(t, call("run-1", "k-rel", `{"type":"release-resource","resource":`+workerRef(w)+`}`))
	for _, res := range append(r.Created, r.Touched...) {
		if res.Kind == "branch" {
			t.Fatal("release of a worker names a branch")
		}
	}
	if got := e.observe(t, w); got.State != "missing" {
		t.Fatalf("after release: %+v", got)
	}
	if _, exists, _ := e.git.BranchHead(ctx, "feature/x"); !exists {
		t.Fatal("releasing the worker deleted its branch")
	}
	e.apply(t, call("run-1", "k-relb", `{"type":"release-resource","resource":{"kind":"branch","backend":"galley","handle":"feature/x"}}`))
	if _, exists, _ := e.git.BranchHead(ctx, "feature/x"); exists {
		t.Fatal("releasing the branch kept it")
	}
}

func TestWorkerExitWithoutReportSettlesFailed(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-x", "k-1", "")
	if err := e.svc.WorkerExited(ctx, w, 3, "crashed"); err != nil {
		t.Fatal(err)
	}
	if got := e.observe(t, w); got != (protocol.Observation{State: "settled", Outcome: "failed"}) {
		t.Fatalf("observe = %+v", got)
	}
	ans, err := e.svc.Next(ctx, "run-x", "c1")
	if err != nil || ans.Delivery == nil || ans.Delivery.Messages[0].Kind != "worker-done" || ans.Delivery.Messages[0].Outcome != "failed" {
		t.Fatalf("mailbox = %+v %v", ans, err)
	}
}

func TestLaunchIntoExistingWorktree(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	first, _ := e.apply(t, call("run-1", "k-1", launchBody("feature/wt")))
	w, wt := first.Created[0].Handle, first.Created[2].Handle
	existing := func(branch string) string {
		b := `{"type":"launch-worker","role":"commis","workspace":{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"` + wt + `"}},"brief":"again"`
		if branch != "" {
			b += `,"branch":"` + branch + `"`
		}
		return b + "}"
	}
	// In use by a running worker: refused.
	e.refused(t, call("run-1", "k-2", existing("")), galleyerr.Invalid)
	e.apply(t, call("run-1", "k-c", `{"type":"cancel-worker","worker":`+workerRef(w)+`}`))
	// Another branch: refused; an existing workspace keeps its branch.
	e.refused(t, call("run-1", "k-3", existing("feature/other")), galleyerr.Invalid)
	r, _ := e.apply(t, call("run-1", "k-4", existing("")))
	if len(r.Created) != 1 || r.Created[0].Kind != "worker" || len(r.Touched) != 1 || r.Touched[0].Handle != wt {
		t.Fatalf("receipt = %+v", r)
	}
	spec := e.rt.Specs[r.Created[0].Handle]
	if spec.Branch != "feature/wt" || spec.Workspace != wt {
		t.Fatalf("second worker got branch %q workspace %q", spec.Branch, spec.Workspace)
	}
	self, err := e.svc.WorkerSelf(ctx, r.Created[0].Handle)
	if err != nil || self.Branch != "feature/wt" {
		t.Fatalf("self = %+v %v", self, err)
	}
}

// refusingRuntime refuses to start workers while refuse is set, with an
// error of the kind that would otherwise read as a definite refusal.
type refusingRuntime struct {
	*servicetest.Runtime
	refuse bool
}

func (r *refusingRuntime) Start(ctx context.Context, spec service.WorkerSpec) error {
	if r.refuse {
		return galleyerr.Errorf(galleyerr.Invalid, "refused by the runtime")
	}
	return r.Runtime.Start(ctx, spec)
}

// TestFailureAfterActingIsUncertain: a failure after the launch created its
// branch is never answered not-applied; the answer is uncertain, lookup
// says unknown, and a retry converges on the same branch.
func TestFailureAfterActingIsUncertain(t *testing.T) {
	rt := &refusingRuntime{Runtime: servicetest.NewRuntime(), refuse: true}
	te := servicetest.New(t, nil, service.WithRuntime(rt))
	ctx := context.Background()
	c := call("run-1", "k-half", launchBody("half/done"))
	_, err := te.Service.Apply(ctx, c, time.Now())
	if galleyerr.KindOf(err) != galleyerr.Unavailable {
		t.Fatalf("after acting: %v, want an uncertain (unavailable) answer", err)
	}
	if _, exists, _ := te.Git.BranchHead(ctx, "half/done"); !exists {
		t.Fatal("test premise: the branch should exist")
	}
	if ans, _, _ := te.Service.Lookup(ctx, c); ans.Status != "unknown" {
		t.Fatalf("lookup = %s, want unknown", ans.Status)
	}
	rt.refuse = false
	raw, err := te.Service.Apply(ctx, c, time.Now())
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !strings.Contains(string(raw), `"handle":"half/done"`) || rt.StartCount() != 1 {
		t.Fatalf("retry did not converge: %s, %d starts", raw, rt.StartCount())
	}
}

// capacityRuntime refuses for capacity, as ECS does when no Fargate
// capacity can be had.
type capacityRuntime struct{ *servicetest.Runtime }

func (capacityRuntime) Start(context.Context, service.WorkerSpec) error {
	return &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: 30, Msg: "no capacity"}
}

// TestCapacityRefusalLeavesNothing: a fresh launch whose runtime has no
// capacity answers rate-limited and leaves no branch, record or worker.
func TestCapacityRefusalLeavesNothing(t *testing.T) {
	te := servicetest.New(t, nil, service.WithRuntime(capacityRuntime{servicetest.NewRuntime()}))
	ctx := context.Background()
	c := call("run-1", "k-cap", launchBody("cap/branch"))
	_, err := te.Service.Apply(ctx, c, time.Now())
	if e := galleyerr.As(err); e == nil || e.Kind != galleyerr.RateLimited || e.RetryAfterSeconds != 30 {
		t.Fatalf("launch without capacity: %v", err)
	}
	if _, exists, _ := te.Git.BranchHead(ctx, "cap/branch"); exists {
		t.Fatal("the refused launch left its branch")
	}
	inv, _ := te.Service.Inventory(ctx)
	if len(inv.Resources) != 0 {
		t.Fatalf("the refused launch left %+v", inv.Resources)
	}
	if ans, _, _ := te.Service.Lookup(ctx, c); ans.Status != "absent" {
		t.Fatalf("lookup = %s", ans.Status)
	}
}
