// Package drive is galley's load driver: it calls a galley endpoint as
// many kitchn coordinators would (launching scripted workers, messaging,
// replying, cancelling, releasing, observing, listing, waiting on
// mailboxes), records every call with package history, and measures
// throughput, latency per route and the await wake-up time. The load
// generator (scripts/load) and the end-to-end fault tests (local/e2e) run
// it. It calls loopback endpoints only, and every run is bounded in time
// and in requests.
package drive

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
)

// Target is the galley deployment a run calls.
type Target struct {
	Endpoint   string // http on a loopback address
	Token      string `json:"-"` // kitchn's bearer token; never logged nor written
	House      string
	Backend    string
	Credential string
}

// String leaves the token out, so no report or log line carries it.
func (t Target) String() string {
	return fmt.Sprintf("{%s house %s backend %s credential %s}", t.Endpoint, t.House, t.Backend, t.Credential)
}

// caller makes recorded calls and counts them.
type caller struct {
	t     Target
	c     *history.Client
	rec   *history.Recorder
	calls atomic.Int64
	log   io.Writer
}

func newCaller(t Target, rec *history.Recorder, log io.Writer) (*caller, error) {
	c, err := history.NewClient(t.Endpoint, t.Token, rec, nil)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = io.Discard
	}
	return &caller{t: t, c: c, rec: rec, log: log}, nil
}

func (c *caller) logf(format string, args ...any) { fmt.Fprintf(c.log, format+"\n", args...) }

func (c *caller) do(ctx context.Context, client string, route history.Route, body []byte, key string, extra time.Duration) (history.Op, error) {
	c.calls.Add(1)
	return c.c.Do(ctx, client, route, body, key, extra)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// effect builds an effect call.
func (c *caller) effect(run, task, key string, eff any) protocol.EffectCall {
	return protocol.EffectCall{Run: run, Request: protocol.EffectRequest{
		House: c.t.House, Backend: c.t.Backend, Credential: c.t.Credential, Task: task, Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: mustJSON(eff)},
	}}
}

func (c *caller) worker(handle string) protocol.Resource {
	return protocol.Resource{Kind: protocol.KindWorker, Backend: c.t.Backend, Handle: handle}
}

// outcome is what an effect came to.
type outcome struct {
	applied bool
	reason  string // not-applied reason
	receipt protocol.Receipt
}

type effectAnswer struct {
	Status            string           `json:"status"`
	Reason            string           `json:"reason"`
	RetryAfterSeconds int              `json:"retryAfterSeconds"`
	Receipt           protocol.Receipt `json:"receipt"`
}

// apply sends an effect until it has an outcome, as kitchn does: an
// uncertain answer is reconciled by lookup before any retry, and a
// rate-limited one, which is definite (nothing was applied), is resent
// after the retryAfterSeconds it names, without a lookup. A lookup's
// absence promise refuses copies that arrive within the deployment's
// clock skew after it (a second on the AWS shape), so a lookup right
// before each resend would keep every resend refused. It gives up at
// ctx's end or after patience.
func (c *caller) apply(ctx context.Context, client string, call protocol.EffectCall, patience time.Duration) (outcome, error) {
	body := mustJSON(call)
	key := call.Request.Key
	deadline := time.Now().Add(patience)
	for pause := 20 * time.Millisecond; ; pause = min(pause*2, time.Second) {
		limited := time.Duration(-1)
		{
			op, err := c.do(ctx, client, history.Effect, body, key, 0)
			if err == nil && op.Status == http.StatusOK {
				var a effectAnswer
				if json.Unmarshal(op.Answer, &a) == nil {
					switch a.Status {
					case protocol.StatusApplied:
						return outcome{applied: true, receipt: a.Receipt}, nil
					case protocol.StatusNotApplied:
						if a.Reason != protocol.ReasonRateLimited {
							return outcome{reason: a.Reason}, nil
						}
						limited = max(time.Duration(a.RetryAfterSeconds)*time.Second, pause)
					}
				}
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return outcome{}, fmt.Errorf("effect %s: no outcome within %v", key, patience)
		}
		if limited >= 0 {
			sleep(ctx, min(limited+time.Duration(rand.Int64N(int64(pause))), time.Until(deadline)))
			continue
		}
		sleep(ctx, pause+time.Duration(rand.Int64N(int64(pause))))
		// Reconcile before resending. Unknown (a copy in flight, perhaps one
		// whose holder died) and absent both lead to a resend: it answers
		// in flight again, or takes the claim over once its lease expired,
		// or applies as a copy sent after the promise.
		op, err := c.do(ctx, client, history.Lookup, body, "", 0)
		if err == nil && op.Status == http.StatusOK {
			var a effectAnswer
			if json.Unmarshal(op.Answer, &a) == nil && a.Status == protocol.StatusApplied {
				return outcome{applied: true, receipt: a.Receipt}, nil
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// mailbox calls one mailbox route and parses the answer; ok is false for
// anything but a 200 with a readable answer.
func (c *caller) mailbox(ctx context.Context, route history.Route, call protocol.MailboxCall) (history.Op, protocol.MailboxAnswer, bool) {
	extra := time.Duration(0)
	if call.WaitMs != nil {
		extra = time.Duration(*call.WaitMs) * time.Millisecond
	}
	op, err := c.do(ctx, call.Coordinator, route, mustJSON(call), "", extra)
	var a protocol.MailboxAnswer
	if err != nil || op.Status != http.StatusOK || json.Unmarshal(op.Answer, &a) != nil {
		return op, a, false
	}
	if route == history.Adopt && a.Status == "" {
		a.Status = "adopted"
	}
	return op, a, true
}

func (c *caller) observe(ctx context.Context, client, handle string) (protocol.Observation, bool) {
	op, err := c.do(ctx, client, history.Observe, mustJSON(protocol.WorkerCall{Worker: c.worker(handle)}), "", 0)
	var o protocol.Observation
	if err != nil || op.Status != http.StatusOK || json.Unmarshal(op.Answer, &o) != nil {
		return o, false
	}
	return o, true
}
