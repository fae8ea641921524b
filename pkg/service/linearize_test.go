package service_test

// Concurrent histories against the real service, on the memory store and
// on the memory store behind faultstore, recorded with package history and
// checked against the design's invariants and, for the mailbox, against a
// sequential model with porcupine.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// linSvc calls the service in process and records every call and answer
// as kitchn would have seen it over HTTP.
type linSvc struct {
	svc *service.Service
	rec *history.Recorder
}

// linStatus maps an error to the status kitchn would have read: only the
// kinds package api answers 200 not-applied matter to the checkers, and
// every other error is an answer without an outcome.
func linStatus(err error) int {
	switch galleyerr.KindOf(err) {
	case galleyerr.RateLimited:
		return http.StatusTooManyRequests
	case galleyerr.Conflict, galleyerr.InFlight:
		return http.StatusConflict
	case galleyerr.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func linJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (l *linSvc) mailbox(ctx context.Context, route history.Route, call protocol.MailboxCall) (protocol.MailboxAnswer, error) {
	rc := l.rec.Begin(call.Coordinator, route, linJSON(call))
	var a protocol.MailboxAnswer
	var err error
	switch route {
	case history.Next:
		a, err = l.svc.Next(ctx, call.Run, call.Coordinator)
	case history.Acknowledge:
		a, err = l.svc.Acknowledge(ctx, call.Run, call.Coordinator, call.Delivery)
	case history.Await:
		a, err = l.svc.Await(ctx, call.Run, call.Coordinator, time.Duration(*call.WaitMs)*time.Millisecond)
	case history.Adopt:
		var fenced bool
		fenced, err = l.svc.Adopt(ctx, call.Run, call.Coordinator)
		if err == nil {
			body := []byte(`{}`)
			if fenced {
				a, body = protocol.MailboxAnswer{Status: protocol.MailFenced}, []byte(`{"status":"fenced"}`)
			}
			rc.End(http.StatusOK, body, nil)
			return a, nil
		}
	}
	if err != nil {
		rc.End(linStatus(err), nil, err)
		return a, err
	}
	rc.End(http.StatusOK, linJSON(a), nil)
	return a, nil
}

func (l *linSvc) post(ctx context.Context, worker, run string, req workerapi.PostRequest) (string, error) {
	rc := l.rec.Begin(worker, history.Post, linJSON(req)).SetRun(run)
	a, err := l.svc.WorkerPost(ctx, worker, req)
	if err != nil {
		rc.End(linStatus(err), nil, err)
		return "", err
	}
	rc.End(http.StatusOK, linJSON(a), nil)
	return a.ID, nil
}

// apply performs one copy of an effect that arrives now.
func (l *linSvc) apply(ctx context.Context, client string, c protocol.EffectCall) (string, error) {
	// The call begins, then arrives: stamped the other way round, a
	// goroutine paused between the two would record a call later than
	// the arrival the service judged it by.
	rc := l.rec.Begin(client, history.Effect, linJSON(c))
	arrived := time.Now()
	rc.SetArrived(l.rec.At(arrived))
	receipt, err := l.svc.Apply(ctx, c, arrived)
	switch k := galleyerr.KindOf(err); {
	case err == nil:
		rc.End(http.StatusOK, []byte(`{"status":"applied","receipt":`+string(receipt)+`}`), nil)
		return protocol.StatusApplied, nil
	case k == galleyerr.Invalid || k == galleyerr.RateLimited || k == galleyerr.Unsupported ||
		k == galleyerr.CrossHouse || k == galleyerr.ForeignBackend:
		rc.End(http.StatusOK, linJSON(protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: k.String()}), nil)
		return protocol.StatusNotApplied, err
	default:
		rc.End(linStatus(err), nil, err)
		return "", err
	}
}

func (l *linSvc) lookup(ctx context.Context, client string, c protocol.EffectCall) (string, error) {
	rc := l.rec.Begin(client, history.Lookup, linJSON(c))
	a, receipt, err := l.svc.Lookup(ctx, c)
	if err != nil {
		rc.End(linStatus(err), nil, err)
		return "", err
	}
	if a.Status == protocol.StatusApplied {
		rc.End(http.StatusOK, []byte(`{"status":"applied","receipt":`+string(receipt)+`}`), nil)
	} else {
		rc.End(http.StatusOK, linJSON(a), nil)
	}
	return a.Status, nil
}

func (l *linSvc) inventory(ctx context.Context) {
	rc := l.rec.Begin("reader", history.Inventory, nil)
	inv, err := l.svc.Inventory(ctx)
	if err != nil {
		rc.End(linStatus(err), nil, err)
		return
	}
	rc.End(http.StatusOK, linJSON(inv), nil)
}

func linCall(run, key, effect string) protocol.EffectCall {
	return protocol.EffectCall{Run: run, Request: protocol.EffectRequest{
		House: "origin89", Backend: "galley", Credential: "galley-token", Task: "t-lin", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(effect)},
	}}
}

