// Package runtimetest is the shared suite every service.Runtime passes,
// whether its workers are local processes or ECS tasks: Start is idempotent
// per handle (also under concurrent calls, also after the worker ended),
// Stop ends a worker and is idempotent, Liveness tells live, exited and
// unknown apart, Livenesses says the same of many workers at once (also in
// a runtime that remembers nothing of them, as after a restart) at a cost
// that does not grow with them, and RemoveWorkspace deletes only inside its
// folder.
//
// An implementation's test supplies a Harness that builds a fresh runtime
// with fake workers: a local runtime runs a fake harness binary, an ECS
// runtime points the AWS SDK at a stand-in ECS endpoint whose tasks behave
// as asked. The suite never asserts speed: it polls with a generous bound
// (Subject.Patience) that only guards against hangs.
package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Behavior is what a fake worker does once started.
type Behavior int

const (
	// RunsUntilStopped: the worker runs until Stop ends it.
	RunsUntilStopped Behavior = iota
	// ExitsByItself: the worker ends soon after starting, with no Stop.
	ExitsByItself
)

func (b Behavior) String() string {
	if b == ExitsByItself {
		return "exits-by-itself"
	}
	return "runs-until-stopped"
}

// Subject is one fresh runtime under test and the means to drive it.
type Subject struct {
	// Runtime has no worker yet. The harness releases it (and kills what it
	// left running) in t.Cleanup.
	Runtime service.Runtime
	// Spec returns a spec for handle whose worker behaves as b.
	Spec func(handle string, b Behavior) service.WorkerSpec
	// Starts reports how many workers were really started for handle:
	// processes spawned, tasks created (not RunTask calls that converged on
	// an existing task). It may lag a start; the suite polls it.
	Starts func(handle string) int
	// Workspaces is the folder under which RemoveWorkspace may delete; the
	// suite creates directories in it. Empty skips the workspace checks,
	// for a runtime whose workspaces live with its tasks.
	Workspaces string
	// Patience bounds every wait for a state; zero means 30 s.
	Patience time.Duration
	// Restart, when set, returns another runtime over the same workers that
	// remembers nothing of them, as a restarted server or a cold function
	// builds it. Nil skips the checks after a restart.
	Restart func() service.Runtime
	// Calls, when set, counts the calls made so far to the platform the
	// workers run on (ECS requests). Nil skips the checks that a batch
	// costs the same however many handles it holds.
	Calls func() int
}

// Harness returns a fresh Subject for one subtest. Subtests run in
// parallel, so it must not use t.Setenv.
type Harness func(t *testing.T) Subject

// pollEvery is how often the suite re-reads liveness or a start count.
const pollEvery = 20 * time.Millisecond

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"StartIsLive", testStartIsLive},
		{"StartTwiceStartsOnce", testStartTwice},
		{"ConcurrentStartsStartOnce", testConcurrentStarts},
		{"StartAfterExitStartsNothing", testStartAfterExit},
		{"StopEndsWorker", testStop},
		{"StopRightAfterStart", testStopRightAfterStart},
		{"StopExitedWorker", testStopExited},
		{"StopUnknown", testStopUnknown},
		{"LivenessUnknown", testLivenessUnknown},
		{"SelfExit", testSelfExit},
		{"WorkersAreIndependent", testIndependent},
		{"LivenessesAgree", testLivenessesAgree},
		{"LivenessesFollowStop", testLivenessesFollowStop},
		{"LivenessesEmpty", testLivenessesEmpty},
		{"LivenessesCostNoMoreForMore", testLivenessesCost},
		{"LivenessesAfterRestart", testLivenessesAfterRestart},
		{"RemoveWorkspace", testRemoveWorkspace},
		{"RemoveWorkspaceStaysInside", testRemoveWorkspaceInside},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := h(t)
			if s.Runtime == nil || s.Spec == nil || s.Starts == nil {
				t.Fatal("runtimetest: the harness left Runtime, Spec or Starts unset")
			}
			if s.Patience <= 0 {
				s.Patience = 30 * time.Second
			}
			tc.run(t, &suite{Subject: s, t: t})
		})
	}
}

// suite wraps a Subject with helpers that fail t.
type suite struct {
	Subject
	t *testing.T
}

// start starts a worker and stops it at cleanup, whatever the test did.
func (s *suite) start(handle string, b Behavior) service.WorkerSpec {
	s.t.Helper()
	spec := s.Spec(handle, b)
	s.t.Cleanup(func() { _ = s.Runtime.Stop(context.Background(), handle) })
	if err := s.Runtime.Start(context.Background(), spec); err != nil {
		s.t.Fatalf("Start(%s): %v", handle, err)
	}
	return spec
}

func (s *suite) stop(handle string) {
	s.t.Helper()
	if err := s.Runtime.Stop(context.Background(), handle); err != nil {
		s.t.Fatalf("Stop(%s): %v", handle, err)
	}
}

