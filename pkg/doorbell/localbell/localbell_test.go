package localbell_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/doorbelltest"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/service"
)

func TestConformance(t *testing.T) {
	doorbelltest.Run(t, func(t *testing.T) service.Doorbell { return localbell.New() })
}

// Every listener of a topic wakes on one ring (unlike SQS, where one
// receive takes the message).
func TestRingWakesEveryListener(t *testing.T) {
	b := localbell.New()
	ctx := t.Context()
	var ls []service.Listener
	for range 5 {
		l, err := b.Listen(ctx, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ls = append(ls, l)
	}
	b.Ring(ctx, "run-1")
	for i, l := range ls {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := l.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("listener %d: %v", i, err)
		}
	}
}

// Closed listeners leave no topic behind, however many topics were used.
func TestNoLeakAfterClose(t *testing.T) {
	b := localbell.New()
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			topic := "run-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
			l, err := b.Listen(ctx, topic)
			if err != nil {
				t.Error(err)
				return
			}
			b.Ring(ctx, topic)
			if err := l.Wait(ctx); err != nil {
				t.Error(err)
			}
			l.Close()
		}()
	}
	wg.Wait()
	if n := b.Topics(); n != 0 {
		t.Fatalf("Topics() = %d after every listener closed, want 0", n)
	}
}

// A Wait blocked when Close is called returns instead of hanging.
func TestCloseUnblocksWait(t *testing.T) {
	b := localbell.New()
	l, err := b.Listen(t.Context(), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	if err := <-done; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after Close = %v, want a closed error", err)
	}
}

// BenchmarkWake measures a ring's way to a waiting listener.
func BenchmarkWake(b *testing.B) {
	bell := localbell.New()
	ctx := b.Context()
	l, err := bell.Listen(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for b.Loop() {
		done := make(chan error, 1)
		go func() { done <- l.Wait(ctx) }()
		bell.Ring(ctx, "bench")
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}
