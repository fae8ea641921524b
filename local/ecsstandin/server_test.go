//go:build unix

package ecsstandin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

var fakeHarness string

// patience bounds every wait: a guard against hangs, not a speed check.
const patience = 30 * time.Second

func TestMain(m *testing.M) {
	Entrypoint() // the stand-in runs this test binary as each task's init
	tmp, err := os.MkdirTemp("", "ecsstandin-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeHarness = filepath.Join(tmp, "fakeharness")
	if out, err := exec.Command("go", "build", "-o", fakeHarness, "./testdata/fakeharness").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the fake harness: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// testImage is the worker image reference the tests' task definitions
// name; the stand-in maps it to the fake harness.
const testImage = "000000000000.dkr.ecr.us-east-1.amazonaws.com/galley-worker:test"

// harnessImage runs the fake harness, found through the image's PATH.
func harnessImage() Image {
	return Image{Entrypoint: []string{filepath.Base(fakeHarness)},
		Env: map[string]string{"PATH": filepath.Dir(fakeHarness) + ":/usr/bin:/bin"}}
}

// workerDef is a Fargate task definition of one container, worker, that
// runs the test image.
func workerDef(env ...KeyValue) TaskDefinition {
	return TaskDefinition{
		Family: "galley-worker", NetworkMode: "awsvpc", RequiresCompatibilities: []string{"FARGATE"},
		CPU: "1024", Memory: "2048",
		ContainerDefinitions: []ContainerDefinition{{Name: "worker", Image: testImage,
			Environment: append([]KeyValue{{"GALLEY_WORKSPACE", "/workspace"}, {"GALLEY_HOUSE", "house-a"}}, env...)}},
	}
}

// setUp creates the tests' clusters and registers td (revision 1 of its
// family in a fresh stand-in).
func setUp(t *testing.T, srv *Server, td TaskDefinition) {
	t.Helper()
	for _, c := range []string{"galley", "other"} {
		if _, err := srv.CreateCluster(c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.RegisterTaskDefinition(td); err != nil {
		t.Fatal(err)
	}
}

type harness struct {
	srv *Server
	url string

	mu     sync.Mutex
	events [][]byte // what the sink received
}

// newHarness starts a stand-in with the tests' clusters and workerDef
// registered.
func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	return newHarnessDef(t, workerDef(), opts...)
}

func newHarnessDef(t *testing.T, td TaskDefinition, opts ...Option) *harness {
	t.Helper()
	h := &harness{}
	base := []Option{WithDir(t.TempDir()), WithImage(testImage, harnessImage()), WithGrace(2 * time.Second),
		WithSink(func(_ context.Context, ev []byte) error {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, ev)
			return nil
		})}
	srv, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	h.srv, h.url = srv, hs.URL
	setUp(t, srv, td)
	return h
}

// client is the real ECS client pointed at the stand-in.
func (h *harness) client() *ecs.Client {
	return ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(h.url),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDSTANDIN", "standin-dummy", "")})
}

// call posts a raw awsJson1_1 request and decodes the answer.
func (h *harness) call(t *testing.T, op string, body any) (int, map[string]any) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(b))
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("X-Amz-Target", TargetPrefix+op)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDSTANDIN/20250101/us-east-1/ecs/aws4_request, SignedHeaders=host, Signature=00")
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type = %q", ct)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("answer is not JSON: %s", raw)
	}
	return resp.StatusCode, out
}

// runBody is a valid Fargate RunTask request whose harness behaves as mode.
func runBody(token, startedBy, mode string) map[string]any {
	return map[string]any{
		"cluster": "galley", "taskDefinition": "galley-worker:1", "count": 1, "clientToken": token,
		"startedBy": startedBy, "launchType": "FARGATE", "enableECSManagedTags": true,
		"networkConfiguration": map[string]any{"awsvpcConfiguration": map[string]any{
			"subnets": []string{"subnet-1"}, "assignPublicIp": "DISABLED"}},
		"overrides": map[string]any{"containerOverrides": []any{map[string]any{"name": "worker", "environment": []any{
			map[string]string{"name": "GALLEY_BRANCH", "value": "galley/test/" + mode},
			map[string]string{"name": "GALLEY_WORKSPACE", "value": "/workspace/wt-" + token},
		}}}},
		"tags": []any{map[string]string{"key": "galley:worker", "value": startedBy}},
	}
}

