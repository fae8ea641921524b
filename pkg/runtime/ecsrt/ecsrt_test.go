//go:build unix

package ecsrt_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/runtime/runtimetest"
	"github.com/galley-run/galley/pkg/service"
)

// fakeHarness is the stand-in's fake harness, built by TestMain.
var fakeHarness string

// patience bounds every wait: a guard against hangs, not a speed check.
const patience = 30 * time.Second

func TestMain(m *testing.M) {
	// The stand-in runs this very binary as each task's init.
	ecsstandin.Entrypoint()
	tmp, err := os.MkdirTemp("", "ecsrt-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeHarness = filepath.Join(tmp, "fakeharness")
	out, err := exec.Command("go", "build", "-o", fakeHarness, "../../../local/ecsstandin/testdata/fakeharness").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake harness: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// env is one stand-in and the real SDK client pointed at it.
type env struct {
	srv    *ecsstandin.Server
	client *ecs.Client
	cfg    ecsrt.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newStandinEnv(t, fakeHarness, []ecsstandin.KeyValue{{Name: "GALLEY_HOUSE", Value: "test-house"}})
}

// workerImage is the image reference of the tests' task definition.
const workerImage = "000000000000.dkr.ecr.us-east-1.amazonaws.com/galley-worker:test"

// newStandinEnv starts a stand-in whose worker image runs harness, with
// cluster galley-test and task definition galley-worker:1 (one container,
// worker, whose environment is GALLEY_WORKSPACE=/workspace and defEnv), and
// extra options, and points a real ECS client at it.
func newStandinEnv(t *testing.T, harness string, defEnv []ecsstandin.KeyValue, extra ...ecsstandin.Option) *env {
	t.Helper()
	opts := append([]ecsstandin.Option{
		ecsstandin.WithDir(t.TempDir()), ecsstandin.WithGrace(2 * time.Second),
		ecsstandin.WithImage(workerImage, ecsstandin.Image{Entrypoint: []string{harness},
			Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}}),
	}, extra...)
	srv, err := ecsstandin.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateCluster("galley-test"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.RegisterTaskDefinition(ecsstandin.TaskDefinition{
		Family: "galley-worker", NetworkMode: "awsvpc", RequiresCompatibilities: []string{"FARGATE"},
		CPU: "1024", Memory: "2048",
		ContainerDefinitions: []ecsstandin.ContainerDefinition{{Name: "worker", Image: workerImage,
			Environment: append([]ecsstandin.KeyValue{{Name: "GALLEY_WORKSPACE", Value: "/workspace"}}, defEnv...)}},
	}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	// Cleanups run last-registered first: the stand-in outlives the
	// suite's own Stop calls, and Close ends whatever they left.
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	client := ecs.New(ecs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(hs.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDSTANDIN", "standin-dummy", ""),
		HTTPClient:   hs.Client(),
	})
	return &env{srv: srv, client: client, cfg: ecsrt.Config{
		Cluster: "galley-test", TaskDefinition: "galley-worker:1", Container: "worker",
		Subnets: []string{"subnet-0a1b2c"}, SecurityGroups: []string{"sg-0a1b2c"},
		Endpoint: "https://galley.example/", Repository: "https://git.example/house.git", House: "test-house",
	}}
}

func (e *env) runtime(t *testing.T, opts ...ecsrt.Option) *ecsrt.Runtime {
	t.Helper()
	r, err := ecsrt.New(e.client, e.cfg, append([]ecsrt.Option{ecsrt.WithRetry(3, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// spec returns a spec whose fake harness behaves as mode.
func spec(handle, mode string) service.WorkerSpec {
	return service.WorkerSpec{
		Handle: handle, Token: handle + "." + rand.Text(), IdempotencyToken: "t-" + handle,
		Workspace: "wt-" + handle, WorkspacePath: "/workspace/wt-" + handle,
		Branch: "galley/test/" + mode, Agent: "script", Run: "run-1", Task: "task-" + handle, Key: "key " + handle,
	}
}

// tasksOf returns the stand-in's tasks of handle.
func (e *env) tasksOf(handle string) []ecsstandin.TaskInfo {
	var out []ecsstandin.TaskInfo
	for _, ti := range e.srv.Tasks() {
		if ti.StartedBy == ecsrt.StartedBy(handle) {
			out = append(out, ti)
		}
	}
	return out
}

// starts counts the fake harness's starts across handle's tasks.
func (e *env) starts(handle string) int {
	n := 0
	for _, ti := range e.tasksOf(handle) {
		b, err := os.ReadFile(filepath.Join(ti.Workspace, "starts"))
		if err == nil {
			n += strings.Count(string(b), "\n")
		}
	}
	return n
}

func TestSuite(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimetest.Subject {
		e := newEnv(t)
		// Production wires the store's task index (lambdaapp): a cold
		// function finds a task ListTasks does not show yet (the
		// stand-in's list lag is on).
		idx := &mapIndex{m: map[string]string{}}
		return runtimetest.Subject{
			Runtime: e.runtime(t, ecsrt.WithTaskIndex(idx)),
			// A fresh runtime remembers no task, as a cold function.
			Restart: func() service.Runtime { return e.runtime(t, ecsrt.WithTaskIndex(idx)) },
			Calls:   func() int { return len(e.srv.Requests(ecsstandin.OpDescribeTasks, ecsstandin.OpListTasks)) },
			Spec: func(handle string, b runtimetest.Behavior) service.WorkerSpec {
				if b == runtimetest.ExitsByItself {
					return spec(handle, "exit")
				}
				return spec(handle, "run")
			},
			Starts:   e.starts,
			Patience: patience,
			// Workspaces live in the task's storage: RemoveWorkspace has
			// no folder of its own.
		}
	})
}

// awaitLiveness polls r until handle reads want.
func awaitLiveness(t *testing.T, r service.Runtime, handle string, want service.Liveness) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		l, err := r.Liveness(context.Background(), handle)
		if err != nil {
			t.Fatalf("Liveness(%s): %v", handle, err)
		}
		if l == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Liveness(%s) = %d after %v, want %d", handle, l, patience, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitStarted waits until handle's fake harness has started (and so
// handles SIGTERM).
func (e *env) awaitStarted(t *testing.T, handle string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for e.starts(handle) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the harness of %s never started", handle)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitStopped waits until the stand-in shows handle's only task STOPPED,
// and returns it.
func (e *env) awaitStopped(t *testing.T, handle string) ecsstandin.TaskInfo {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		if ts := e.tasksOf(handle); len(ts) == 1 && ts[0].LastStatus == "STOPPED" {
			return ts[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task of %s never stopped: %+v", handle, e.tasksOf(handle))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRetriedStartMakesOneTask(t *testing.T) {
	e := newEnv(t)
	s := spec("w-retried", "run")
	// Two runtimes are two processes (two Lambda invocations): the second
	// knows nothing of the first's task but the clientToken.
	first, second := e.runtime(t), e.runtime(t)
	if err := first.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = second.Start(context.Background(), s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("retried Start: %v", err)
		}
	}
	awaitLiveness(t, second, s.Handle, service.LivenessLive)
	e.awaitStarted(t, s.Handle)
	if n := len(e.tasksOf(s.Handle)); n != 1 {
		t.Errorf("%d tasks for one launch, want 1", n)
	}
	if n := len(e.srv.Requests(ecsstandin.OpRunTask)); n < 2 {
		t.Errorf("%d RunTask calls: the retries did not reach ECS", n)
	}
	for _, rq := range e.srv.Requests(ecsstandin.OpRunTask) {
		var in struct{ ClientToken string }
		if err := json.Unmarshal(rq.Body, &in); err != nil || in.ClientToken != s.IdempotencyToken {
			t.Errorf("RunTask clientToken = %q (%v), want %q", in.ClientToken, err, s.IdempotencyToken)
		}
	}
	if err := second.Stop(context.Background(), s.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, first, s.Handle, service.LivenessExited)
	if n := e.starts(s.Handle); n != 1 {
		t.Errorf("the harness started %d times, want 1", n)
	}
}

func TestRunTaskRefusals(t *testing.T) {
	const capacity = "Capacity is unavailable at this time. Please try again later or in a different availability zone"
	throttle := ecsstandin.Fault{Op: ecsstandin.OpRunTask, Code: "ThrottlingException", Message: "Rate exceeded"}
	tests := []struct {
		name       string
		faults     []ecsstandin.Fault
		attempts   int
		want       galleyerr.Kind
		retryAfter int
		calls      int // RunTask calls expected, 0 to skip
	}{
		{name: "fargate capacity", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Failure: capacity}},
			want: galleyerr.RateLimited, calls: 1},
		{name: "resource failure", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Failure: "RESOURCE:MEMORY"}},
			want: galleyerr.RateLimited, calls: 1},
		{name: "agent failure", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Failure: "AGENT"}},
			want: galleyerr.RateLimited, calls: 1},
		{name: "throttled every time", faults: []ecsstandin.Fault{throttle}, want: galleyerr.RateLimited, calls: 3},
		{name: "throttled with retry-after", attempts: 1,
			faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Code: "ThrottlingException", Message: "Rate exceeded", RetryAfter: 7}},
			want:   galleyerr.RateLimited, retryAfter: 7, calls: 1},
		{name: "server capacity", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Code: "ServerException", Message: capacity, Status: 500}},
			want: galleyerr.RateLimited, calls: 1},
		{name: "limit exceeded", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Code: "LimitExceededException", Message: "too many tasks"}},
			want: galleyerr.RateLimited, calls: 1},
		{name: "server fault is uncertain", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Code: "ServerException", Message: "internal", Status: 500}},
			want: galleyerr.Unavailable, calls: 3},
		// A throttle after an attempt of unknown outcome cannot promise
		// that nothing was launched.
		{name: "throttled after a server fault", faults: []ecsstandin.Fault{
			{Op: ecsstandin.OpRunTask, Code: "ServerException", Message: "internal", Status: 500, Times: 1}, throttle},
			want: galleyerr.Unavailable, calls: 3},
		{name: "capacity after a server fault", faults: []ecsstandin.Fault{
			{Op: ecsstandin.OpRunTask, Code: "ServerException", Message: "internal", Status: 500, Times: 1},
			{Op: ecsstandin.OpRunTask, Failure: capacity}},
			want: galleyerr.Unavailable, calls: 2},
		{name: "client error", faults: []ecsstandin.Fault{{Op: ecsstandin.OpRunTask, Code: "ClientException", Message: "bad role"}},
			want: galleyerr.Other, calls: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			for _, f := range tc.faults {
				e.srv.Inject(f)
			}
			attempts := tc.attempts
			if attempts == 0 {
				attempts = 3
			}
			r := e.runtime(t, ecsrt.WithRetry(attempts, time.Millisecond))
			s := spec("w-refused", "run")
			err := r.Start(context.Background(), s)
			if got := galleyerr.KindOf(err); got != tc.want {
				t.Fatalf("Start = %v (kind %s), want kind %s", err, got, tc.want)
			}
			if ge := galleyerr.As(err); tc.retryAfter != 0 && (ge == nil || ge.RetryAfterSeconds != tc.retryAfter) {
				t.Errorf("RetryAfterSeconds = %+v, want %d", ge, tc.retryAfter)
			}
			if strings.Contains(err.Error(), s.Token) || strings.Contains(err.Error(), bootstrap.Code(s.Token, s.Handle)) {
				t.Errorf("the error quotes a credential: %v", err)
			}
			if n := len(e.srv.Tasks()); n != 0 {
				t.Errorf("%d tasks after a refused launch, want none", n)
			}
			if n := len(e.srv.Requests(ecsstandin.OpRunTask)); tc.calls != 0 && n != tc.calls {
				t.Errorf("%d RunTask calls, want %d", n, tc.calls)
			}
		})
	}
}

