// Package doorbelltest is the shared conformance suite for doorbells
// (service.Doorbell): every implementation (localbell in process, sqsbell on
// SQS) runs it. It checks only what the service relies on: a ring after
// Listen wakes Wait, Wait ends at its context's deadline without a ring, a
// ring before Listen never costs a later ring, duplicate rings are harmless,
// topics are isolated, and one ring wakes every listener of its topic once
// (an orphaned await beside a fresh one, two coordinators before an
// adoption), whether it was waiting when the ring came or waits later.
// RunProcesses checks the last across processes that share a backend.
package doorbelltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/service"
)

// Quiet is how long the suite waits to see that no ring arrives. It bounds
// the suite's run time, never a speed the implementation must reach.
const Quiet = 300 * time.Millisecond

// wakeBound is the deadline for a wake that must come; a correct doorbell
// wakes far sooner, so reaching it means the ring was lost.
const wakeBound = 15 * time.Second

// Run runs the suite; open returns a doorbell for one subtest (it may share
// a backend with other subtests: topics are unique per subtest).
func Run(t *testing.T, open func(t *testing.T) service.Doorbell) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b service.Doorbell, topic func(string) string)
	}{
		{"RingAfterListenWakes", ringAfterListenWakes},
		{"DeadlineWithoutRing", deadlineWithoutRing},
		{"RingBeforeListenLosesNoLaterRing", ringBeforeListen},
		{"RingWhileWaiting", ringWhileWaiting},
		{"RepeatedWakes", repeatedWakes},
		{"DuplicateRingsHarmless", duplicateRings},
		{"TopicsIsolated", topicsIsolated},
		{"EveryListenerWakes", everyListenerWakes},
		{"EveryWaitingListenerWakes", everyWaitingListenerWakes},
		{"ListenerWaitingLaterWakes", listenerWaitingLater},
		{"OneRingWakesOnce", oneRingWakesOnce},
		{"CloseEndsListener", closeEndsListener},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := open(t)
			prefix := randomPrefix(t)
			tc.fn(t, b, func(s string) string { return prefix + "/" + s })
		})
	}
}

func randomPrefix(t *testing.T) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "run-" + hex.EncodeToString(b[:])
}

func listen(t *testing.T, b service.Doorbell, topic string) service.Listener {
	t.Helper()
	l, err := b.Listen(t.Context(), topic)
	if err != nil {
		t.Fatalf("Listen(%q): %v", topic, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func ring(t *testing.T, b service.Doorbell, topic string) {
	t.Helper()
	if err := b.Ring(t.Context(), topic); err != nil {
		t.Fatalf("Ring(%q): %v", topic, err)
	}
}

// wait waits up to d and returns Wait's result.
func wait(t *testing.T, l service.Listener, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return l.Wait(ctx)
}

func mustWake(t *testing.T, l service.Listener) {
	t.Helper()
	if err := wait(t, l, wakeBound); err != nil {
		t.Fatalf("Wait after a ring = %v, want nil (the ring was lost)", err)
	}
}

func mustStayQuiet(t *testing.T, l service.Listener) {
	t.Helper()
	if err := wait(t, l, Quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a ring = %v, want context.DeadlineExceeded", err)
	}
}

// drain consumes pending (coalesced or duplicated) wakes and fails if they
// never stop.
func drain(t *testing.T, l service.Listener) {
	t.Helper()
	for range 12 {
		err := wait(t, l, Quiet)
		if errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatalf("Wait while draining = %v", err)
		}
	}
	t.Fatal("Wait keeps waking with no new ring")
}

func ringAfterListenWakes(t *testing.T, b service.Doorbell, topic func(string) string) {
	l := listen(t, b, topic("a"))
	ring(t, b, topic("a"))
	mustWake(t, l)
}

func deadlineWithoutRing(t *testing.T, b service.Doorbell, topic func(string) string) {
	l := listen(t, b, topic("a"))
	mustStayQuiet(t, l)
	// A listener that reached its deadline still wakes on a later ring.
	ring(t, b, topic("a"))
	mustWake(t, l)
}

func ringBeforeListen(t *testing.T, b service.Doorbell, topic func(string) string) {
	ring(t, b, topic("a"))
	l := listen(t, b, topic("a"))
	// The earlier ring may or may not wake this listener ...
	if err := wait(t, l, Quiet); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v", err)
	}
	// ... but it never costs a later one.
	ring(t, b, topic("a"))
	mustWake(t, l)
}

func ringWhileWaiting(t *testing.T, b service.Doorbell, topic func(string) string) {
	l := listen(t, b, topic("a"))
	done := make(chan error, 1)
	go func() { done <- wait(t, l, wakeBound) }()
	// Give Wait time to block in its receive; the result must be the same
	// whether or not it did.
	time.Sleep(100 * time.Millisecond)
	if err := b.Ring(context.Background(), topic("a")); err != nil {
		t.Fatalf("Ring: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait blocked before the ring = %v, want nil", err)
	}
}

func repeatedWakes(t *testing.T, b service.Doorbell, topic func(string) string) {
	l := listen(t, b, topic("a"))
	for i := range 3 {
		ring(t, b, topic("a"))
		if err := wait(t, l, wakeBound); err != nil {
			t.Fatalf("wake %d: %v", i, err)
		}
	}
}

func duplicateRings(t *testing.T, b service.Doorbell, topic func(string) string) {
	l := listen(t, b, topic("a"))
	for range 5 {
		ring(t, b, topic("a"))
	}
	mustWake(t, l)
	drain(t, l)
	ring(t, b, topic("a"))
	mustWake(t, l)
}

func topicsIsolated(t *testing.T, b service.Doorbell, topic func(string) string) {
	la := listen(t, b, topic("a"))
	lb := listen(t, b, topic("b"))
	ring(t, b, topic("b"))
	mustWake(t, lb)
	mustStayQuiet(t, la)
	ring(t, b, topic("a"))
	mustWake(t, la)
}

// everyListenerWakes: three listeners on one topic; one ring wakes each of
// them (they wait one after the other, after the ring).
func everyListenerWakes(t *testing.T, b service.Doorbell, topic func(string) string) {
	ls := []service.Listener{listen(t, b, topic("a")), listen(t, b, topic("a")), listen(t, b, topic("a"))}
	ring(t, b, topic("a"))
	for i, l := range ls {
		if err := wait(t, l, wakeBound); err != nil {
			t.Fatalf("listener %d of 3: Wait after one ring = %v, want nil (the ring woke only some)", i, err)
		}
	}
}

// everyWaitingListenerWakes: two listeners waiting at once (or about to:
// the result must be the same) both wake on one ring.
func everyWaitingListenerWakes(t *testing.T, b service.Doorbell, topic func(string) string) {
	ls := []service.Listener{listen(t, b, topic("a")), listen(t, b, topic("a"))}
	errs := waitAll(t, ls)
	ring(t, b, topic("a"))
	for i := range ls {
		if err := <-errs[i]; err != nil {
			t.Fatalf("listener %d of 2: Wait = %v, want nil (the ring woke only one)", i, err)
		}
	}
}

// waitAll starts a Wait (bounded by wakeBound) on each listener.
func waitAll(t *testing.T, ls []service.Listener) []chan error {
	errs := make([]chan error, len(ls))
	for i, l := range ls {
		errs[i] = make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), wakeBound)
			defer cancel()
			errs[i] <- l.Wait(ctx)
		}()
	}
	return errs
}