func (h *harness) run(t *testing.T, token, startedBy, mode string) string {
	t.Helper()
	status, out := h.call(t, OpRunTask, runBody(token, startedBy, mode))
	tasks, _ := out["tasks"].([]any)
	if status != 200 || len(tasks) != 1 {
		t.Fatalf("RunTask = %d %v", status, out)
	}
	return tasks[0].(map[string]any)["taskArn"].(string)
}

func (h *harness) task(t *testing.T, arn string) TaskInfo {
	t.Helper()
	for _, ti := range h.srv.Tasks() {
		if ti.ARN == arn {
			return ti
		}
	}
	t.Fatalf("no task %s", arn)
	return TaskInfo{}
}

// await polls until the task's lastStatus is want.
func (h *harness) await(t *testing.T, arn, want string) TaskInfo {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		ti := h.task(t, arn)
		if ti.LastStatus == want {
			return ti
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s is %s after %v, want %s", arn, ti.LastStatus, patience, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitHarness waits for the fake harness to record its start; it returns
// the pid.
func (h *harness) awaitHarness(t *testing.T, arn string) int {
	t.Helper()
	ws := h.task(t, arn).Workspace
	deadline := time.Now().Add(patience)
	for {
		b, _ := os.ReadFile(filepath.Join(ws, "starts"))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the harness of %s never started", arn)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestProtocolErrors(t *testing.T) {
	h := newHarness(t)
	auth := "AWS4-HMAC-SHA256 Credential=x"
	tests := []struct {
		name, method, ctype, target, auth, body string
		status                                  int
		code                                    string
	}{
		{"GET", http.MethodGet, ContentType, TargetPrefix + OpListTasks, auth, "{}", 405, "UnknownOperationException"},
		{"content type", http.MethodPost, "application/json", TargetPrefix + OpListTasks, auth, "{}", 400, "SerializationException"},
		{"unsigned", http.MethodPost, ContentType, TargetPrefix + OpListTasks, "", "{}", 403, "MissingAuthenticationTokenException"},
		{"no target", http.MethodPost, ContentType, "", auth, "{}", 400, "UnknownOperationException"},
		{"unknown operation", http.MethodPost, ContentType, TargetPrefix + "DeleteCluster", auth, "{}", 400, "UnknownOperationException"},
		{"not JSON", http.MethodPost, ContentType, TargetPrefix + OpListTasks, auth, "{", 400, "SerializationException"},
	}
	for _, tc := range tests {
		req, _ := http.NewRequest(tc.method, h.url, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ctype)
		req.Header.Set("X-Amz-Target", tc.target)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		status, out := do(t, req)
		if status != tc.status || out["__type"] != tc.code || out["message"] == "" {
			t.Errorf("%s: %d %v, want %d %s", tc.name, status, out, tc.status, tc.code)
		}
	}
	if n := len(h.srv.Requests()); n != len(tests) {
		t.Errorf("recorded %d requests, want %d", n, len(tests))
	}
}

func TestRunTaskValidation(t *testing.T) {
	h := newHarness(t)
	edit := func(f func(map[string]any)) map[string]any {
		b := runBody("tok", "galley-w", "run")
		f(b)
		return b
	}
	override := func(b map[string]any) map[string]any {
		return b["overrides"].(map[string]any)["containerOverrides"].([]any)[0].(map[string]any)
	}
	tests := map[string]map[string]any{
		"no task definition": edit(func(b map[string]any) { delete(b, "taskDefinition") }),
		"no network":         edit(func(b map[string]any) { delete(b, "networkConfiguration") }),
		"another container":  edit(func(b map[string]any) { override(b)["name"] = "sidecar" }),
		"launch type and capacity provider": edit(func(b map[string]any) {
			b["capacityProviderStrategy"] = []any{map[string]any{"capacityProvider": "FARGATE_SPOT", "weight": 1}}
		}),
		"EC2":               edit(func(b map[string]any) { b["launchType"] = "EC2" }),
		"two tasks":         edit(func(b map[string]any) { b["count"] = 2 }),
		"bad startedBy":     edit(func(b map[string]any) { b["startedBy"] = "has space" }),
		"long client token": edit(func(b map[string]any) { b["clientToken"] = strings.Repeat("t", 65) }),
		"reserved tag":      edit(func(b map[string]any) { b["tags"] = []any{map[string]string{"key": "aws:x", "value": "v"}} }),
		"overrides too large": edit(func(b map[string]any) {
			override(b)["environment"] = []any{map[string]string{"name": "BIG", "value": strings.Repeat("v", maxOverrides)}}
		}),
	}
	for name, body := range tests {
		status, out := h.call(t, OpRunTask, body)
		if status != 400 || out["__type"] != "InvalidParameterException" {
			t.Errorf("%s: %d %v, want 400 InvalidParameterException", name, status, out)
		}
	}
	if n := len(h.srv.Tasks()); n != 0 {
		t.Errorf("%d tasks after refused requests", n)
	}
}

func TestClientTokenIdempotency(t *testing.T) {
	h := newHarness(t)
	arn := h.run(t, "tok-1", "galley-w-idem", "run")
	if again := h.run(t, "tok-1", "galley-w-idem", "run"); again != arn {
		t.Errorf("a retry with the same clientToken made %s, want %s", again, arn)
	}
	h.awaitHarness(t, arn)
	// The same token with another request is a conflict naming the task,
	// as the SDK reads it.
	_, err := h.client().RunTask(context.Background(), &ecs.RunTaskInput{
		Cluster: aws.String("galley"), TaskDefinition: aws.String("galley-worker:1"), ClientToken: aws.String("tok-1"),
		LaunchType: types.LaunchTypeFargate, StartedBy: aws.String("galley-w-other"),
		NetworkConfiguration: &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{Subnets: []string{"subnet-1"}}},
	})
	var conflict *types.ConflictException
	if !errors.As(err, &conflict) || !slices.Equal(conflict.ResourceIds, []string{arn}) {
		t.Fatalf("RunTask with a reused token = %v, want ConflictException naming %s", err, arn)
	}
	// Another cluster is another token space.
	b := runBody("tok-1", "galley-w-idem", "exit")
	b["cluster"] = "other"
	if status, _ := h.call(t, OpRunTask, b); status != 200 {
		t.Errorf("the same token in another cluster: %d", status)
	}
	if n := len(h.srv.Tasks()); n != 2 {
		t.Errorf("%d tasks, want 2", n)
	}
	h.srv.Close()
	if starts, _ := os.ReadFile(filepath.Join(h.task(t, arn).Workspace, "starts")); strings.Count(string(starts), "\n") != 1 {
		t.Errorf("the harness started %d times", strings.Count(string(starts), "\n"))
	}
}

func TestLifecycleAndEvents(t *testing.T) {
	h := newHarness(t)
	arn := h.run(t, "tok-life", "galley-w-life", "run")
	h.await(t, arn, "RUNNING")
	h.awaitHarness(t, arn)

	status, out := h.call(t, OpDescribeTasks, map[string]any{"cluster": "galley", "tasks": []string{arn}, "include": []string{"TAGS"}})
	tasks := out["tasks"].([]any)
	if status != 200 || len(tasks) != 1 {
		t.Fatalf("DescribeTasks = %d %v", status, out)
	}
	task := tasks[0].(map[string]any)
	if _, ok := task["startedAt"].(float64); !ok || task["lastStatus"] != "RUNNING" || task["startedBy"] != "galley-w-life" ||
		len(task["tags"].([]any)) != 1 {
		t.Errorf("described task = %v", task)
	}

	status, out = h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn, "reason": "galley: worker stopped"})
	stopped := out["task"].(map[string]any)
	if status != 200 || stopped["desiredStatus"] != "STOPPED" || stopped["lastStatus"] != "RUNNING" {
		t.Errorf("StopTask = %d %v", status, out)
	}
	ti := h.await(t, arn, "STOPPED")
	if ti.StopCode != "UserInitiated" || ti.StoppedReason != "galley: worker stopped" || ti.ExitCode == nil || *ti.ExitCode != 0 {
		t.Errorf("stopped task = %+v", ti)
	}
	// Stopping a stopped task answers it.
	if status, out := h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn}); status != 200 ||
		out["task"].(map[string]any)["lastStatus"] != "STOPPED" {
		t.Errorf("StopTask of a stopped task = %d %v", status, out)
	}

	h.srv.Close() // delivers what is queued
	want := []string{"PROVISIONING", "PENDING", "RUNNING", "RUNNING", "STOPPING", "DEPROVISIONING", "STOPPED"}
	h.mu.Lock()
	events := slices.Clone(h.events)
	h.mu.Unlock()
	if !slices.EqualFunc(events, h.srv.Events(), bytes.Equal) {
		t.Error("the sink received other events than Events lists")
	}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d", len(events), len(want))
	}
	for i, b := range events {
		var ev struct {
			Version    string   `json:"version"`
			DetailType string   `json:"detail-type"`
			Source     string   `json:"source"`
			Resources  []string `json:"resources"`
			Detail     struct {
				LastStatus, DesiredStatus string
				Version                   int64
				CreatedAt, UpdatedAt      string
				StartedBy                 string
				Tags                      []any
			}
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		d := ev.Detail
		if ev.Version != "0" || ev.DetailType != "ECS Task State Change" || ev.Source != "aws.ecs" ||
			!slices.Equal(ev.Resources, []string{arn}) || d.LastStatus != want[i] || d.Version != int64(i+1) ||
			d.StartedBy != "galley-w-life" || d.Tags != nil {
			t.Errorf("event %d = %s", i, b)
		}
		if _, err := time.Parse(time.RFC3339Nano, d.CreatedAt); err != nil {
			t.Errorf("event %d: createdAt %q is not ISO-8601", i, d.CreatedAt)
		}
		if i >= 3 && d.DesiredStatus != "STOPPED" {
			t.Errorf("event %d: desired %s", i, d.DesiredStatus)
		}
	}
}

