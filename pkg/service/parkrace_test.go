package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parked workers when the store contends or fails between two writes, and
// the edges of the parking report (docs/parking.md, Races).

// contend makes the next n writes of the worker's record lose their
// condition, as if another writer won each time.
func contend(fs *faultstore.Store, handle string, skip, n int) {
	fs.Inject(faultstore.Fault{Method: "PutResource", Key: protocol.KindWorker + "/" + handle,
		When: faultstore.Conflict, Skip: skip, Times: n})
}

// claimAttempts is how often the service tries a conditional write of a
// record before it gives up (service's claimAttempts).
const claimAttempts = 16

// TestParkingContentionIsRetryable: a parking report whose write loses
// every race is Unavailable (503: the harness retries), never a 409,
// which the harness reads as "settled meanwhile" and ends on.
func TestParkingContentionIsRetryable(t *testing.T) {
	parkFaultStores(t, func(t *testing.T, e *parkEnv, fs *faultstore.Store) {
		ctx := context.Background()
		w := e.launch(t, "run-1", "k-cont", "feature/cont")
		if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
			t.Fatal(err)
		}
		contend(fs, w, 0, claimAttempts)
		err := e.svc.WorkerPark(ctx, w, parkReq(1, 0))
		if !galleyerr.Is(galleyerr.Unavailable, err) {
			t.Fatalf("a contended parking: %v (kind %v), want Unavailable", err, galleyerr.KindOf(err))
		}
		if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); err != nil {
			t.Fatalf("the parking retried: %v", err)
		}
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply {
			t.Fatalf("parked worker observes %+v", o)
		}
	})
}

// TestParkingReportEdges: another report under a number already taken is
// refused Invalid (the same report again is not); an inbox that cannot be
// read after the parking's write fails the report (Unavailable), and its
// retry finds the input and resumes the worker.
func TestParkingReportEdges(t *testing.T) {
	parkFaultStores(t, func(t *testing.T, e *parkEnv, fs *faultstore.Store) {
		ctx := context.Background()
		w, q := e.askAndPark(t, "k-edge")
		for name, req := range map[string]workerapi.ParkRequest{
			"another cursor": parkReq(1, 1),
			"another state":  {Parking: 1, State: json.RawMessage(`{"v":2}`)},
		} {
			if err := e.svc.WorkerPark(ctx, w, req); !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("parking 1 again with %s: %v, want Invalid", name, err)
			}
		}
		// The same report, its state spaced otherwise, is a retry.
		same := parkReq(1, 0)
		same.State = json.RawMessage(`{ "v": 1, "fact": "3", "wait": "ask" }`)
		if err := e.svc.WorkerPark(ctx, w, same); err != nil {
			t.Fatalf("the same parking again: %v", err)
		}

		// Input appended behind galley's back (a lost resume), and the
		// report's inbox read fails: the report fails, its retry resumes.
		if _, err := e.store.AppendInbox(ctx, w, store.InboxItem{Key: "k-raced", Kind: "reply", Question: q, Body: "v1", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		fs.Inject(faultstore.Fault{Method: "ListInbox", Key: w, When: faultstore.Before, Times: 1})
		if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); !galleyerr.Is(galleyerr.Unavailable, err) {
			t.Fatalf("a parking whose inbox read failed: %v, want Unavailable", err)
		}
		if n := e.rt.ResumeCount(w); n != 0 {
			t.Fatalf("resumed %d times without reading the inbox", n)
		}
		if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); err != nil {
			t.Fatalf("the report retried: %v", err)
		}
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the retried report resumed the worker %d times, want 1", n)
		}
	})
}