// listenerWaitingLater: an orphaned await that took the ring and went
// back to waiting must not keep it from a listener that was not waiting
// when it came (re-reading the store after an earlier wake).
func listenerWaitingLater(t *testing.T, b service.Doorbell, topic func(string) string) {
	busy := listen(t, b, topic("a"))
	orphan := listen(t, b, topic("a"))
	ring(t, b, topic("a"))
	mustWake(t, orphan)
	mustStayQuiet(t, orphan) // waits again, and looks at the topic meanwhile
	mustWake(t, busy)
}

// oneRingWakesOnce: each listener wakes once on one ring, however long the
// ring stays where other listeners can see it.
func oneRingWakesOnce(t *testing.T, b service.Doorbell, topic func(string) string) {
	ls := []service.Listener{listen(t, b, topic("a")), listen(t, b, topic("a"))}
	ring(t, b, topic("a"))
	for _, l := range ls {
		mustWake(t, l)
	}
	for _, l := range ls {
		mustStayQuiet(t, l)
	}
}

// RunProcesses runs the checks that need two processes: open returns a
// doorbell on one backend shared by every doorbell it returns in a test,
// as separate processes (function instances on AWS) would have. A ring
// from one wakes every listener of the others. An in-process doorbell
// (localbell) has no such backend and does not run it.
func RunProcesses(t *testing.T, open func(t *testing.T) service.Doorbell) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func() service.Doorbell, topic func(string) string)
	}{
		{"EveryProcessWakes", everyProcessWakes},
		{"EveryWaitingProcessWakes", everyWaitingProcessWakes},
		{"ProcessWaitingLaterWakes", processWaitingLater},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := randomPrefix(t)
			tc.fn(t, func() service.Doorbell { return open(t) }, func(s string) string { return prefix + "/" + s })
		})
	}
}

func everyProcessWakes(t *testing.T, open func() service.Doorbell, topic func(string) string) {
	ls := []service.Listener{listen(t, open(), topic("a")), listen(t, open(), topic("a"))}
	ring(t, open(), topic("a"))
	for i, l := range ls {
		if err := wait(t, l, wakeBound); err != nil {
			t.Fatalf("process %d of 2: Wait after one ring = %v, want nil (the ring woke only one)", i, err)
		}
	}
	for _, l := range ls {
		mustStayQuiet(t, l)
	}
}

func everyWaitingProcessWakes(t *testing.T, open func() service.Doorbell, topic func(string) string) {
	ls := []service.Listener{listen(t, open(), topic("a")), listen(t, open(), topic("a")), listen(t, open(), topic("a"))}
	errs := waitAll(t, ls)
	ring(t, open(), topic("a"))
	for i := range ls {
		if err := <-errs[i]; err != nil {
			t.Fatalf("process %d of 3: Wait = %v, want nil (the ring woke only some)", i, err)
		}
	}
}

func processWaitingLater(t *testing.T, open func() service.Doorbell, topic func(string) string) {
	busy := listen(t, open(), topic("a"))
	orphan := listen(t, open(), topic("a"))
	ring(t, open(), topic("a"))
	mustWake(t, orphan)
	mustStayQuiet(t, orphan)
	mustWake(t, busy)
}

func closeEndsListener(t *testing.T, b service.Doorbell, topic func(string) string) {
	l, err := b.Listen(t.Context(), topic("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Wait on a closed listener must return, never hang to the deadline
	// bound; what it returns is not specified beyond "not a wake without a
	// ring".
	ctx, cancel := context.WithTimeout(t.Context(), wakeBound)
	defer cancel()
	if err := l.Wait(ctx); err == nil {
		t.Fatal("Wait on a closed listener = nil with no ring")
	}
	// A ring on a topic whose listeners closed is harmless.
	ring(t, b, topic("a"))
}