func TestSelfExit(t *testing.T) {
	h := newHarness(t)
	for mode, code := range map[string]int{"exit": 0, "fail": 3} {
		arn := h.run(t, "tok-"+mode, "galley-w-"+mode, mode)
		ti := h.await(t, arn, "STOPPED")
		if ti.StopCode != "EssentialContainerExited" || ti.StoppedReason != "Essential container in task exited" ||
			ti.ExitCode == nil || *ti.ExitCode != code || ti.DesiredStatus != "STOPPED" {
			t.Errorf("%s: stopped task = %+v, want exit code %d", mode, ti, code)
		}
	}
}

func TestStubbornTaskIsKilled(t *testing.T) {
	h := newHarness(t, WithGrace(200*time.Millisecond))
	arn := h.run(t, "tok-stubborn", "galley-w-stubborn", "stubborn")
	h.await(t, arn, "RUNNING")
	pid := h.awaitHarness(t, arn)
	if status, _ := h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn}); status != 200 {
		t.Fatal(status)
	}
	ti := h.await(t, arn, "STOPPED")
	if ti.StopCode != "UserInitiated" || ti.StoppedReason != "Task stopped by user" {
		t.Errorf("stopped task = %+v", ti)
	}
	awaitGone(t, pid)
}

// gone reports whether pid has ended: no such process, or a zombie (its
// init died with it, and whoever inherits it reaps it when it will).
func gone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func awaitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStopBeforeRunning(t *testing.T) {
	h := newHarness(t)
	arn := h.run(t, "tok-early", "galley-w-early", "run")
	if status, _ := h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn, "reason": "early"}); status != 200 {
		t.Fatal(status)
	}
	ti := h.await(t, arn, "STOPPED")
	if ti.StopCode != "UserInitiated" || ti.StoppedReason != "early" {
		t.Errorf("stopped task = %+v", ti)
	}
}