// TestReplyResumesInItsOwnWrite: the write that records a reply's answer
// resumes a parked worker: there is no second write to lose after it.
func TestReplyResumesInItsOwnWrite(t *testing.T) {
	parkFaultStores(t, func(t *testing.T, e *parkEnv, fs *faultstore.Store) {
		w, q := e.askAndPark(t, "k-own")
		contend(fs, w, 1, claimAttempts) // every write after the answer's
		e.apply(t, call("run-1", "k-own-answer", replyBody(w, q, "v2")))
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the reply resumed the worker %d times, want 1", n)
		}
		if o := e.observe(t, w); o.State != protocol.StateStarting {
			t.Fatalf("the answered parked worker observes %+v, want starting", o)
		}
	})
}

// TestMessageResumeIsRetried: a message whose resume cannot be written
// fails (Unavailable), the worker still parked; kitchn's retry of the
// same key appends nothing more and resumes it.
func TestMessageResumeIsRetried(t *testing.T) {
	parkFaultStores(t, func(t *testing.T, e *parkEnv, fs *faultstore.Store) {
		ctx := context.Background()
		w, _ := e.askAndPark(t, "k-mretry")
		contend(fs, w, 0, claimAttempts)
		c := call("run-1", "k-mretry-msg", messageBody(w, "hello"))
		if _, err := e.svc.Apply(ctx, c, time.Now()); !galleyerr.Is(galleyerr.Unavailable, err) {
			t.Fatalf("a message whose resume was not written: %v, want Unavailable", err)
		}
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply || e.rt.ResumeCount(w) != 0 {
			t.Fatalf("after the failed resume: %+v, resumed %d", o, e.rt.ResumeCount(w))
		}
		e.apply(t, c)
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the retried message resumed the worker %d times, want 1", n)
		}
		items, err := e.store.ListInbox(ctx, w, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		copies := 0
		for _, it := range items {
			if it.Key == c.Request.Key {
				copies++
			}
		}
		if copies != 1 {
			t.Fatalf("the retried message is %d times in the inbox, want once", copies)
		}
	})
}

// TestHousekeepingResumesParkedWorkerWithInputWaiting: input whose resume
// was lost (a holder that died after the append) is found by housekeeping,
// which resumes the worker; a parked worker without input stays parked.
func TestHousekeepingResumesParkedWorkerWithInputWaiting(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		ctx := context.Background()
		w, _ := e.askAndPark(t, "k-hk")
		idle, _ := e.askAndPark(t, "k-hk-idle")
		if _, err := e.store.AppendInbox(ctx, w, store.InboxItem{Key: "k-lost", Kind: "message", Body: "lost", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.SettleLost(ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("housekeeping resumed the worker with input waiting %d times, want 1", n)
		}
		if n := e.rt.ResumeCount(idle); n != 0 {
			t.Fatalf("housekeeping resumed a parked worker without input (%d)", n)
		}
		if o := e.observe(t, idle); o.State != protocol.StateAwaitingReply {
			t.Fatalf("the idle parked worker after housekeeping: %+v", o)
		}
	})
}

// TestResumedComputeEndedBeforeItsStartWasRecorded: the runtime started
// the resumed compute but the write of Started failed; that compute then
// ends. Its end settles the worker failed (nothing runs it), instead of
// taking the end for the one an owed start waited for. Until then the
// inventory asks the runtime about the owed worker.
func TestResumedComputeEndedBeforeItsStartWasRecorded(t *testing.T) {
	parkFaultStores(t, func(t *testing.T, e *parkEnv, fs *faultstore.Store) {
		ctx := context.Background()
		w, q := e.askAndPark(t, "k-lostart")
		contend(fs, w, 1, claimAttempts) // the answer's write lands, Started's does not
		e.apply(t, call("run-1", "k-lostart-answer", replyBody(w, q, "v2")))
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("resumed %d times, want 1", n)
		}
		if l := e.inventoryLiveness(t, w); l != protocol.LivenessLive {
			t.Fatalf("the owed worker whose compute runs: inventory %q, want live", l)
		}
		e.rt.End(w)
		if l := e.inventoryLiveness(t, w); l != protocol.LivenessUnverifiable {
			t.Fatalf("the owed worker whose compute ended: inventory %q, want unverifiable", l)
		}
		if err := e.svc.WorkerExited(ctx, w, -1, "the resumed harness ended"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
			t.Fatalf("the resumed compute's end: %+v, want settled failed", o)
		}
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("resumed %d times, want 1", n)
		}
	})
}

