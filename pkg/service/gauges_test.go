package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// gaugeStore counts the reads WorkerGauges makes.
type gaugeStore struct {
	store.Store
	lists, messages, rows atomic.Int64
	fresh                 atomic.Bool // run-fresh's mailbox was read
}

func (c *gaugeStore) ListResources(ctx context.Context) ([]store.Resource, error) {
	c.lists.Add(1)
	return c.Store.ListResources(ctx)
}

func (c *gaugeStore) ListMessages(ctx context.Context, run string, after int64, limit int) ([]store.Message, error) {
	c.messages.Add(1)
	if run == "run-fresh" {
		c.fresh.Store(true)
	}
	ms, err := c.Store.ListMessages(ctx, run, after, limit)
	c.rows.Add(int64(len(ms)))
	return ms, err
}

// gaugeEnv is a service on a counted memory store with a manual clock.
func gaugeEnv(t *testing.T, maxWorkers int) (*env, *manualClock, *gaugeStore) {
	t.Helper()
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	st := &gaugeStore{Store: memstore.New()}
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.MaxWorkers = maxWorkers
		*o = append(*o, service.WithClock(clock), service.WithStore(st))
	})
	e.clock, e.store = clock, st
	return e, clock, st
}

func (e *env) gauges(t *testing.T) (live, stuck int) {
	t.Helper()
	live, stuck, err := e.svc.WorkerGauges(context.Background())
	if err != nil {
		t.Fatalf("WorkerGauges: %v", err)
	}
	return live, stuck
}

func (e *env) ready(t *testing.T, handles ...string) {
	t.Helper()
	for _, h := range handles {
		if err := e.svc.WorkerReady(context.Background(), h, "test"); err != nil {
			t.Fatal(err)
		}
	}
}

// Live counts what the cap counts (not settled, not released); stuck
// counts a worker starting past the bootstrap TTL, and a ready or
// awaiting-reply worker whose record and posts are both older than
// StaleAfter, to the instant.
func TestWorkerGauges(t *testing.T) {
	e, clock, _ := gaugeEnv(t, 0)
	beating := e.launch(t, "run-1", "k-beating", "")   // ready, heartbeats
	silent := e.launch(t, "run-1", "k-silent", "")     // ready, then nothing
	done := e.launch(t, "run-1", "k-done", "")         // reports worker-done
	released := e.launch(t, "run-2", "k-released", "") // cancelled and released
	starting := e.launch(t, "run-2", "k-starting", "") // never ready
	asking := e.launch(t, "run-2", "k-asking", "")     // awaiting a reply, heartbeats
	e.ready(t, beating, silent, done, asking)
	e.post(t, done, "status", "status")
	e.post(t, done, "worker-done", "")
	e.apply(t, call("run-2", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(released)+`}`))
	e.apply(t, call("run-2", "k-release", `{"type":"release-resource","resource":`+workerRef(released)+`}`))
	question := e.post(t, asking, "question", "question")
	if o := e.observe(t, asking); o.State != "awaiting-reply" {
		t.Fatalf("asking: %+v", o)
	}

	if live, stuck := e.gauges(t); live != 4 || stuck != 0 {
		t.Fatalf("at launch: live %d stuck %d, want 4 and 0", live, stuck)
	}

	// Eleven minutes of heartbeats every 30 s from two workers.
	heartbeats := func(d time.Duration) {
		for range int(d / (30 * time.Second)) {
			clock.Advance(30 * time.Second)
			e.post(t, beating, "heartbeat", "heartbeat")
			e.post(t, asking, "heartbeat", "heartbeat")
		}
	}
	heartbeats(11 * time.Minute)
	e.launch(t, "run-3", "k-late", "") // late: starting, just launched
	if live, stuck := e.gauges(t); live != 5 || stuck != 1 {
		t.Fatalf("after 11 minutes: live %d stuck %d, want 5 and 1 (the silent worker)", live, stuck)
	}

	// Past the bootstrap TTL the worker still starting is stuck; the one
	// launched later is not yet.
	heartbeats(5 * time.Minute)
	if o := e.observe(t, starting); o.State != "starting" {
		t.Fatalf("starting: %+v", o)
	}
	if live, stuck := e.gauges(t); live != 5 || stuck != 2 {
		t.Fatalf("after 16 minutes: live %d stuck %d, want 5 and 2 (silent, starting)", live, stuck)
	}

	// A post is a sign of life.
	e.post(t, silent, "status", "status")
	if _, stuck := e.gauges(t); stuck != 1 {
		t.Fatalf("after the silent worker's status: stuck %d, want 1 (starting)", stuck)
	}

	// The heartbeats stop. Exactly StaleAfter after its last post a worker
	// is still fresh (and late, exactly the bootstrap TTL old, still
	// starting in time); an instant later it is stuck.
	clock.Advance(service.StaleAfter)
	if _, stuck := e.gauges(t); stuck != 1 {
		t.Fatalf("StaleAfter after the last posts: stuck %d, want 1 (starting)", stuck)
	}
	clock.Advance(time.Nanosecond)
	// Now silent, beating and asking (no reply came) are past StaleAfter,
	// and late, launched at 11 minutes, is past the bootstrap TTL.
	if live, stuck := e.gauges(t); live != 5 || stuck != 5 {
		t.Fatalf("StaleAfter and an instant: live %d stuck %d, want 5 and 5", live, stuck)
	}

	// A reply changes the worker's record: a sign of life too.
	e.apply(t, call("run-2", "k-reply", `{"type":"reply-to-worker","worker":`+workerRef(asking)+`,"question":"`+question+`","body":"yes"}`))
	if _, stuck := e.gauges(t); stuck != 4 {
		t.Fatalf("after the reply: stuck %d, want 4", stuck)
	}
}