func (s *suite) liveness(handle string) service.Liveness {
	s.t.Helper()
	l, err := s.Runtime.Liveness(context.Background(), handle)
	if err != nil {
		s.t.Fatalf("Liveness(%s): %v", handle, err)
	}
	return l
}

// await polls until handle's liveness is want. Unknown may show while a
// platform catches up; a worker expected live must not read exited.
func (s *suite) await(handle string, want service.Liveness) {
	s.t.Helper()
	deadline := time.Now().Add(s.Patience)
	for {
		got := s.liveness(handle)
		if got == want {
			return
		}
		if want == service.LivenessLive && got == service.LivenessExited {
			s.t.Fatalf("Liveness(%s) = exited, want live", handle)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Liveness(%s) = %s after %v, want %s", handle, name(got), s.Patience, name(want))
		}
		time.Sleep(pollEvery)
	}
}

// awaitStarts polls until at least n workers were started for handle.
func (s *suite) awaitStarts(handle string, n int) {
	s.t.Helper()
	deadline := time.Now().Add(s.Patience)
	for s.Starts(handle) < n {
		if time.Now().After(deadline) {
			s.t.Fatalf("Starts(%s) = %d after %v, want %d", handle, s.Starts(handle), s.Patience, n)
		}
		time.Sleep(pollEvery)
	}
}

func (s *suite) wantStarts(handle string, n int) {
	s.t.Helper()
	if got := s.Starts(handle); got != n {
		s.t.Errorf("Starts(%s) = %d, want %d", handle, got, n)
	}
}

func name(l service.Liveness) string {
	switch l {
	case service.LivenessLive:
		return "live"
	case service.LivenessExited:
		return "exited"
	case service.LivenessUnknown:
		return "unknown"
	}
	return fmt.Sprintf("liveness(%d)", int(l))
}

func testStartIsLive(t *testing.T, s *suite) {
	s.start("w-live", RunsUntilStopped)
	s.await("w-live", service.LivenessLive)
	s.awaitStarts("w-live", 1)
}

func testStartTwice(t *testing.T, s *suite) {
	const h = "w-twice"
	spec := s.start(h, RunsUntilStopped)
	if err := s.Runtime.Start(context.Background(), spec); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	s.await(h, service.LivenessLive)
	s.awaitStarts(h, 1)
	// A second worker would survive the stop of the one the runtime tracks.
	s.stop(h)
	s.await(h, service.LivenessExited)
	s.wantStarts(h, 1)
}

func testConcurrentStarts(t *testing.T, s *suite) {
	const h, n = "w-concurrent", 8
	spec := s.Spec(h, RunsUntilStopped)
	t.Cleanup(func() { _ = s.Runtime.Stop(context.Background(), h) })
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.Runtime.Start(context.Background(), spec) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Start: %v", err)
	}
	s.await(h, service.LivenessLive)
	s.awaitStarts(h, 1)
	s.stop(h)
	s.await(h, service.LivenessExited)
	s.wantStarts(h, 1)
}

func testStartAfterExit(t *testing.T, s *suite) {
	const h = "w-restart"
	spec := s.start(h, ExitsByItself)
	s.await(h, service.LivenessExited)
	s.awaitStarts(h, 1)
	if err := s.Runtime.Start(context.Background(), spec); err != nil {
		t.Fatalf("Start after exit: %v", err)
	}
	if got := s.liveness(h); got != service.LivenessExited {
		t.Errorf("Liveness after a second Start = %s, want exited: a worker is started once", name(got))
	}
	s.wantStarts(h, 1)
}

func testStop(t *testing.T, s *suite) {
	const h = "w-stop"
	s.start(h, RunsUntilStopped)
	s.await(h, service.LivenessLive)
	s.stop(h)
	s.await(h, service.LivenessExited)
	s.stop(h) // twice is fine
	if got := s.liveness(h); got != service.LivenessExited {
		t.Errorf("Liveness after a second Stop = %s, want exited", name(got))
	}
}

func testStopRightAfterStart(t *testing.T, s *suite) {
	const h = "w-stop-early"
	s.start(h, RunsUntilStopped)
	s.stop(h)
	s.await(h, service.LivenessExited)
}

func testStopExited(t *testing.T, s *suite) {
	const h = "w-stop-exited"
	s.start(h, ExitsByItself)
	s.await(h, service.LivenessExited)
	s.stop(h)
	if got := s.liveness(h); got != service.LivenessExited {
		t.Errorf("Liveness after Stop of an exited worker = %s, want exited", name(got))
	}
}

func testStopUnknown(t *testing.T, s *suite) {
	s.stop("w-never-started")
	s.stop("w-never-started")
	if got := s.liveness("w-never-started"); got != service.LivenessUnknown {
		t.Errorf("Liveness after Stop of an unknown worker = %s, want unknown", name(got))
	}
}