func TestThrottledOnceThenStarts(t *testing.T) {
	e := newEnv(t)
	e.srv.Inject(ecsstandin.Fault{Op: ecsstandin.OpRunTask, Code: "ThrottlingException", Message: "Rate exceeded", Times: 2})
	r := e.runtime(t)
	s := spec("w-throttled", "run")
	t.Cleanup(func() { _ = r.Stop(context.Background(), s.Handle) })
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatalf("Start after two throttles: %v", err)
	}
	awaitLiveness(t, r, s.Handle, service.LivenessLive)
	if n := len(e.tasksOf(s.Handle)); n != 1 {
		t.Errorf("%d tasks, want 1", n)
	}
}

func TestOverridesHoldNoSecret(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(t)
	s := spec("w-secret", "run")
	t.Cleanup(func() { _ = r.Stop(context.Background(), s.Handle) })
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, s.Handle, service.LivenessLive)
	_, mac, _ := strings.Cut(s.Token, ".")
	reqs := e.srv.Requests(ecsstandin.OpRunTask)
	if len(reqs) != 1 {
		t.Fatalf("%d RunTask requests, want 1", len(reqs))
	}
	body := string(reqs[0].Body)
	for _, secret := range []string{s.Token, mac} {
		if strings.Contains(body, secret) {
			t.Fatalf("the RunTask request holds the worker's credential: %s", body)
		}
	}
	var in struct {
		ClientToken          string
		StartedBy            string
		LaunchType           string
		EnableECSManagedTags bool
		Cluster              string
		TaskDefinition       string
		Count                int
		NetworkConfiguration struct {
			AwsvpcConfiguration struct {
				Subnets, SecurityGroups []string
				AssignPublicIP          string `json:"assignPublicIp"`
			}
		}
		Overrides struct {
			ContainerOverrides []struct {
				Name        string
				Command     []string
				Environment []struct{ Name, Value string }
			}
			TaskRoleArn string
		}
		Tags []struct{ Key, Value string }
	}
	if err := json.Unmarshal(reqs[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if in.ClientToken != s.IdempotencyToken || in.StartedBy != "galley-w-secret" || in.LaunchType != "FARGATE" ||
		!in.EnableECSManagedTags || in.Cluster != "galley-test" || in.TaskDefinition != "galley-worker:1" || in.Count != 1 {
		t.Errorf("RunTask request = %+v", in)
	}
	if vpc := in.NetworkConfiguration.AwsvpcConfiguration; !slices.Equal(vpc.Subnets, e.cfg.Subnets) ||
		!slices.Equal(vpc.SecurityGroups, e.cfg.SecurityGroups) || vpc.AssignPublicIP != "DISABLED" {
		t.Errorf("network configuration = %+v", vpc)
	}
	if len(in.Overrides.ContainerOverrides) != 1 || in.Overrides.ContainerOverrides[0].Name != "worker" ||
		in.Overrides.ContainerOverrides[0].Command != nil || in.Overrides.TaskRoleArn != "" {
		t.Fatalf("overrides = %+v, want one environment override of container worker", in.Overrides)
	}
	got := map[string]string{}
	for _, kv := range in.Overrides.ContainerOverrides[0].Environment {
		got[kv.Name] = kv.Value
	}
	want := map[string]string{
		contract.EnvWorkerHandle: s.Handle, contract.EnvWorkerEndpoint: e.cfg.Endpoint, contract.EnvRepository: e.cfg.Repository,
		contract.EnvBranch: s.Branch, contract.EnvWorkspace: s.WorkspacePath, contract.EnvAgent: s.Agent,
		contract.EnvWorkerBootstrap: got[contract.EnvWorkerBootstrap],
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("override environment = %v, want %v", got, want)
	}
	if !bootstrap.Valid(s.Token, s.Handle, got[contract.EnvWorkerBootstrap]) {
		t.Errorf("the bootstrap code does not verify")
	}
	tags := map[string]string{}
	for _, tg := range in.Tags {
		tags[tg.Key] = tg.Value
	}
	wantTags := map[string]string{contract.TagHouse: "test-house", ecsrt.TagRun: "run-1", ecsrt.TagWorker: s.Handle, ecsrt.TagKey: "key w-secret"}
	if fmt.Sprint(tags) != fmt.Sprint(wantTags) {
		t.Errorf("tags = %v, want %v", tags, wantTags)
	}

	// What the harness got: the task definition's environment and the
	// overrides, and nothing of the credential.
	ti := e.tasksOf(s.Handle)[0]
	harnessEnv := readHarnessEnv(t, ti.Workspace)
	for _, kv := range harnessEnv {
		if strings.Contains(kv, mac) || strings.HasPrefix(kv, "GALLEY_WORKER_TOKEN") {
			t.Errorf("the harness environment holds %q", kv)
		}
	}
	for _, want := range []string{"GALLEY_HOUSE=test-house", contract.EnvWorkerHandle + "=" + s.Handle,
		contract.EnvWorkspace + "=" + ti.Workspace, contract.EnvWorkerBootstrap + "=" + got[contract.EnvWorkerBootstrap]} {
		if !slices.Contains(harnessEnv, want) {
			t.Errorf("the harness environment lacks %s: %v", want, harnessEnv)
		}
	}
}

// readHarnessEnv waits for the fake harness's record of its environment.
func readHarnessEnv(t *testing.T, ws string) []string {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		m, _ := filepath.Glob(filepath.Join(ws, "env-*.json"))
		if len(m) == 1 {
			b, err := os.ReadFile(m[0])
			var env []string
			if err == nil && json.Unmarshal(b, &env) == nil {
				return env
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no environment record in %s", ws)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNotYetVisibleIsUnknown(t *testing.T) {
	e := newEnv(t)
	e.srv.SetVisibilityDelay(time.Hour)
	r := e.runtime(t)
	s := spec("w-invisible", "run")
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	// The task runs, but ECS does not show it yet: neither to the runtime
	// that knows its ARN nor to one that must list it.
	e.awaitStarted(t, s.Handle)
	for name, rt := range map[string]*ecsrt.Runtime{"knows the task": r, "lists tasks": e.runtime(t)} {
		l, err := rt.Liveness(context.Background(), s.Handle)
		if err != nil || l != service.LivenessUnknown {
			t.Errorf("%s: Liveness = %d, %v; want unknown", name, l, err)
		}
	}
	// Stopping by the known ARN works while the task is invisible.
	if err := r.Stop(context.Background(), s.Handle); err != nil {
		t.Fatal(err)
	}
	e.awaitStopped(t, s.Handle)
}

func TestAnotherProcessFindsTheTask(t *testing.T) {
	e := newEnv(t)
	e.srv.SetListLag(0) // ListTasks shows the stop at once
	s := spec("w-stateless", "run")
	if err := e.runtime(t).Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	other := e.runtime(t)
	awaitLiveness(t, other, s.Handle, service.LivenessLive)
	e.awaitStarted(t, s.Handle)
	if err := other.Stop(context.Background(), s.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, other, s.Handle, service.LivenessExited)
	lists := e.srv.Requests(ecsstandin.OpListTasks)
	if len(lists) == 0 {
		t.Fatal("no ListTasks call")
	}
	for _, l := range lists {
		// startedBy is ListTasks' only filter (ECS refuses it with another).
		var in map[string]any
		if err := json.Unmarshal(l.Body, &in); err != nil || in["startedBy"] != ecsrt.StartedBy(s.Handle) ||
			in["cluster"] != "galley-test" || len(in) != 2 || l.Status != 200 {
			t.Errorf("ListTasks request = %s, answered %d", l.Body, l.Status)
		}
	}
	ti := e.awaitStopped(t, s.Handle)
	// A runtime that knows neither the task nor an index cannot list a
	// stopped task by its startedBy (ListTasks shows desired RUNNING):
	// unknown, never exited.
	if l, err := e.runtime(t).Liveness(context.Background(), s.Handle); err != nil || l != service.LivenessUnknown {
		t.Errorf("a fresh runtime's Liveness of the stopped task = %d, %v; want unknown", l, err)
	}
	if ti.StopCode != "UserInitiated" || ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Errorf("stopped task = %+v, want UserInitiated with exit code 0", ti)
	}
}

// mapIndex is a TaskIndex in memory, as the store would keep it.
type mapIndex struct {
	mu sync.Mutex
	m  map[string]string
}

func (x *mapIndex) TaskARN(_ context.Context, h string) (string, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	arn, ok := x.m[h]
	return arn, ok, nil
}

func (x *mapIndex) SetTaskARN(_ context.Context, h, arn string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.m[h] = arn
	return nil
}

func TestTaskIndexSparesListing(t *testing.T) {
	e := newEnv(t)
	idx := &mapIndex{m: map[string]string{}}
	s := spec("w-indexed", "run")
	if err := e.runtime(t, ecsrt.WithTaskIndex(idx)).Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if arn := idx.m[s.Handle]; arn != e.tasksOf(s.Handle)[0].ARN {
		t.Fatalf("index holds %q, want the task's ARN", arn)
	}
	other := e.runtime(t, ecsrt.WithTaskIndex(idx))
	awaitLiveness(t, other, s.Handle, service.LivenessLive)
	if err := other.Stop(context.Background(), s.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, other, s.Handle, service.LivenessExited)
	if n := len(e.srv.Requests(ecsstandin.OpListTasks)); n != 0 {
		t.Errorf("%d ListTasks calls with an index, want none", n)
	}
}

func TestCapacityProvider(t *testing.T) {
	e := newEnv(t)
	e.cfg.CapacityProvider, e.cfg.AssignPublicIP = "FARGATE_SPOT", true
	r := e.runtime(t)
	s := spec("w-spot", "exit")
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, s.Handle, service.LivenessExited)
	var in struct {
		LaunchType               string
		CapacityProviderStrategy []struct {
			CapacityProvider string
			Weight           int
		}
		NetworkConfiguration struct {
			AwsvpcConfiguration struct {
				AssignPublicIP string `json:"assignPublicIp"`
			}
		}
	}
	if err := json.Unmarshal(e.srv.Requests(ecsstandin.OpRunTask)[0].Body, &in); err != nil {
		t.Fatal(err)
	}
	if in.LaunchType != "" || len(in.CapacityProviderStrategy) != 1 || in.CapacityProviderStrategy[0].CapacityProvider != "FARGATE_SPOT" ||
		in.NetworkConfiguration.AwsvpcConfiguration.AssignPublicIP != "ENABLED" {
		t.Errorf("RunTask request = %+v", in)
	}
}

func TestStandinEventsParse(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(t)
	s := spec("w-events", "fail")
	if err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	e.awaitStopped(t, s.Handle)
	var last ecsrt.TaskChange
	for i, b := range e.srv.Events() {
		c, err := ecsrt.ParseTaskStateChange(b)
		if err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, b)
		}
		if c.Handle != s.Handle || !c.Supersedes(last.Version) {
			t.Errorf("event %d: handle %q version %d after %d", i, c.Handle, c.Version, last.Version)
		}
		last = c
	}
	ct, ok := last.Container("worker")
	if !last.Stopped() || last.StopCode != ecsrt.StopEssentialContainerExited || !ok || ct.ExitCode == nil || *ct.ExitCode != 3 {
		t.Errorf("last change = %+v, want stopped with the harness's exit code 3", last)
	}
}

