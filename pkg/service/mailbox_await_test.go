package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// watchedBell is a local doorbell that reports every wait a listener
// enters: a waiter that reaches Wait has checked the store and found
// nothing worth answering, so the test learns that an await holds without
// timing it.
type watchedBell struct {
	*localbell.Bell
	waits chan string // the topic of each Wait entered
}

func newWatchedBell() *watchedBell {
	return &watchedBell{Bell: localbell.New(), waits: make(chan string, 64)}
}

func (b *watchedBell) Listen(ctx context.Context, topic string) (service.Listener, error) {
	l, err := b.Bell.Listen(ctx, topic)
	if err != nil {
		return nil, err
	}
	return watchedListener{Listener: l, topic: topic, waits: b.waits}, nil
}

type watchedListener struct {
	service.Listener
	topic string
	waits chan string
}

func (l watchedListener) Wait(ctx context.Context) error {
	l.waits <- l.topic
	return l.Listener.Wait(ctx)
}

type awaitResult struct {
	a   protocol.MailboxAnswer
	err error
}

// awaitEnv is a service on one of the three stores with a watched bell.
func awaitEnv(t *testing.T, open func(*testing.T) store.Store) (*env, *watchedBell) {
	t.Helper()
	bell := newWatchedBell()
	st := open(t)
	te := servicetest.New(t, func(c *service.Config) { c.AwaitCap = time.Minute },
		service.WithStore(st), service.WithDoorbell(bell))
	return &env{svc: te.Service, store: st, rt: te.Runtime, git: te.Git, clock: service.SystemClock}, bell
}

// startAwait runs an await of a minute in the background; cancel ends it.
func startAwait(e *env, run, coordinator string) (<-chan awaitResult, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan awaitResult, 1)
	go func() {
		a, err := e.svc.Await(ctx, run, coordinator, time.Minute)
		done <- awaitResult{a, err}
	}()
	return done, cancel
}

// TestAwaitHoldsOverASealedStatusBatch (issue 13, item 7): after next seals
// a batch of status rows, await holds (it reaches its doorbell wait rather
// than answering the sealed batch at once), and a question posted behind
// that batch wakes it: it answers the sealed batch, and after the
// acknowledgement the question comes next.
func TestAwaitHoldsOverASealedStatusBatch(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			e, bell := awaitEnv(t, sc.open)
			ctx := t.Context()
			w := e.launch(t, "run-sealed", "k-sealed", "")
			s1 := e.post(t, w, "status", "compiling")
			s2 := e.post(t, w, "status", "testing")
			sealed, err := e.svc.Next(ctx, "run-sealed", "c1")
			if err != nil || sealed.Status != protocol.MailDelivery || len(sealed.Delivery.Messages) != 2 {
				t.Fatalf("next = %+v %v", sealed, err)
			}

			done, cancel := startAwait(e, "run-sealed", "c1")
			defer cancel()
			select {
			case r := <-done:
				t.Fatalf("await answered a sealed status-only batch at once: %s %v", mustJSON(t, r.a), r.err)
			case <-bell.waits:
			}

			q := e.post(t, w, "question", "which fixture?")
			r := <-done
			if r.err != nil || r.a.Status != protocol.MailDelivery || r.a.Delivery.ID != sealed.Delivery.ID {
				t.Fatalf("await after the question = %s %v, want the sealed batch %s", mustJSON(t, r.a), r.err, sealed.Delivery.ID)
			}
			if m := r.a.Delivery.Messages; len(m) != 2 || m[0].ID != s1 || m[1].ID != s2 {
				t.Fatalf("the sealed batch changed: %s", mustJSON(t, r.a))
			}
			next, err := e.svc.Acknowledge(ctx, "run-sealed", "c1", sealed.Delivery.ID)
			if err != nil || next.Status != protocol.MailDelivery || next.Delivery.Messages[0].ID != q {
				t.Fatalf("after the acknowledgement = %s %v, want the question", mustJSON(t, next), err)
			}
		})
	}
}

// TestAwaitWakesForAQuestionPastTheByteBound (issue 13, item 6): status
// rows of four workers fill the 768 KiB batch bound, so a fifth worker's
// question lands in the next batch; await still answers at once (the batch
// before the question) instead of holding its whole wait, and the question
// is in the batch after the acknowledgement.
func TestAwaitWakesForAQuestionPastTheByteBound(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			e, bell := awaitEnv(t, sc.open)
			ctx := t.Context()
			const run = "run-bytes"
			big := strings.Repeat("s", 60<<10)
			for i := range 4 {
				w := e.launch(t, run, "k-big-"+string(rune('a'+i)), "")
				for range 2 {
					// Two rows of 120 KiB each: 240 KiB, within a worker's
					// 256 KiB of unconsumed status.
					if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: "status", Subject: big, Body: big}); err != nil {
						t.Fatal(err)
					}
				}
			}
			asker := e.launch(t, run, "k-asker", "")
			q := e.post(t, asker, "question", "may I push?")

			done, cancel := startAwait(e, run, "c1")
			defer cancel()
			var r awaitResult
			select {
			case r = <-done:
			case <-bell.waits:
				cancel()
				t.Fatalf("await held with a question pending behind a batch the byte bound cut (%v)", <-done)
			}
			if r.err != nil || r.a.Status != protocol.MailDelivery {
				t.Fatalf("await = %s %v", mustJSON(t, r.a), r.err)
			}
			first := r.a.Delivery.Messages
			if len(first) == 0 || len(first) >= 9 {
				t.Fatalf("the first batch holds %d rows; the byte bound should cut it before the question", len(first))
			}
			for _, m := range first {
				if m.Kind != "status" {
					t.Fatalf("first batch has a %s row", m.Kind)
				}
			}
			rest := map[string]bool{}
			a := r.a
			for range 4 {
				var err error
				a, err = e.svc.Acknowledge(ctx, run, "c1", a.Delivery.ID)
				if err != nil {
					t.Fatal(err)
				}
				if a.Status != protocol.MailDelivery {
					break
				}
				for _, m := range a.Delivery.Messages {
					rest[m.ID] = true
				}
				if rest[q] {
					break
				}
			}
			if !rest[q] {
				t.Fatal("the question was never delivered")
			}
		})
	}
}