func TestUnknownTasks(t *testing.T) {
	h := newHarness(t)
	ghost := "arn:aws:ecs:us-east-1:000000000000:task/galley/0123456789abcdef0123456789abcdef"
	status, out := h.call(t, OpDescribeTasks, map[string]any{"cluster": "galley", "tasks": []string{ghost}})
	fails := out["failures"].([]any)
	if status != 200 || len(out["tasks"].([]any)) != 0 || len(fails) != 1 || fails[0].(map[string]any)["reason"] != "MISSING" {
		t.Errorf("DescribeTasks of an unknown task = %d %v", status, out)
	}
	status, out = h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": ghost})
	if status != 400 || out["__type"] != "InvalidParameterException" {
		t.Errorf("StopTask of an unknown task = %d %v", status, out)
	}
}

func TestVisibilityDelay(t *testing.T) {
	h := newHarness(t)
	h.srv.SetVisibilityDelay(time.Hour)
	arn := h.run(t, "tok-late", "galley-w-late", "run")
	h.await(t, arn, "RUNNING")
	_, out := h.call(t, OpDescribeTasks, map[string]any{"cluster": "galley", "tasks": []string{arn}})
	if len(out["tasks"].([]any)) != 0 || len(out["failures"].([]any)) != 1 {
		t.Errorf("DescribeTasks of an invisible task = %v", out)
	}
	_, out = h.call(t, OpListTasks, map[string]any{"cluster": "galley", "startedBy": "galley-w-late"})
	if len(out["taskArns"].([]any)) != 0 {
		t.Errorf("ListTasks shows an invisible task: %v", out)
	}
	if status, _ := h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn}); status != 200 {
		t.Errorf("StopTask by ARN of an invisible task = %d", status)
	}
	h.await(t, arn, "STOPPED")
}

