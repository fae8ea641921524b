package ecsstandin

import (
	"testing"
	"time"
)

// Usage counts a task's billed time while it runs, and stops counting it
// once it stopped: two readings after the stop are equal.
func TestUsageTaskSeconds(t *testing.T) {
	h := newHarness(t)
	if u := h.srv.Usage(); u != (TaskUsage{}) {
		t.Fatalf("usage before any task: %+v", u)
	}
	arn := h.run(t, "tok-usage", "galley-w-usage", "run")
	h.await(t, arn, "RUNNING")
	first := h.srv.Usage()
	time.Sleep(20 * time.Millisecond)
	second := h.srv.Usage()
	if first.Started != 1 || first.Running != 1 || second.TaskSeconds <= first.TaskSeconds {
		t.Fatalf("a running task: %+v then %+v, want its time growing", first, second)
	}
	h.call(t, OpStopTask, map[string]any{"cluster": "galley", "task": arn})
	h.await(t, arn, "STOPPED")
	stopped := h.srv.Usage()
	time.Sleep(20 * time.Millisecond)
	if again := h.srv.Usage(); again != stopped || stopped.Running != 0 || stopped.TaskSeconds < second.TaskSeconds {
		t.Fatalf("a stopped task: %+v then %+v, want its time fixed", stopped, again)
	}
}