func TestNewRefuses(t *testing.T) {
	good := ecsrt.Config{Cluster: "c", TaskDefinition: "td", Container: "worker", Subnets: []string{"subnet-1"},
		Endpoint: "https://galley.example/", Repository: "https://git.example/r.git"}
	tests := []struct {
		name string
		edit func(*ecsrt.Config)
	}{
		{"no cluster", func(c *ecsrt.Config) { c.Cluster = "" }},
		{"no container", func(c *ecsrt.Config) { c.Container = "" }},
		{"no subnets", func(c *ecsrt.Config) { c.Subnets = nil }},
		{"no endpoint", func(c *ecsrt.Config) { c.Endpoint = "" }},
		{"an empty family task definition", func(c *ecsrt.Config) { c.TaskDefinitions = map[string]string{"claude": ""} }},
		{"credentials in the repository", func(c *ecsrt.Config) { c.Repository = "https://user:pw@git.example/r.git" }},
	}
	client := ecs.New(ecs.Options{Region: "us-east-1"})
	if _, err := ecsrt.New(client, good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range tests {
		cfg := good
		tc.edit(&cfg)
		if _, err := ecsrt.New(client, cfg); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%s: New = %v, want invalid", tc.name, err)
		}
	}
	r, _ := ecsrt.New(client, good)
	for _, s := range []service.WorkerSpec{{Token: "x"}, {Handle: "w-1"}} {
		if err := r.Start(context.Background(), s); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Start(%+v) = %v, want invalid", s, err)
		}
	}
}
