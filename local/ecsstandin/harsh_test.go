//go:build unix

package ecsstandin

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (h *harness) listed(t *testing.T, startedBy string) []any {
	t.Helper()
	status, out := h.call(t, OpListTasks, map[string]any{"cluster": "galley", "startedBy": startedBy})
	if status != 200 {
		t.Fatalf("ListTasks = %d %v", status, out)
	}
	return out["taskArns"].([]any)
}

// ListTasks lags behind RunTask and StopTask by default, as ECS's
// eventually consistent API does; DescribeTasks by ARN does not.
func TestListLag(t *testing.T) {
	if h := newHarness(t); h.srv.listLag != DefaultListLag || DefaultListLag <= 0 {
		t.Fatalf("the default list lag is %v, want %v > 0", h.srv.listLag, DefaultListLag)
	}
	h := newHarness(t)
	h.srv.SetListLag(time.Hour)
	arn := h.run(t, "tok-lag", "galley-w-lag", "run")
	h.srv.SetListLag(0)
	shown := h.run(t, "tok-shown", "galley-w-shown", "run")
	h.await(t, arn, "RUNNING")
	if got := h.listed(t, "galley-w-lag"); len(got) != 0 {
		t.Errorf("a task just started is listed: %v", got)
	}
	if _, out := h.call(t, OpDescribeTasks, map[string]any{"cluster": "galley", "tasks": []string{arn}}); len(out["tasks"].([]any)) != 1 {
		t.Errorf("DescribeTasks by ARN = %v", out)
	}
	if got := h.listed(t, "galley-w-shown"); len(got) != 1 {
		t.Fatalf("listed %v, want the task started without a lag", got)
	}
	h.srv.SetListLag(time.Hour)
	if status, _ := h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": shown}); status != 200 {
		t.Fatal("StopTask failed")
	}
	h.await(t, shown, "STOPPED")
	if got := h.listed(t, "galley-w-shown"); len(got) != 1 {
		t.Errorf("a task just stopped left the RUNNING listing at once: %v", got)
	}
}

// ECS remembers a clientToken for 24 hours, then forgets it.
func TestTokenWindow(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	h := newHarness(t, WithClock(clock.Now))
	first := h.run(t, "tok-day", "galley-w-day", "run")
	clock.advance(TokenWindow - time.Minute)
	if again := h.run(t, "tok-day", "galley-w-day", "run"); again != first {
		t.Fatalf("within the window the token made %s, want %s", again, first)
	}
	clock.advance(2 * time.Minute)
	if later := h.run(t, "tok-day", "galley-w-day", "run"); later == first {
		t.Fatal("after 24 hours the token still names its first task")
	}
	if n := len(h.srv.Tasks()); n != 2 {
		t.Errorf("%d tasks, want 2", n)
	}
}

// A fresh account's Fargate vCPU quota refuses tasks in failures[], with
// AWS's reason; a quota of one vCPU takes one 1024-unit task at a time.
func TestVCPUQuota(t *testing.T) {
	refused := func(h *harness, token string) bool {
		t.Helper()
		status, out := h.call(t, OpRunTask, runBody(token, "galley-w-q", "run"))
		fails, _ := out["failures"].([]any)
		if status != 200 {
			t.Fatalf("RunTask = %d %v", status, out)
		}
		if len(fails) == 1 {
			if r := fails[0].(map[string]any)["reason"]; r != ReasonVCPUQuota {
				t.Fatalf("failure reason %v", r)
			}
			return true
		}
		return false
	}
	zero := newHarness(t, WithVCPUQuota(0))
	if !refused(zero, "tok-q0") || len(zero.srv.Tasks()) != 0 {
		t.Fatalf("a zero quota ran a task: %+v", zero.srv.Tasks())
	}
	h := newHarness(t, WithVCPUQuota(1))
	if refused(h, "tok-q1") {
		t.Fatal("the first task was refused")
	}
	if refused(h, "tok-q1") {
		t.Fatal("a retry of the first task's token was refused: the token names a task")
	}
	if !refused(h, "tok-q2") {
		t.Fatal("a second task was accepted beyond the quota")
	}
	arn := h.srv.Tasks()[0].ARN
	h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn})
	h.await(t, arn, "STOPPED")
	if refused(h, "tok-q3") {
		t.Fatal("a task was refused once the first stopped")
	}
}

// Tasks that fail to start stop with TaskFailedToStart and AWS's reason; a
// task stuck in PROVISIONING stays there until stopped.
func TestStartFailures(t *testing.T) {
	h := newHarness(t)
	for i, reason := range []string{ReasonImagePull, ReasonSecrets, ReasonEFSMount} {
		h.srv.InjectStartFailure(StartFailure{Reason: reason, Times: 1})
		arn := h.run(t, fmt.Sprint("tok-fail-", i), "galley-w-fail", "run")
		ti := h.await(t, arn, "STOPPED")
		if ti.StopCode != "TaskFailedToStart" || ti.StoppedReason != reason || ti.Launched {
			t.Errorf("%s: stopped task = %+v", reason, ti)
		}
	}
	h.srv.InjectStartFailure(StartFailure{Stuck: time.Hour, Times: 1})
	arn := h.run(t, "tok-stuck", "galley-w-stuck", "run")
	time.Sleep(10 * watchEvery) // long enough to leave PROVISIONING, were it not stuck
	if ti := h.task(t, arn); ti.LastStatus != "PROVISIONING" {
		t.Fatalf("the stuck task is %s", ti.LastStatus)
	}
	h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn})
	if ti := h.await(t, arn, "STOPPED"); ti.StopCode != "UserInitiated" || ti.Launched {
		t.Errorf("the stuck task stopped as %+v", ti)
	}
	if ti := h.task(t, h.run(t, "tok-after", "galley-w-after", "run")); ti.StopCode != "" {
		t.Errorf("a task after the injected failures = %+v", ti)
	}
}