func linLaunch(brief, branch string) string {
	b := fmt.Sprintf(`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":%q`, brief)
	if branch != "" {
		b += fmt.Sprintf(`,"branch":%q`, branch)
	}
	return b + "}"
}

// linApplied applies c until a copy answers applied, reconciling each
// uncertain answer by lookup first, as kitchn does; it returns the worker
// the receipt created.
func linApplied(t *testing.T, l *linSvc, client string, c protocol.EffectCall) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		st, err := l.apply(ctx, client, c)
		if st == protocol.StatusApplied {
			return
		}
		if st == protocol.StatusNotApplied && !galleyerr.Is(galleyerr.RateLimited, err) {
			t.Errorf("%s: refused: %v", c.Request.Key, err)
			return
		}
		if st == protocol.StatusNotApplied {
			// Definite, and "retry after": resent without a lookup, as
			// kitchn does (a lookup would promise absence again, and a
			// resend within the clocks' skew of it is refused again).
			servicetest.RetryAfterSkew()
			continue
		}
		if s, _ := l.lookup(ctx, client, c); s == protocol.StatusApplied {
			return
		}
		time.Sleep(time.Duration(20+rand.IntN(40)) * time.Millisecond)
	}
	t.Errorf("%s never applied", c.Request.Key)
}

func linCheck(t *testing.T, ops []history.Op, linearize bool) history.Report {
	t.Helper()
	r := history.Check(ops, history.Options{Linearizability: linearize, LinearizeTimeout: history.DefaultLinearizeTimeout})
	if !r.OK() || len(r.Unknown) > 0 {
		if path := os.Getenv("GALLEY_HISTORY_DUMP"); path != "" {
			_ = os.WriteFile(path, linJSON(ops), 0o600)
		}
		t.Fatalf("history check:\n%s", r)
	}
	return r
}