func TestListTasks(t *testing.T) {
	h := newHarness(t)
	h.srv.SetListLag(0)
	a1 := h.run(t, "tok-a1", "galley-w-a", "run")
	a2 := h.run(t, "tok-a2", "galley-w-a", "exit")
	b := h.run(t, "tok-b", "galley-w-b", "run")
	h.await(t, a2, "STOPPED")
	h.await(t, a1, "RUNNING")
	h.await(t, b, "RUNNING")
	list := func(body map[string]any) ([]string, string) {
		status, out := h.call(t, OpListTasks, body)
		if status != 200 {
			t.Fatalf("ListTasks(%v) = %d %v", body, status, out)
		}
		var arns []string
		for _, a := range out["taskArns"].([]any) {
			arns = append(arns, a.(string))
		}
		next, _ := out["nextToken"].(string)
		return arns, next
	}
	if got, _ := list(map[string]any{"cluster": "galley", "startedBy": "galley-w-a"}); !slices.Equal(got, []string{a1}) {
		t.Errorf("running of w-a = %v, want %v", got, []string{a1})
	}
	// startedBy must be ListTasks' only filter (the ECS API reference).
	for _, other := range []map[string]any{{"desiredStatus": "STOPPED"}, {"desiredStatus": "RUNNING"},
		{"family": "galley-worker"}, {"launchType": "FARGATE"}, {"serviceName": "svc"}} {
		body := map[string]any{"cluster": "galley", "startedBy": "galley-w-a"}
		maps.Copy(body, other)
		if status, out := h.call(t, OpListTasks, body); status != 400 || out["__type"] != "InvalidParameterException" ||
			out["message"] != ErrStartedByAlone {
			t.Errorf("ListTasks(%v) = %d %v, want InvalidParameterException", body, status, out)
		}
	}
	if got, _ := list(map[string]any{"cluster": "galley", "family": "galley-worker", "desiredStatus": "STOPPED"}); !slices.Equal(got, []string{a2}) {
		t.Errorf("stopped of the family = %v, want %v", got, []string{a2})
	}
	if got, _ := list(map[string]any{"cluster": "other"}); len(got) != 0 {
		t.Errorf("another cluster lists %v", got)
	}
	first, next := list(map[string]any{"cluster": "galley", "maxResults": 1})
	second, end := list(map[string]any{"cluster": "galley", "maxResults": 1, "nextToken": next})
	if !slices.Equal(append(first, second...), []string{a1, b}) || next == "" || end != "" {
		t.Errorf("pages %v (%q) %v (%q), want [%s] [%s]", first, next, second, end, a1, b)
	}
}