func testLivenessUnknown(t *testing.T, s *suite) {
	if got := s.liveness("w-never-started"); got != service.LivenessUnknown {
		t.Errorf("Liveness of a handle never started = %s, want unknown", name(got))
	}
}

func testSelfExit(t *testing.T, s *suite) {
	s.start("w-self-exit", ExitsByItself)
	s.await("w-self-exit", service.LivenessExited)
	s.awaitStarts("w-self-exit", 1)
}

func testIndependent(t *testing.T, s *suite) {
	s.start("w-a", RunsUntilStopped)
	s.start("w-b", RunsUntilStopped)
	s.await("w-a", service.LivenessLive)
	s.await("w-b", service.LivenessLive)
	s.awaitStarts("w-a", 1)
	s.awaitStarts("w-b", 1)
	s.stop("w-a")
	s.await("w-a", service.LivenessExited)
	if got := s.liveness("w-b"); got != service.LivenessLive {
		t.Errorf("Liveness(w-b) after stopping w-a = %s, want live", name(got))
	}
	s.wantStarts("w-a", 1)
	s.wantStarts("w-b", 1)
}

// livenesses is one batch read of rt; it fails the test on error.
func (s *suite) livenesses(rt service.Runtime, handles ...string) map[string]service.Liveness {
	s.t.Helper()
	got, err := rt.Livenesses(context.Background(), handles)
	if err != nil {
		s.t.Fatalf("Livenesses(%v): %v", handles, err)
	}
	for _, h := range handles {
		if _, ok := got[h]; !ok {
			s.t.Fatalf("Livenesses(%v) = %v: no answer for %s", handles, got, h)
		}
	}
	return got
}

// awaitAll polls rt's batch read until every handle reads as want says.
// A worker expected live must not read exited.
func (s *suite) awaitAll(rt service.Runtime, want map[string]service.Liveness) {
	s.t.Helper()
	handles := slices.Sorted(maps.Keys(want))
	deadline := time.Now().Add(s.Patience)
	for {
		got := s.livenesses(rt, handles...)
		if maps.Equal(got, want) {
			return
		}
		for h, w := range want {
			if w == service.LivenessLive && got[h] == service.LivenessExited {
				s.t.Fatalf("Livenesses: %s = exited, want live", h)
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("Livenesses = %s after %v, want %s", names(got), s.Patience, names(want))
		}
		time.Sleep(pollEvery)
	}
}

func names(m map[string]service.Liveness) string {
	var b strings.Builder
	for _, h := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s:%s ", h, name(m[h]))
	}
	return strings.TrimSpace(b.String())
}

func testLivenessesAgree(t *testing.T, s *suite) {
	s.start("w-batch-live", RunsUntilStopped)
	s.start("w-batch-exit", ExitsByItself)
	s.await("w-batch-live", service.LivenessLive)
	s.await("w-batch-exit", service.LivenessExited)
	want := map[string]service.Liveness{
		"w-batch-live": service.LivenessLive, "w-batch-exit": service.LivenessExited,
		"w-never-started": service.LivenessUnknown,
	}
	got := s.livenesses(s.Runtime, "w-batch-live", "w-batch-exit", "w-never-started")
	if !maps.Equal(got, want) {
		t.Errorf("Livenesses = %s, want %s", names(got), names(want))
	}
	for h, l := range got {
		if one := s.liveness(h); one != l {
			t.Errorf("%s: Livenesses says %s, Liveness %s", h, name(l), name(one))
		}
	}
}

func testLivenessesFollowStop(t *testing.T, s *suite) {
	const a, b = "w-batch-a", "w-batch-b"
	s.start(a, RunsUntilStopped)
	s.start(b, RunsUntilStopped)
	s.awaitAll(s.Runtime, map[string]service.Liveness{a: service.LivenessLive, b: service.LivenessLive})
	s.stop(a)
	s.awaitAll(s.Runtime, map[string]service.Liveness{a: service.LivenessExited, b: service.LivenessLive})
	if got := s.liveness(a); got != service.LivenessExited {
		t.Errorf("Liveness(%s) = %s after the batch read it exited", a, name(got))
	}
}

func testLivenessesEmpty(t *testing.T, s *suite) {
	for _, hs := range [][]string{nil, {}} {
		got, err := s.Runtime.Livenesses(context.Background(), hs)
		if err != nil || len(got) != 0 {
			t.Errorf("Livenesses(%v) = %v, %v; want an empty map", hs, got, err)
		}
	}
}