// TestMailboxLinearizable runs workers posting and coordinators reading,
// acknowledging, awaiting and adopting one run's mailbox at once, and
// checks the history with porcupine. With faults, the store loses
// conditions (another writer won) and answers after writing (the write
// happened, its answer is lost).
func TestMailboxLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults func(*faultstore.Store)
	}{
		{"memstore", nil},
		{"faults", func(fs *faultstore.Store) {
			for i := range 12 {
				fs.Inject(faultstore.Fault{Method: "PutMailbox", When: faultstore.Conflict, Skip: 3 + 5*i, Times: 1})
			}
			for i, m := range []string{"GetMailbox", "PutMailbox", "AppendMessage", "ListMessages"} {
				fs.SetRate(m, 0.03, int64(i+1))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultstore.New(memstore.New())
			env := servicetest.New(t, nil, service.WithStore(fs))
			l := &linSvc{svc: env.Service, rec: history.NewRecorder()}
			// Three runs, one after the other; each is checked on its own.
			for n := range 3 {
				run := fmt.Sprintf("run-lin-%d", n)
				var workers []string
				for i := range 3 {
					c := linCall(run, fmt.Sprintf("k-%s-w%d", run, i), linLaunch("idle", ""))
					raw, err := env.Service.Apply(context.Background(), c, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					var r protocol.Receipt
					_ = json.Unmarshal(raw, &r)
					workers = append(workers, r.Created[0].Handle)
				}
				if tc.faults != nil {
					tc.faults(fs)
				}
				mailboxHistory(t, l, run, workers, 30)
				fs.Clear()
			}
			r := linCheck(t, l.rec.Ops(), true)
			t.Logf("%d ops, %d model operations; store calls %d, faults injected %d (PutMailbox %d)",
				r.Ops, r.Checked["linearizable"], fs.Calls(""), fs.Injected(""), fs.Injected("PutMailbox"))
			if tc.faults != nil && fs.Injected("PutMailbox") == 0 {
				t.Fatal("no fault reached the mailbox: the test proves nothing")
			}
			if r.Checked["posts"] == 0 || r.Checked["replays"] == 0 {
				t.Fatalf("nothing was delivered: %s", r)
			}
		})
	}
}

// mailboxHistory lets the workers post perWorker rows each while four
// coordinators read, acknowledge, await and adopt, then drains the run.
func mailboxHistory(t *testing.T, l *linSvc, run string, workers []string, perWorker int) {
	ctx := context.Background()
	var wg sync.WaitGroup
	postsDone := make(chan struct{})
	var pw sync.WaitGroup
	for wi, w := range workers {
		pw.Add(1)
		go func() {
			defer pw.Done()
			kinds := []string{"status", "heartbeat", "status", "question", "escalation"}
			for k := range perWorker {
				req := workerapi.PostRequest{Kind: kinds[(k+wi)%len(kinds)], Body: fmt.Sprintf("%s row %d", w, k)}
				_, _ = l.post(ctx, w, run, req)
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			}
		}()
	}
	go func() { pw.Wait(); close(postsDone) }()

	// c5 is new: it starts late and adopts at once, superseding whoever
	// reads by then.
	coordinators := []string{"c1", "c2", "c3", "c4", "c5"}
	for ci, c := range coordinators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(ci), 7))
			last, stale := "", ""
			if c == "c5" {
				time.Sleep(15 * time.Millisecond)
				_, _ = l.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: run, Coordinator: c})
			}
			for n := 0; n < 60; n++ {
				select {
				case <-postsDone:
					if n > 20 {
						return
					}
				default:
				}
				call := protocol.MailboxCall{Run: run, Coordinator: c}
				var a protocol.MailboxAnswer
				var err error
				switch p := rng.IntN(20); {
				case p < 6:
					a, err = l.mailbox(ctx, history.Next, call)
				case p < 13 && last != "":
					call.Delivery = last
					if stale != "" && rng.IntN(4) == 0 {
						// A stale acknowledgement must consume nothing.
						call.Delivery = stale
					}
					a, err = l.mailbox(ctx, history.Acknowledge, call)
				case p < 17:
					wait := int64(rng.IntN(15))
					call.WaitMs = &wait
					a, err = l.mailbox(ctx, history.Await, call)
				case p < 18 && ci > 0:
					a, err = l.mailbox(ctx, history.Adopt, call)
				default:
					a, err = l.mailbox(ctx, history.Next, call)
				}
				if err != nil {
					continue
				}
				switch a.Status {
				case protocol.MailFenced:
					// Superseded for good: one more try to adopt back, which
					// must be fenced, then stop.
					_, _ = l.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: run, Coordinator: c})
					return
				case protocol.MailDelivery:
					if a.Delivery.ID != last {
						stale, last = last, a.Delivery.ID
					}
				}
			}
		}()
	}
	wg.Wait()
	<-postsDone
	// A new coordinator adopts and drains what is left.
	for range 20 {
		if a, err := l.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: run, Coordinator: "drain"}); err == nil && a.Status == "" {
			break
		}
	}
	for range 400 {
		a, err := l.mailbox(ctx, history.Next, protocol.MailboxCall{Run: run, Coordinator: "drain"})
		if err != nil {
			continue
		}
		if a.Status == protocol.MailEmpty {
			return
		}
		if a.Status != protocol.MailDelivery {
			t.Fatalf("drain read %s", a.Status)
		}
		_, _ = l.mailbox(ctx, history.Acknowledge, protocol.MailboxCall{Run: run, Coordinator: "drain", Delivery: a.Delivery.ID})
	}
	t.Fatal("the run did not drain")
}

// TestConcurrentLaunchesOneWorkerPerKey sends many copies of a few
// launches at once, each client retrying an uncertain answer after a
// lookup, with the store losing answers after its writes and losing
// conditions: every key ends with one worker and one branch, and every
// answer of a key carries the same receipt.
func TestConcurrentLaunchesOneWorkerPerKey(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []faultstore.Option
	}{
		{"memstore", nil},
		{"faults", []faultstore.Option{
			faultstore.WithRate("PutEffect", 0.15, 1),
			faultstore.WithRate("PutResource", 0.1, 2),
			faultstore.WithRate("GetEffect", 0.05, 3),
			faultstore.WithFaults(faultstore.Fault{Method: "PutEffect", When: faultstore.Conflict, Skip: 2, Times: 3}),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := faultstore.New(memstore.New(), tc.faults...)
			// A short lease (the holder's work is bounded a second before
			// it ends), so a claim whose answer was lost is taken over soon.
			env := servicetest.New(t, func(c *service.Config) { c.Lease = 1500 * time.Millisecond }, service.WithStore(fs))
			l := &linSvc{svc: env.Service, rec: history.NewRecorder()}
			const keys, copies = 4, 6
			var wg sync.WaitGroup
			for k := range keys {
				c := linCall("run-launch", fmt.Sprintf("k-launch-%d", k), linLaunch("idle", fmt.Sprintf("lin/%d", k)))
				for i := range copies {
					wg.Add(1)
					go func() {
						defer wg.Done()
						linApplied(t, l, fmt.Sprintf("kitchn-%d-%d", k, i), c)
					}()
				}
			}
			wg.Wait()
			fs.Clear()
			l.inventory(context.Background())
			r := linCheck(t, l.rec.Ops(), false)
			if n := env.Runtime.StartCount(); n != keys {
				t.Fatalf("%d distinct workers started for %d keys", n, keys)
			}
			for k := range keys {
				if _, exists, err := env.Git.BranchHead(context.Background(), fmt.Sprintf("lin/%d", k)); err != nil || !exists {
					t.Fatalf("branch lin/%d: %v %v", k, exists, err)
				}
			}
			t.Logf("%d ops; receipts compared %d; faults injected %d", r.Ops, r.Checked["receipts"], fs.Injected(""))
			if tc.faults != nil && fs.Injected("") == 0 {
				t.Fatal("no fault was injected")
			}
		})
	}
}