func TestContainerEnvironment(t *testing.T) {
	h := newHarnessDef(t, workerDef(KeyValue{"GALLEY_AGENT", "claude"}))
	body := runBody("tok-env", "galley-w-env", "run")
	co := body["overrides"].(map[string]any)["containerOverrides"].([]any)[0].(map[string]any)
	co["environment"] = append(co["environment"].([]any), map[string]string{"name": "GALLEY_AGENT", "value": "script"})
	status, out := h.call(t, OpRunTask, body)
	if status != 200 {
		t.Fatal(out)
	}
	arn := out["tasks"].([]any)[0].(map[string]any)["taskArn"].(string)
	pid := h.awaitHarness(t, arn)
	ti := h.task(t, arn)
	b, err := os.ReadFile(filepath.Join(ti.Workspace, "env-"+strconv.Itoa(pid)+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(ti.Root, "workspace", "wt-tok-env"); ti.Workspace != want {
		t.Errorf("workspace %s, want %s", ti.Workspace, want)
	}
	for _, want := range []string{"GALLEY_AGENT=script", "GALLEY_HOUSE=house-a", "GALLEY_BRANCH=galley/test/run",
		"GALLEY_WORKSPACE=" + ti.Workspace} {
		if !slices.Contains(env, want) {
			t.Errorf("the harness environment lacks %s: %v", want, env)
		}
	}
	var galley []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "GALLEY_") {
			galley = append(galley, kv[:strings.IndexByte(kv, '=')])
		}
	}
	slices.Sort(galley)
	if want := []string{"GALLEY_AGENT", "GALLEY_BRANCH", "GALLEY_HOUSE", "GALLEY_WORKSPACE"}; !slices.Equal(galley, want) {
		t.Errorf("GALLEY_ variables %v, want exactly the container's %v", galley, want)
	}
}

func TestFaults(t *testing.T) {
	h := newHarness(t)
	h.srv.Inject(Fault{Op: OpRunTask, Code: "ThrottlingException", Message: "Rate exceeded", RetryAfter: 3, Times: 2})
	h.srv.Inject(Fault{Op: OpDescribeTasks, Code: "ServerException", Message: "boom", Status: 500})
	for i := range 2 {
		b, _ := json.Marshal(runBody("tok-f", "galley-w-f", "exit"))
		req, _ := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(b))
		req.Header.Set("Content-Type", ContentType)
		req.Header.Set("X-Amz-Target", TargetPrefix+OpRunTask)
		req.Header.Set("Authorization", "AWS4-HMAC-SHA256 x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("Retry-After") != "3" {
			t.Errorf("call %d: %d, Retry-After %q", i, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	arn := h.run(t, "tok-f", "galley-w-f", "exit")
	for range 2 {
		if status, out := h.call(t, OpDescribeTasks, map[string]any{"tasks": []string{arn}, "cluster": "galley"}); status != 500 || out["__type"] != "ServerException" {
			t.Errorf("DescribeTasks = %d %v, want the injected server fault", status, out)
		}
	}
	h.srv.ClearFaults()
	if status, _ := h.call(t, OpDescribeTasks, map[string]any{"tasks": []string{arn}, "cluster": "galley"}); status != 200 {
		t.Errorf("DescribeTasks after ClearFaults = %d", status)
	}
	h.srv.Inject(Fault{Op: OpRunTask, Failure: "RESOURCE:MEMORY", Times: 1})
	status, out := h.call(t, OpRunTask, runBody("tok-g", "galley-w-g", "exit"))
	fails := out["failures"].([]any)
	if status != 200 || len(out["tasks"].([]any)) != 0 || len(fails) != 1 || fails[0].(map[string]any)["reason"] != "RESOURCE:MEMORY" {
		t.Errorf("RunTask with a capacity failure = %d %v", status, out)
	}
	if n := len(h.srv.Tasks()); n != 1 {
		t.Errorf("%d tasks, want 1", n)
	}
	if n := len(h.srv.Requests(OpRunTask)); n != 4 {
		t.Errorf("%d RunTask requests recorded, want 4", n)
	}
}

func TestCloseStopsTasks(t *testing.T) {
	h := newHarness(t)
	arn := h.run(t, "tok-close", "galley-w-close", "run")
	pid := h.awaitHarness(t, arn)
	if err := h.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(pid) {
		t.Errorf("the harness %d outlived Close", pid)
	}
	if ti := h.task(t, arn); ti.LastStatus != "STOPPED" {
		t.Errorf("task after Close = %+v", ti)
	}
	if status, out := h.call(t, OpRunTask, runBody("tok-after", "galley-w-after", "run")); status != 500 {
		t.Errorf("RunTask after Close = %d %v", status, out)
	}
}

func TestPostSink(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	fails := 1
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			http.Error(w, "not yet", http.StatusBadGateway)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got = append(got, b)
	}))
	defer target.Close()
	h := newHarness(t, WithSink(PostSink(target.Client(), target.URL)))
	arn := h.run(t, "tok-post", "galley-w-post", "exit")
	h.await(t, arn, "STOPPED")
	h.srv.Close()
	mu.Lock()
	defer mu.Unlock()
	if !slices.EqualFunc(got, h.srv.Events(), bytes.Equal) {
		t.Errorf("posted %d events, emitted %d", len(got), len(h.srv.Events()))
	}
}