// LiveWorkers is the cap's own count: at MaxWorkers live workers a launch
// is refused, and a settled or released worker frees its place.
func TestWorkerGaugesLiveIsTheCapCount(t *testing.T) {
	e, _, _ := gaugeEnv(t, 3)
	a := e.launch(t, "run-1", "k-a", "")
	e.launch(t, "run-1", "k-b", "")
	e.launch(t, "run-1", "k-c", "")
	if live, _ := e.gauges(t); live != 3 {
		t.Fatalf("live %d, want 3", live)
	}
	e.refused(t, call("run-1", "k-d", launchBody("")), galleyerr.RateLimited)
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(a)+`}`))
	if live, _ := e.gauges(t); live != 2 {
		t.Fatalf("after a cancel: live %d, want 2", live)
	}
	e.launch(t, "run-1", "k-e", "")
	if live, _ := e.gauges(t); live != 3 {
		t.Fatalf("live %d, want 3", live)
	}
	e.refused(t, call("run-1", "k-f", launchBody("")), galleyerr.RateLimited)
}

// The gauges read the resource list once, no mailbox of a run whose
// workers' records changed lately, and a long mailbox in a few probes and
// the rows of the last StaleAfter only.
func TestWorkerGaugesReadsLittle(t *testing.T) {
	e, clock, st := gaugeEnv(t, 0)
	old := e.launch(t, "run-long", "k-old", "")
	e.ready(t, old)
	// 2,000 heartbeats, one every 30 s (16 h 40 min), the last 20 within
	// StaleAfter.
	for range 2000 {
		clock.Advance(30 * time.Second)
		e.post(t, old, "heartbeat", "heartbeat")
	}
	fresh := e.launch(t, "run-fresh", "k-fresh", "")
	e.ready(t, fresh)
	e.post(t, fresh, "heartbeat", "heartbeat")

	st.lists.Store(0)
	st.messages.Store(0)
	st.rows.Store(0)
	if live, stuck := e.gauges(t); live != 2 || stuck != 0 {
		t.Fatalf("live %d stuck %d, want 2 and 0", live, stuck)
	}
	// 2·log2(2000) probes of one row ≈ 22, and one page of the 20 last rows.
	if st.lists.Load() != 1 || st.messages.Load() > 24 || st.rows.Load() > 50 || st.fresh.Load() {
		t.Errorf("%d resource lists, %d mailbox reads of %d rows, fresh run's read %v; want 1, at most 24 of 50, false",
			st.lists.Load(), st.messages.Load(), st.rows.Load(), st.fresh.Load())
	}
	t.Logf("%d mailbox reads of %d rows", st.messages.Load(), st.rows.Load())

	clock.Advance(service.StaleAfter + time.Second)
	if _, stuck := e.gauges(t); stuck != 2 {
		t.Fatalf("after StaleAfter of silence: stuck %d, want 2", stuck)
	}
}