// TestAbsentPromiseAgainstDelayedClaim holds a copy of a request between
// its arrival and its claim (a gate on the store call that reads or writes
// the claim), answers a lookup meanwhile, and releases the copy: once
// lookup said absent, the held copy never applies; a copy arriving after
// the lookup does.
func TestAbsentPromiseAgainstDelayedClaim(t *testing.T) {
	for _, method := range []string{"GetEffect", "PutEffect"} {
		t.Run(method, func(t *testing.T) {
			key := "k-held-" + method
			gate := make(chan struct{})
			reached := make(chan struct{})
			fs := faultstore.New(memstore.New(), faultstore.WithFaults(faultstore.Fault{
				Method: method, Key: key, When: faultstore.Delay, Gate: gate, Times: 1,
				Hook: func(faultstore.Call) { close(reached) },
			}))
			env := servicetest.New(t, nil, service.WithStore(fs))
			l := &linSvc{svc: env.Service, rec: history.NewRecorder()}
			ctx := context.Background()
			c := linCall("run-held", key, linLaunch("idle", "held/"+method))

			held := make(chan string, 1)
			go func() {
				st, _ := l.apply(ctx, "held-copy", c)
				held <- st
			}()
			<-reached
			if st, err := l.lookup(ctx, "kitchn", c); err != nil || st != protocol.StatusAbsent {
				t.Fatalf("lookup while a copy is held = %q %v, want absent", st, err)
			}
			close(gate)
			if st := <-held; st == protocol.StatusApplied {
				t.Fatal("the held copy applied after absent was promised")
			}
			if env.Runtime.StartCount() != 0 {
				t.Fatal("a worker started after absent was promised")
			}
			if st, _ := l.lookup(ctx, "kitchn", c); st != protocol.StatusAbsent {
				t.Fatalf("lookup after the held copy = %q", st)
			}
			// A retry sent after the lookup (and the clocks' skew) may apply.
			servicetest.RetryAfterSkew()
			if st, err := l.apply(ctx, "kitchn", c); st != protocol.StatusApplied {
				t.Fatalf("retry after lookup = %q %v", st, err)
			}
			linCheck(t, l.rec.Ops(), false)
		})
	}
}

// TestPromisesUnderRacingLookups races copies delayed before their claim
// (by random amounts) with lookups and retries over many keys, and checks
// every absent and not-applied answer against every applied one by the
// copies' exact arrival.
func TestPromisesUnderRacingLookups(t *testing.T) {
	const keys = 24
	var faults []faultstore.Fault
	for k := range keys {
		faults = append(faults, faultstore.Fault{Method: "GetEffect", Key: fmt.Sprintf("k-race-%d", k), When: faultstore.Delay,
			Delay: time.Duration(k%6) * 3 * time.Millisecond, Times: 2})
	}
	fs := faultstore.New(memstore.New(), faultstore.WithFaults(faults...))
	env := servicetest.New(t, nil, service.WithStore(fs))
	l := &linSvc{svc: env.Service, rec: history.NewRecorder()}
	ctx := context.Background()
	var wg sync.WaitGroup
	for k := range keys {
		c := linCall("run-race", fmt.Sprintf("k-race-%d", k), linLaunch("idle", ""))
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(8)) * time.Millisecond)
				if i == 0 {
					_, _ = l.lookup(ctx, fmt.Sprintf("looker-%d", k), c)
					return
				}
				_, _ = l.apply(ctx, fmt.Sprintf("copy-%d-%d", k, i), c)
			}()
		}
	}
	wg.Wait()
	// Every key ends applied by a later retry, whatever the race said.
	for k := range keys {
		linApplied(t, l, "retry", linCall("run-race", fmt.Sprintf("k-race-%d", k), linLaunch("idle", "")))
	}
	l.inventory(ctx)
	r := linCheck(t, l.rec.Ops(), false)
	if r.Checked["promises"] == 0 {
		t.Fatal("no absent or not-applied answer was given: the race proves nothing")
	}
	if n := env.Runtime.StartCount(); n != keys {
		t.Fatalf("%d workers for %d keys", n, keys)
	}
	t.Logf("%d ops, %d promises checked", r.Ops, r.Checked["promises"])
}
