//go:build unix

package ecsrt_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
)

// describeBodies decodes the DescribeTasks requests from the n-th on.
func (e *env) describeBodies(t *testing.T, from int) [][]string {
	t.Helper()
	var out [][]string
	for _, r := range e.srv.Requests(ecsstandin.OpDescribeTasks)[from:] {
		var in struct{ Tasks []string }
		if err := json.Unmarshal(r.Body, &in); err != nil {
			t.Fatal(err)
		}
		out = append(out, in.Tasks)
	}
	return out
}

// startAll starts a running worker per handle with r and waits until each
// reads live.
func startAll(t *testing.T, r *ecsrt.Runtime, handles ...string) {
	t.Helper()
	for _, h := range handles {
		if err := r.Start(context.Background(), spec(h, "run")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop(context.Background(), h) })
	}
	for _, h := range handles {
		awaitLiveness(t, r, h, service.LivenessLive)
	}
}

// Tasks the runtime knows are described 100 to a call, none listed.
func TestLivenessesDescribeInChunks(t *testing.T) {
	e := newEnv(t)
	// The index knows 250 tasks ECS never had (MISSING: unknown) ...
	idx := &mapIndex{m: map[string]string{}}
	var handles []string
	for i := range 250 {
		h := fmt.Sprintf("w-gone-%03d", i)
		idx.m[h] = fmt.Sprintf("arn:aws:ecs:us-east-1:000000000000:task/galley-test/%032x", i)
		handles = append(handles, h)
	}
	r := e.runtime(t, ecsrt.WithTaskIndex(idx))
	// ... and the runtime one that runs.
	startAll(t, r, "w-real")
	handles = append(handles, "w-real")
	lists, describes := len(e.srv.Requests(ecsstandin.OpListTasks)), len(e.srv.Requests(ecsstandin.OpDescribeTasks))

	got, err := r.Livenesses(context.Background(), handles)
	if err != nil {
		t.Fatal(err)
	}
	if got["w-real"] != service.LivenessLive {
		t.Errorf("w-real = %d, want live", got["w-real"])
	}
	for _, h := range handles[:250] {
		if l, ok := got[h]; !ok || l != service.LivenessUnknown {
			t.Errorf("%s = %d (answered %v), want unknown: ECS has no such task", h, l, ok)
		}
	}
	if n := len(e.srv.Requests(ecsstandin.OpListTasks)) - lists; n != 0 {
		t.Errorf("%d ListTasks calls for remembered tasks, want none", n)
	}
	bodies := e.describeBodies(t, describes)
	if len(bodies) != 3 {
		t.Fatalf("%d DescribeTasks calls for 251 tasks, want 3", len(bodies))
	}
	named := map[string]bool{}
	for _, b := range bodies {
		if len(b) > 100 {
			t.Errorf("a DescribeTasks call named %d tasks", len(b))
		}
		for _, a := range b {
			named[a] = true
		}
	}
	if len(named) != 251 {
		t.Errorf("DescribeTasks named %d distinct tasks, want 251", len(named))
	}
}

// Handles whose tasks nobody remembers (a cold function) are found by one
// listing of the task definition's tasks, then remembered.
func TestLivenessesListTheFamilyOnce(t *testing.T) {
	e := newEnv(t)
	e.srv.SetListLag(0) // the tasks are listed at once
	hs := []string{"w-cold-0", "w-cold-1", "w-cold-2", "w-cold-3"}
	startAll(t, e.runtime(t), hs...)
	cold := e.runtime(t)
	lists, describes := len(e.srv.Requests(ecsstandin.OpListTasks)), len(e.srv.Requests(ecsstandin.OpDescribeTasks))
	got, err := cold.Livenesses(context.Background(), append(hs, "w-never"))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if got[h] != service.LivenessLive {
			t.Errorf("%s = %d, want live", h, got[h])
		}
	}
	if l, ok := got["w-never"]; !ok || l != service.LivenessUnknown {
		t.Errorf("w-never = %d (answered %v), want unknown", l, ok)
	}
	listReqs := e.srv.Requests(ecsstandin.OpListTasks)[lists:]
	if len(listReqs) != 2 {
		t.Errorf("%d ListTasks calls, want 2 (running, stopped)", len(listReqs))
	}
	for _, r := range listReqs {
		var in struct{ Family, StartedBy string }
		_ = json.Unmarshal(r.Body, &in)
		if in.Family != "galley-worker" || in.StartedBy != "" {
			t.Errorf("ListTasks request %s, want the family galley-worker", r.Body)
		}
	}
	if n := len(e.describeBodies(t, describes)); n != 1 {
		t.Errorf("%d DescribeTasks calls, want 1", n)
	}
	// Found once, remembered: the next read only describes.
	lists, describes = len(e.srv.Requests(ecsstandin.OpListTasks)), len(e.srv.Requests(ecsstandin.OpDescribeTasks))
	if _, err := cold.Livenesses(context.Background(), hs); err != nil {
		t.Fatal(err)
	}
	if n := len(e.srv.Requests(ecsstandin.OpListTasks)) - lists; n != 0 {
		t.Errorf("%d ListTasks calls on the second read, want none", n)
	}
	if n := len(e.describeBodies(t, describes)); n != 1 {
		t.Errorf("%d DescribeTasks calls on the second read, want 1", n)
	}
}

// A failed read leaves its workers out of the map (unverifiable), with an
// error; it is no answer of unknown or exited.
func TestLivenessesFailure(t *testing.T) {
	e := newEnv(t)
	r := e.runtime(t)
	startAll(t, r, "w-f-0", "w-f-1")
	e.srv.Inject(ecsstandin.Fault{Op: ecsstandin.OpDescribeTasks, Code: "ClientException", Message: "no"})
	got, err := r.Livenesses(context.Background(), []string{"w-f-0", "w-f-1"})
	if err == nil || len(got) != 0 {
		t.Errorf("Livenesses with DescribeTasks failing = %v, %v; want no answer and an error", got, err)
	}
	e.srv.ClearFaults()
	// A cold runtime whose listing fails answers nothing either.
	e.srv.Inject(ecsstandin.Fault{Op: ecsstandin.OpListTasks, Code: "ClientException", Message: "no"})
	hs := []string{"w-f-0", "w-f-1", "w-f-2", "w-f-3"}
	got, err = e.runtime(t).Livenesses(context.Background(), hs)
	if err == nil || len(got) != 0 {
		t.Errorf("Livenesses with ListTasks failing = %v, %v; want no answer and an error", got, err)
	}
	e.srv.ClearFaults()
	got, err = r.Livenesses(context.Background(), []string{"w-f-0", "w-f-1"})
	if err != nil || got["w-f-0"] != service.LivenessLive || got["w-f-1"] != service.LivenessLive {
		t.Errorf("Livenesses once ECS answers = %v, %v", got, err)
	}
}
