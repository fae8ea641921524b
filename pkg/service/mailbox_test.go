package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

func (e *env) post(t *testing.T, worker, kind, body string) string {
	t.Helper()
	req := workerapi.PostRequest{Kind: kind, Body: body}
	if kind == "worker-done" {
		req.Outcome = "succeeded"
	}
	a, err := e.svc.WorkerPost(context.Background(), worker, req)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID
}

// postWaiting posts, retrying while the worker's unconsumed rows are at
// their bound (rate-limited) until readers consume some.
func (e *env) postWaiting(t *testing.T, worker, kind, body string) string {
	t.Helper()
	for range 20000 {
		a, err := e.svc.WorkerPost(context.Background(), worker, workerapi.PostRequest{Kind: kind, Body: body})
		if err == nil {
			return a.ID
		}
		if !galleyerr.Is(galleyerr.RateLimited, err) {
			t.Error(err)
			return ""
		}
		time.Sleep(time.Millisecond)
	}
	t.Error("the post was refused for 20,000 tries")
	return ""
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMailboxReplayAckAndOrder(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-m", "k-1", "")
	ids := []string{e.post(t, w, "status", "one"), e.post(t, w, "heartbeat", ""), e.post(t, w, "status", "two")}

	first, err := e.svc.Next(ctx, "run-m", "c1")
	if err != nil || first.Status != "delivery" {
		t.Fatalf("next = %+v %v", first, err)
	}
	again, _ := e.svc.Next(ctx, "run-m", "c2")
	if mustJSON(t, first) != mustJSON(t, again) {
		t.Fatalf("replay differs:\n%s\n%s", mustJSON(t, first), mustJSON(t, again))
	}
	for i, m := range first.Delivery.Messages {
		if m.ID != ids[i] {
			t.Fatalf("message %d is %s, want %s (order)", i, m.ID, ids[i])
		}
		if m.Worker == nil || *m.Worker != (protocol.Resource{Kind: "worker", Backend: "galley", Handle: w}) {
			t.Fatalf("row without its worker: %+v", m)
		}
	}
	// A message posted after sealing waits for the next batch.
	later := e.post(t, w, "status", "three")
	// A stale acknowledgement consumes nothing.
	stale, _ := e.svc.Acknowledge(ctx, "run-m", "c1", "d-999")
	if mustJSON(t, stale) != mustJSON(t, first) {
		t.Fatal("stale ack changed the batch")
	}
	next, _ := e.svc.Acknowledge(ctx, "run-m", "c1", first.Delivery.ID)
	if next.Status != "delivery" || next.Delivery.ID == first.Delivery.ID || next.Delivery.Messages[0].ID != later {
		t.Fatalf("after ack = %s", mustJSON(t, next))
	}
	// Acknowledging the consumed batch again consumes nothing.
	dup, _ := e.svc.Acknowledge(ctx, "run-m", "c1", first.Delivery.ID)
	if mustJSON(t, dup) != mustJSON(t, next) {
		t.Fatal("duplicate ack consumed something")
	}
	last, _ := e.svc.Acknowledge(ctx, "run-m", "c1", next.Delivery.ID)
	if last.Status != "empty" {
		t.Fatalf("after all acked = %s", mustJSON(t, last))
	}
}

func TestAdoptionFencing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-a", "k-1", "")
	e.post(t, w, "status", "pending")
	before, _ := e.svc.Next(ctx, "run-a", "old")
	if fenced, err := e.svc.Adopt(ctx, "run-a", "new"); fenced || err != nil {
		t.Fatalf("adopt = %v %v", fenced, err)
	}
	after, _ := e.svc.Next(ctx, "run-a", "new")
	if mustJSON(t, before) != mustJSON(t, after) {
		t.Fatal("adopter does not read the same unacknowledged batch")
	}
	for _, op := range []func() (protocol.MailboxAnswer, error){
		func() (protocol.MailboxAnswer, error) { return e.svc.Next(ctx, "run-a", "old") },
		func() (protocol.MailboxAnswer, error) {
			return e.svc.Acknowledge(ctx, "run-a", "old", before.Delivery.ID)
		},
		func() (protocol.MailboxAnswer, error) { return e.svc.Await(ctx, "run-a", "old", time.Second) },
	} {
		if a, err := op(); err != nil || a.Status != "fenced" {
			t.Fatalf("old coordinator got %+v %v", a, err)
		}
	}
	if fenced, _ := e.svc.Adopt(ctx, "run-a", "old"); !fenced {
		t.Fatal("a superseded coordinator adopted back")
	}
	if fenced, _ := e.svc.Adopt(ctx, "run-a", "new"); fenced {
		t.Fatal("re-adoption by the reader must be a no-op")
	}
	if fenced, _ := e.svc.Adopt(ctx, "run-a", "newer"); fenced {
		t.Fatal("a new coordinator could not adopt")
	}
	if a, _ := e.svc.Next(ctx, "run-a", "new"); a.Status != "fenced" {
		t.Fatal("the previous reader is not fenced")
	}
	if got := e.observe(t, w); got.State != "starting" {
		t.Fatalf("adoption moved the worker: %+v", got)
	}
}

