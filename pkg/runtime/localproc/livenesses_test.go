//go:build unix

package localproc

import (
	"context"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/service"
)

// awaitLivenesses polls r's batch read until every handle reads as want.
func awaitLivenesses(t *testing.T, r *Runtime, want map[string]service.Liveness) {
	t.Helper()
	hs := make([]string, 0, len(want))
	for h := range want {
		hs = append(hs, h)
	}
	deadline := time.Now().Add(patience)
	for {
		got, err := r.Livenesses(context.Background(), hs)
		if err != nil {
			t.Fatalf("Livenesses: %v", err)
		}
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Livenesses = %v, want %v", got, want)
		}
		time.Sleep(pollStep)
	}
}

// A harness killed by someone else reads exited in the batch: the reaper
// sees its end and records it.
func TestLivenessesSeeAKill(t *testing.T) {
	r := newRuntime(t, "")
	a, b := fakeSpec(r, "w-killed", "run"), fakeSpec(r, "w-spared", "run")
	for _, s := range []service.WorkerSpec{a, b} {
		if err := r.Start(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	rec := awaitRecord(t, a.WorkspacePath)
	awaitRecord(t, b.WorkspacePath)
	awaitLivenesses(t, r, map[string]service.Liveness{a.Handle: service.LivenessLive, b.Handle: service.LivenessLive})
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLivenesses(t, r, map[string]service.Liveness{a.Handle: service.LivenessExited, b.Handle: service.LivenessLive})
}

// A harness an earlier Runtime started is no child of this one, and nothing
// tells it of its end: the batch verifies it each time.
func TestLivenessesVerifyAnEarlierServersWorker(t *testing.T) {
	dir := t.TempDir()
	old := newRuntime(t, dir)
	spec := fakeSpec(old, "w-inherited", "run")
	if err := old.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, spec.WorkspacePath)
	// Closed, the old Runtime reaps nothing: the harness ends as a zombie
	// of this process, as the new one must see.
	old.Close()
	r := newRuntime(t, dir)
	awaitLivenesses(t, r, map[string]service.Liveness{spec.Handle: service.LivenessLive})
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLivenesses(t, r, map[string]service.Liveness{spec.Handle: service.LivenessExited})
	// And a closed Runtime, whose reaper no longer runs, checks its own.
	awaitLivenesses(t, old, map[string]service.Liveness{spec.Handle: service.LivenessExited})
}

// A closed Runtime has no reaper to learn of its children's ends: its batch
// checks them.
func TestLivenessesAfterClose(t *testing.T) {
	r := newRuntime(t, "")
	spec := fakeSpec(r, "w-after-close", "run")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, spec.WorkspacePath)
	r.Close()
	awaitLivenesses(t, r, map[string]service.Liveness{spec.Handle: service.LivenessLive})
	if err := syscall.Kill(rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	awaitLivenesses(t, r, map[string]service.Liveness{spec.Handle: service.LivenessExited})
}

// Malformed handles read unknown, beside the others, without an error:
// one bad row must not make the whole inventory unverifiable.
func TestLivenessesMalformedHandles(t *testing.T) {
	r := newRuntime(t, "")
	spec := fakeSpec(r, "w-fine", "run")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	bad := []string{"", "..", "a/b", strings.Repeat("x", 129)}
	want := map[string]service.Liveness{spec.Handle: service.LivenessLive}
	for _, h := range bad {
		want[h] = service.LivenessUnknown
	}
	awaitLivenesses(t, r, want)
}