// TestLostAfterCountsFromTheResume: a worker launched long ago and resumed
// just now whose new compute the platform does not list yet is not lost,
// neither to housekeeping nor to a late end of its parked compute; it is
// once LostAfter has passed since its resume.
func TestLostAfterCountsFromTheResume(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			clock := servicetest.NewManualClock(time.Now())
			e := newParkEnv(t, sc.open(t), service.WithClock(clock))
			e.clock = clock
			ctx := context.Background()
			w, q := e.askAndPark(t, "k-lost-after")
			clock.Advance(service.LostAfter + time.Minute)
			e.apply(t, call("run-1", "k-lost-after-answer", replyBody(w, q, "v2")))
			e.rt.Unlist(w)
			if n, err := e.svc.SettleLost(ctx); err != nil || n != 0 {
				t.Fatalf("housekeeping just after the resume settled %d (%v), want 0", n, err)
			}
			if err := e.svc.WorkerExited(ctx, w, -1, "the parked task stopped"); err != nil {
				t.Fatal(err)
			}
			if o := e.observe(t, w); o.State != protocol.StateStarting {
				t.Fatalf("just resumed, unlisted: %+v, want starting", o)
			}
			clock.Advance(service.LostAfter + time.Minute)
			if n, err := e.svc.SettleLost(ctx); err != nil || n != 1 {
				t.Fatalf("housekeeping LostAfter past the resume settled %d (%v), want 1", n, err)
			}
			if o := e.observe(t, w); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
				t.Fatalf("lost resumed worker: %+v, want settled failed", o)
			}
		})
	}
}

// TestSessionArchiveGoesAtEverySettle: a worker that never parked has its
// archive deleted when it settles (a parking that was refused saved one),
// and so does a parking refused after the settle.
func TestSessionArchiveGoesAtEverySettle(t *testing.T) {
	e := newParkEnv(t, nil)
	ctx := context.Background()
	key := func(w string) string { return snapshot.Key("origin89", w, "session") }

	w := e.launch(t, "run-1", "k-arch", "feature/arch")
	if err := e.parked.Put(ctx, key(w), strings.NewReader("session files")); err != nil {
		t.Fatal(err)
	}
	e.apply(t, call("run-1", "k-arch-cancel", fmt.Sprintf(`{"type":"cancel-worker","worker":%s}`, workerRef(w))))
	if e.sessionKept(t, w) {
		t.Fatal("the archive of a worker that never parked outlived its settle")
	}
	// The harness saved its archive after the cancel, then reported.
	if err := e.parked.Put(ctx, key(w), strings.NewReader("session files")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("parking a settled worker: %v, want Conflict", err)
	}
	if e.sessionKept(t, w) {
		t.Fatal("the archive of a refused parking was kept")
	}
}

// TestResumedInItsAskAwaitsItsReply: a worker parked in its ask and
// resumed by a message awaits its reply once its resumed harness is
// ready (its agent waits on that question again), and is ready once the
// reply comes.
func TestResumedInItsAskAwaitsItsReply(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		ctx := context.Background()
		w, q := e.askAndPark(t, "k-ask")
		e.apply(t, call("run-1", "k-ask-msg", messageBody(w, "still there?")))
		if err := e.svc.WorkerReady(ctx, w, "script agent started"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply {
			t.Fatalf("resumed in its ask, its question open: %+v, want awaiting-reply", o)
		}
		e.apply(t, call("run-1", "k-ask-answer", replyBody(w, q, "v2")))
		if o := e.observe(t, w); o.State != protocol.StateReady {
			t.Fatalf("after the reply: %+v, want ready", o)
		}
	})
}
