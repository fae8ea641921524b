// Package doorbelltest is the shared conformance suite for doorbells
// (service.Doorbell): every implementation (localbell in process, sqsbell on
// SQS) runs it. It checks only what the service relies on: a ring after
// Listen wakes Wait, Wait ends at its context's deadline without a ring, a
// ring before Listen never costs a later ring, duplicate rings are harmless
// and topics are isolated.
package doorbelltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
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
		{"TwoListenersOneTopic", twoListeners},
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

// twoListeners: two waiters on one topic (an orphaned await beside a fresh
// one). A ring wakes at least one; which one is the implementation's.
func twoListeners(t *testing.T, b service.Doorbell, topic func(string) string) {
	l1 := listen(t, b, topic("a"))
	l2 := listen(t, b, topic("a"))
	ring(t, b, topic("a"))
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, l := range []service.Listener{l1, l2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = wait(t, l, 3*time.Second)
		}()
	}
	wg.Wait()
	woke := 0
	for _, err := range errs {
		switch {
		case err == nil:
			woke++
		case errors.Is(err, context.DeadlineExceeded):
		default:
			t.Fatalf("Wait = %v", err)
		}
	}
	if woke == 0 {
		t.Fatal("a ring with two listeners woke neither")
	}
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
