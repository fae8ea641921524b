package service_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/workerapi"
)

// recordingBell is the in-process doorbell, noting every topic rung.
type recordingBell struct {
	*localbell.Bell
	mu    sync.Mutex
	rungs []string
}

func (b *recordingBell) Ring(ctx context.Context, topic string) error {
	b.mu.Lock()
	b.rungs = append(b.rungs, topic)
	b.mu.Unlock()
	return b.Bell.Ring(ctx, topic)
}

func (b *recordingBell) count(topic string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, t := range b.rungs {
		if t == topic {
			n++
		}
	}
	return n
}

// TestSettlingRingsTheInbox: a worker that settles on its own (it reported
// worker-done, or its agent exited) rings its inbox once, so the harness's
// long poll answers "settled" at once; settling again rings nothing.
func TestSettlingRingsTheInbox(t *testing.T) {
	for _, how := range []string{"worker-done", "exited"} {
		t.Run(how, func(t *testing.T) {
			bell := &recordingBell{Bell: localbell.New()}
			e := newEnv(t, func(_ *service.Config, o *[]service.Option) {
				*o = append(*o, service.WithDoorbell(bell))
			})
			ctx := context.Background()
			w := e.launch(t, "run-1", "k-1", "feature/settle")
			if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
				t.Fatal(err)
			}
			topic := "inbox:" + w
			before := bell.count(topic)
			settle := func() error {
				if how == "exited" {
					return e.svc.WorkerExited(ctx, w, 3, "")
				}
				_, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: "worker-done", Outcome: "succeeded", Body: "done"})
				return err
			}
			if err := settle(); err != nil {
				t.Fatal(err)
			}
			if got := bell.count(topic) - before; got != 1 {
				t.Fatalf("settling rang the inbox %d times, want 1 (rungs %v)", got, bell.rungs)
			}
			inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
			if err != nil || !inbox.Settled {
				t.Fatalf("inbox after settling: %+v %v", inbox, err)
			}
			if how == "exited" {
				// A late exit report after the worker settled changes
				// nothing a poll waits for.
				_ = e.svc.WorkerExited(ctx, w, 0, "")
				if got := bell.count(topic) - before; got != 1 {
					t.Fatalf("a second settle rang again: %d", got)
				}
			}
			if !slices.Contains(bell.rungs, "run:run-1") {
				t.Fatalf("the coordinator's mailbox was not rung: %v", bell.rungs)
			}
		})
	}
}