func TestAwaitHoldsForAttentionAndWakes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-w", "k-1", "")
	e.post(t, w, "heartbeat", "")
	type result struct {
		a   protocol.MailboxAnswer
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := e.svc.Await(ctx, "run-w", "c1", 4*time.Second)
		done <- result{a, err}
	}()
	// A heartbeat alone does not end the wait.
	select {
	case r := <-done:
		t.Fatalf("await answered on a heartbeat: %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
	q := e.post(t, w, "question", "which?")
	r := <-done
	if r.err != nil || r.a.Status != "delivery" {
		t.Fatalf("await = %+v %v", r.a, r.err)
	}
	msgs := r.a.Delivery.Messages
	if len(msgs) != 2 || msgs[0].Kind != "heartbeat" || msgs[1].ID != q {
		t.Fatalf("batch = %s", mustJSON(t, r.a))
	}
}

func TestAwaitAnswersAtItsDeadline(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	a, err := e.svc.Await(context.Background(), "run-empty", "c1", 300*time.Millisecond)
	if err != nil || a.Status != "empty" {
		t.Fatalf("await = %+v %v", a, err)
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Fatal("await answered empty before waitMs")
	}
}

// TestConcurrentCoordinators races acknowledgements of several
// coordinators with adoptions, while a worker posts, and checks the
// recorded history: every message is delivered, in order, none consumed
// twice by acknowledgement, and no call of a superseded coordinator
// succeeds after its supersession was observed.
func TestConcurrentCoordinators(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-c", "k-1", "")
	const total = 120
	var posted []string
	var pmu sync.Mutex
	go func() {
		for i := range total {
			// A worker whose unread rows are at their bound waits for the
			// coordinators to read.
			id := e.postWaiting(t, w, "status", fmt.Sprint(i))
			pmu.Lock()
			posted = append(posted, id)
			pmu.Unlock()
		}
	}()
	var mu sync.Mutex
	consumed := map[string]int{}
	// batches maps a consumed batch's sequence number (d-N) to its rows;
	// coordinators record concurrently, so order comes from N.
	batches := map[int][]string{}
	record := func(id string, msgs []protocol.MailMessage) {
		var n int
		if _, err := fmt.Sscanf(id, "d-%d", &n); err != nil {
			t.Errorf("batch id %q", id)
		}
		if _, dup := batches[n]; dup {
			t.Errorf("batch %s consumed twice", id)
		}
		for _, m := range msgs {
			batches[n] = append(batches[n], m.ID)
		}
	}
	superseded := map[string]bool{}
	maybeConsumed := map[string][]protocol.MailMessage{}
	var wg sync.WaitGroup
	coordinators := []string{"c1", "c2", "c3", "c4"}
	deadline := time.Now().Add(20 * time.Second)
	for i, c := range coordinators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if i > 0 && time.Now().UnixNano()%7 == 0 {
					fenced, err := e.svc.Adopt(ctx, "run-c", c)
					if err != nil {
						t.Error(err)
						return
					}
					if fenced {
						mu.Lock()
						superseded[c] = true
						mu.Unlock()
						return
					}
				}
				a, err := e.svc.Next(ctx, "run-c", c)
				if err != nil {
					t.Error(err)
					return
				}
				if a.Status == "fenced" {
					return
				}
				if a.Status != "delivery" {
					mu.Lock()
					n := 0
					for _, b := range batches {
						n += len(b)
					}
					mu.Unlock()
					if n >= total {
						return
					}
					continue
				}
				b, err := e.svc.Acknowledge(ctx, "run-c", c, a.Delivery.ID)
				if err != nil {
					t.Error(err)
					return
				}
				if b.Status == "fenced" {
					// The ack may have consumed the batch before an
					// adoption fenced the read that follows it; if it did
					// not, a later reader is answered the same batch.
					mu.Lock()
					maybeConsumed[a.Delivery.ID] = a.Delivery.Messages
					mu.Unlock()
					return
				}
				// The ack consumed a.Delivery iff the next answer is a
				// different batch; record it once under the batch id.
				if b.Status != "delivery" || b.Delivery.ID != a.Delivery.ID {
					mu.Lock()
					consumed[a.Delivery.ID]++
					if consumed[a.Delivery.ID] == 1 {
						record(a.Delivery.ID, a.Delivery.Messages)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// Whoever reads last drains what is left; a batch a fenced ack may
	// have consumed counts as consumed unless a reader is answered it
	// again (the drain below records it then).
	consumedByFencedAcks := func() map[string][]protocol.MailMessage {
		out := map[string][]protocol.MailMessage{}
		for id, msgs := range maybeConsumed {
			var seq int
			fmt.Sscanf(id, "d-%d", &seq)
			if _, again := batches[seq]; !again {
				out[id] = msgs
			}
		}
		return out
	}
	drained := func() int {
		n := len(flatten(batches))
		for _, msgs := range consumedByFencedAcks() {
			n += len(msgs)
		}
		return n
	}
	for _, c := range []string{"final"} {
		if fenced, err := e.svc.Adopt(ctx, "run-c", c); fenced || err != nil {
			t.Fatalf("final adopt %v %v", fenced, err)
		}
		for {
			a, _ := e.svc.Next(ctx, "run-c", c)
			if a.Status != "delivery" {
				pmu.Lock()
				n := len(posted)
				pmu.Unlock()
				if n == total && drained() >= total {
					break
				}
				if n == total {
					a2, _ := e.svc.Next(ctx, "run-c", c)
					if a2.Status != "delivery" {
						break
					}
					continue
				}
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if _, err := e.svc.Acknowledge(ctx, "run-c", c, a.Delivery.ID); err != nil {
				t.Fatal(err)
			}
			record(a.Delivery.ID, a.Delivery.Messages)
		}
	}
	for id, msgs := range consumedByFencedAcks() {
		record(id, msgs)
	}
	pmu.Lock()
	defer pmu.Unlock()
	order := flatten(batches)
	if len(order) != len(posted) {
		t.Fatalf("consumed %d messages, posted %d", len(order), len(posted))
	}
	for i := range posted {
		if order[i] != posted[i] {
			t.Fatalf("message %d: consumed %s, posted %s", i, order[i], posted[i])
		}
	}
}

// flatten concatenates batches in sealing order.
func flatten(batches map[int][]string) []string {
	keys := make([]int, 0, len(batches))
	for k := range batches {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, batches[k]...)
	}
	return out
}

// TestRetriedPostKeepsItsID: a post retried with the same client id
// carries the same message id and asks one question, not two.
func TestRetriedPostKeepsItsID(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	w := e.launch(t, "run-p", "k-1", "")
	req := workerapi.PostRequest{ClientID: "c-42", Kind: "question", Body: "which?"}
	a, err := e.svc.WorkerPost(ctx, w, req)
	if err != nil {
		t.Fatal(err)
	}
	e.apply(t, call("run-p", "k-r", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+a.ID+`","body":"this"}`))
	b, err := e.svc.WorkerPost(ctx, w, req)
	if err != nil || b.ID != a.ID {
		t.Fatalf("retried post: %+v %v, want id %s", b, err, a.ID)
	}
	if got := e.observe(t, w); got.State == "awaiting-reply" {
		t.Fatal("a retried question reopened an answered question")
	}
	other, _ := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{ClientID: "c-43", Kind: "status", Body: "x"})
	if other.ID == a.ID {
		t.Fatal("distinct client ids share a message id")
	}
}