// testLivenessesCost reads one worker, then several, in a batch: the
// platform sees as many calls for both.
func testLivenessesCost(t *testing.T, s *suite) {
	if s.Calls == nil {
		t.Skip("the runtime calls no platform")
	}
	hs := []string{"w-cost-0", "w-cost-1", "w-cost-2", "w-cost-3", "w-cost-4", "w-cost-5"}
	want := map[string]service.Liveness{}
	for _, h := range hs {
		s.start(h, RunsUntilStopped)
		want[h] = service.LivenessLive
	}
	s.awaitAll(s.Runtime, want)
	before := s.Calls()
	s.livenesses(s.Runtime, hs[0])
	one := s.Calls() - before
	before = s.Calls()
	got := s.livenesses(s.Runtime, hs...)
	all := s.Calls() - before
	if all != one {
		t.Errorf("Livenesses of %d workers made %d platform calls, of one worker %d", len(hs), all, one)
	}
	if !maps.Equal(got, want) {
		t.Errorf("Livenesses = %s, want %s", names(got), names(want))
	}
}

// testLivenessesAfterRestart reads workers through a runtime that did not
// start them, which must still tell live from exited (and see a stop), in
// fewer platform calls than it has handles.
func testLivenessesAfterRestart(t *testing.T, s *suite) {
	if s.Restart == nil {
		t.Skip("the harness cannot restart the runtime")
	}
	live := []string{"w-re-0", "w-re-1", "w-re-2", "w-re-3", "w-re-4"}
	want := map[string]service.Liveness{"w-re-exit": service.LivenessExited, "w-re-never": service.LivenessUnknown}
	for _, h := range live {
		s.start(h, RunsUntilStopped)
		want[h] = service.LivenessLive
	}
	s.start("w-re-exit", ExitsByItself)
	s.awaitAll(s.Runtime, want)
	rt := s.Restart()
	before := 0
	if s.Calls != nil {
		before = s.Calls()
	}
	handles := slices.Sorted(maps.Keys(want))
	got := s.livenesses(rt, handles...)
	if s.Calls != nil {
		if n := s.Calls() - before; n >= len(handles) {
			t.Errorf("Livenesses of %d workers after a restart made %d platform calls", len(handles), n)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("Livenesses after a restart = %s, want %s", names(got), names(want))
	}
	if err := rt.Stop(context.Background(), live[0]); err != nil {
		t.Fatalf("Stop(%s) after a restart: %v", live[0], err)
	}
	want[live[0]] = service.LivenessExited
	s.awaitAll(rt, want)
}

// mkTree makes dir with a nested file and returns the file's path.
func mkTree(t *testing.T, dir string) string {
	t.Helper()
	f := filepath.Join(dir, "sub", "file")
	if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("work"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func testRemoveWorkspace(t *testing.T, s *suite) {
	if s.Workspaces == "" {
		t.Skip("the runtime has no workspace folder")
	}
	ws := filepath.Join(s.Workspaces, "ws-remove")
	mkTree(t, ws)
	if err := s.Runtime.RemoveWorkspace(context.Background(), "w-ws", ws); err != nil {
		t.Fatalf("RemoveWorkspace: %v", err)
	}
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace still there after RemoveWorkspace: %v", err)
	}
	if err := s.Runtime.RemoveWorkspace(context.Background(), "w-ws", ws); err != nil {
		t.Errorf("RemoveWorkspace of a removed workspace: %v", err)
	}
	if _, err := os.Stat(s.Workspaces); err != nil {
		t.Errorf("the workspaces folder itself went: %v", err)
	}
}

func testRemoveWorkspaceInside(t *testing.T, s *suite) {
	if s.Workspaces == "" {
		t.Skip("the runtime has no workspace folder")
	}
	outside := t.TempDir()
	precious := mkTree(t, outside)
	// A link inside the folder that leads outside it.
	link := filepath.Join(s.Workspaces, "ws-link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	refused := []struct{ name, path string }{
		{"outside", outside},
		{"outside file", precious},
		{"the folder itself", s.Workspaces},
		{"dot-dot", filepath.Join(s.Workspaces, "..", filepath.Base(s.Workspaces)+"-x")},
		{"dot-dot into outside", s.Workspaces + "/../../../../../../../.." + outside},
		{"relative", "ws-relative"},
		{"through a link", filepath.Join(link, "sub")},
	}
	for _, tc := range refused {
		err := s.Runtime.RemoveWorkspace(context.Background(), "w-ws", tc.path)
		if !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%s: RemoveWorkspace(%q) = %v, want an invalid error", tc.name, tc.path, err)
		}
	}
	// Removing the link itself is inside the folder: the link goes, its
	// target stays.
	if err := s.Runtime.RemoveWorkspace(context.Background(), "w-ws", link); err != nil {
		t.Errorf("RemoveWorkspace of a link inside the folder: %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("a file outside the workspaces folder went: %v", err)
	}
	if _, err := os.Stat(s.Workspaces); err != nil {
		t.Errorf("the workspaces folder itself went: %v", err)
	}
}
