package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestTakeoverOfAClaimThatNeverActedRefuses (issue 13, item 4): the claim
// records whether acting began. An effect whose first attempt failed before
// acting (its read of the worker failed, so the claim was left in flight)
// and whose retry takes the claim over still refuses definitely: the answer
// is not-applied rejected and lookup says absent, instead of an uncertain
// answer for ever.
func TestTakeoverOfAClaimThatNeverActedRefuses(t *testing.T) {
	for _, sc := range floodStores {
		for _, tc := range []struct {
			name string
			// set up returns the effect; the first attempt's read of
			// worker w fails. then runs before the retry.
			setup func(t *testing.T, e *env, w, q string) protocol.EffectCall
			then  func(t *testing.T, e *env, w, q string)
		}{
			{"a cancel of a worker that never existed",
				func(t *testing.T, e *env, _, _ string) protocol.EffectCall {
					return call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef("w-never")+`}`)
				}, nil},
			{"the losing one of two replies",
				func(t *testing.T, e *env, w, q string) protocol.EffectCall {
					return call("run-1", "k-reply-b", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q+`","body":"v2"}`)
				},
				func(t *testing.T, e *env, w, q string) {
					e.apply(t, call("run-1", "k-reply-a", `{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q+`","body":"v1"}`))
				}},
			{"a message to a worker that settled since",
				func(t *testing.T, e *env, w, _ string) protocol.EffectCall {
					return call("run-1", "k-message", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`)
				},
				func(t *testing.T, e *env, w, _ string) {
					if _, err := e.svc.WorkerPost(context.Background(), w, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
						t.Fatal(err)
					}
				}},
		} {
			t.Run(sc.name+"/"+tc.name, func(t *testing.T) {
				e, fs, clock := faultEnv(t, sc.open(t))
				ctx := context.Background()
				w := e.launch(t, "run-1", "k-launch", "")
				if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
					t.Fatal(err)
				}
				q, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "v1 or v2?"})
				if err != nil {
					t.Fatal(err)
				}
				c := tc.setup(t, e, w, q.ID)
				target := w
				if c.Request.Key == "k-cancel" {
					target = "w-never"
				}
				// The first attempt claims the key, then fails to read the
				// worker, and its attempt to end the lease fails too: the
				// claim stays in flight, as a holder that died leaves it.
				fs.Inject(faultstore.Fault{Method: "GetResource", Key: protocol.KindWorker + "/" + target, When: faultstore.Before, Times: 1})
				fs.Inject(faultstore.Fault{Method: "PutEffect", Key: c.Request.Key, Skip: 1, When: faultstore.Before, Times: 1})
				if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
					t.Fatalf("first attempt: %v, want an uncertain answer", err)
				}
				if fs.Injected("") != 2 {
					t.Fatalf("%d faults fired, want 2", fs.Injected(""))
				}
				if rec, _, err := e.store.GetEffect(ctx, c.Request.Key); err != nil || rec.State != store.EffectInFlight {
					t.Fatalf("claim after the first attempt: %+v %v", rec, err)
				}
				if tc.then != nil {
					tc.then(t, e, w, q.ID)
				}
				clock.Advance(11 * time.Second)
				if err := applyErr(e, c); !galleyerr.Is(galleyerr.Invalid, err) {
					t.Fatalf("the retry that took the claim over: %v, want not-applied rejected", err)
				}
				if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusAbsent {
					t.Fatalf("lookup: %+v %v, want absent", ans, err)
				}
			})
		}
	}
}

// TestTakeoverOfAClaimThatActedStaysUncertain: the claim's record of
// acting is kept across takeovers. A message whose holder recorded that
// acting began and then died leaves no proof either way once the worker
// has settled: its retry stays uncertain, never not-applied.
func TestTakeoverOfAClaimThatActedStaysUncertain(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			e, fs, clock := faultEnv(t, sc.open(t))
			ctx := context.Background()
			w := e.launch(t, "run-1", "k-launch", "")
			c := call("run-1", "k-message", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`)
			// The claim, then the write that records acting; the append
			// fails, and so does the write that would end the lease.
			fs.Inject(faultstore.Fault{Method: "AppendInbox", Key: w, When: faultstore.Before, Times: 1})
			fs.Inject(faultstore.Fault{Method: "PutEffect", Key: "k-message", Skip: 2, When: faultstore.Before, Times: 1})
			if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first attempt: %v", err)
			}
			if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(11 * time.Second)
			for range 2 {
				if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
					t.Fatalf("a takeover of a claim that acted: %v, want uncertain", err)
				}
				clock.Advance(11 * time.Second)
			}
			if ans, _, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusUnknown {
				t.Fatalf("lookup: %+v %v, want unknown", ans, err)
			}
		})
	}
}