func TestRestartStopsEarlierTasks(t *testing.T) {
	dir := t.TempDir()
	first, err := New(WithDir(dir), WithImage(testImage, harnessImage()), WithGrace(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	setUp(t, first, workerDef())
	hs := httptest.NewServer(first)
	h := &harness{srv: first, url: hs.URL}
	arn := h.run(t, "tok-orphan", "galley-w-orphan", "run")
	pid := h.awaitHarness(t, arn)
	hs.Close()
	// The first stand-in dies without Close; its process lives on until a
	// new stand-in takes the folder.
	second, err := New(WithDir(dir), WithImage(testImage, harnessImage()), WithGrace(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	awaitGone(t, pid)
	if n := len(second.Tasks()); n != 0 {
		t.Errorf("the new stand-in shows %d tasks", n)
	}
}

// An override's command reaches the harness (the image's entrypoint) as its
// arguments.
func TestCommandOverride(t *testing.T) {
	h := newHarness(t)
	body := runBody("tok-cmd", "galley-cmd", "exit")
	co := body["overrides"].(map[string]any)["containerOverrides"].([]any)[0].(map[string]any)
	co["command"] = []string{"some-command", "/an/argument"}
	co["environment"] = []any{
		map[string]string{"name": "GALLEY_BRANCH", "value": "galley/test/exit"},
		map[string]string{"name": "GALLEY_WORKSPACE", "value": "/workspace/wt-1"},
	}
	status, out := h.call(t, OpRunTask, body)
	tasks, _ := out["tasks"].([]any)
	if status != 200 || len(tasks) != 1 {
		t.Fatalf("RunTask = %d %v", status, out)
	}
	arn := tasks[0].(map[string]any)["taskArn"].(string)
	ti := h.await(t, arn, statusStopped)
	if want := filepath.Join(ti.Root, "workspace", "wt-1"); ti.Workspace != want {
		t.Errorf("workspace = %q, want %q in the task's own storage", ti.Workspace, want)
	}
	if !slices.Equal(ti.Command, []string{"some-command", "/an/argument"}) {
		t.Errorf("task command = %q", ti.Command)
	}
	matches, _ := filepath.Glob(filepath.Join(ti.Workspace, "args-*.json"))
	if len(matches) != 1 {
		t.Fatalf("the harness left %d argument records in its workspace, want 1", len(matches))
	}
	b, _ := os.ReadFile(matches[0])
	var args []string
	if err := json.Unmarshal(b, &args); err != nil || !slices.Equal(args, []string{"some-command", "/an/argument"}) {
		t.Errorf("the harness got arguments %s (%v)", b, err)
	}

	// Without an override the harness gets no arguments.
	arn = h.run(t, "tok-plain", "galley-plain", "exit")
	ti = h.await(t, arn, statusStopped)
	if len(ti.Command) != 0 {
		t.Errorf("task command = %q, want none", ti.Command)
	}
	matches, _ = filepath.Glob(filepath.Join(ti.Workspace, "args-*.json"))
	if len(matches) != 1 {
		t.Fatalf("%d argument records, want 1", len(matches))
	}
	if b, _ := os.ReadFile(matches[0]); string(b) != "[]" {
		t.Errorf("the harness got arguments %s, want none", b)
	}
}
