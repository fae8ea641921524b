package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
)

func usage(n int64) protocol.UsageReport {
	return protocol.UsageReport{Tokens: &protocol.Tokens{Input: &n, Output: &n}}
}

func (e *env) reportedInput(t *testing.T, handle string) int64 {
	t.Helper()
	u, err := e.svc.Usage(context.Background(), protocol.Resource{Kind: "worker", Backend: "galley", Handle: handle})
	if err != nil || u.Report == nil || u.Report.Tokens == nil || u.Report.Tokens.Input == nil {
		t.Fatalf("usage of %s: %+v, %v", handle, u, err)
	}
	return *u.Report.Tokens.Input
}

func clockEnv(t *testing.T) (*env, *servicetest.ManualClock) {
	clock := servicetest.NewManualClock(time.Now())
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithClock(clock)) })
	e.clock = clock
	return e, clock
}

// A settled worker's credential reads, sends its exit report once and, if
// it settled by its own worker-done, one final usage report within the
// grace; nothing else. The rewrite of a settled worker's usage to
// 999,999,999 tokens is refused.
func TestSettledCredentialOnlyReads(t *testing.T) {
	e, clock := clockEnv(t)
	ctx := context.Background()
	done := e.launch(t, "run-1", "k-done", "")
	cancelled := e.launch(t, "run-1", "k-cancelled", "")
	late := e.launch(t, "run-1", "k-late", "")
	for _, w := range []string{done, cancelled, late} {
		if h, err := e.svc.AuthenticateWorker(ctx, e.rt.Specs[w].Token); err != nil || h != w {
			t.Fatalf("%s: authenticates as %q, %v", w, h, err)
		}
		if err := e.svc.WorkerUsage(ctx, w, usage(100)); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []string{done, late} {
		if _, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(cancelled)+`}`))

	conflict := func(what string, err error) {
		t.Helper()
		if !galleyerr.Is(galleyerr.Conflict, err) {
			t.Errorf("%s: %v, want a definite conflict", what, err)
		}
	}
	for _, w := range []string{done, cancelled} {
		// Reads work: the credential still authenticates.
		if h, err := e.svc.AuthenticateWorker(ctx, e.rt.Specs[w].Token); err != nil || h != w {
			t.Fatalf("settled %s: authenticates as %q, %v", w, h, err)
		}
		if self, err := e.svc.WorkerSelf(ctx, w); err != nil || self.State != protocol.StateSettled {
			t.Errorf("self of settled %s: %+v, %v", w, self, err)
		}
		if in, err := e.svc.WorkerInbox(ctx, w, 0, 0); err != nil || !in.Settled {
			t.Errorf("inbox of settled %s: %+v, %v", w, in, err)
		}
		conflict("ready after settling", e.svc.WorkerReady(ctx, w, "again"))
		_, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "still here"})
		conflict("post after settling", err)
	}
	// Cancelled: its usage is final at once.
	conflict("usage rewrite after cancel", e.svc.WorkerUsage(ctx, cancelled, usage(999_999_999)))
	if got := e.reportedInput(t, cancelled); got != 100 {
		t.Errorf("cancelled worker's usage = %d, want 100", got)
	}
	// Finished: the agent's last turn may still report, once.
	if err := e.svc.WorkerUsage(ctx, done, usage(150)); err != nil {
		t.Fatalf("the final usage report after worker-done: %v", err)
	}
	conflict("usage rewrite after the final report", e.svc.WorkerUsage(ctx, done, usage(999_999_999)))
	if got := e.reportedInput(t, done); got != 150 {
		t.Errorf("finished worker's usage = %d, want the final 150", got)
	}
	// Past the grace, even the final report is refused.
	clock.Advance(3 * time.Minute)
	conflict("usage after the grace", e.svc.WorkerUsage(ctx, late, usage(999_999_999)))
	if got := e.reportedInput(t, late); got != 100 {
		t.Errorf("late worker's usage = %d, want 100", got)
	}
	// The exit report is taken once.
	if err := e.svc.WorkerExitReport(ctx, cancelled, 143, "stopped"); err != nil {
		t.Fatalf("exit report: %v", err)
	}
	conflict("a second exit report", e.svc.WorkerExitReport(ctx, cancelled, 0, "again"))
	if o := e.observe(t, cancelled); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeCancelled {
		t.Errorf("the exit report changed a settled worker: %+v", o)
	}
}

// A released worker's credential authenticates nothing; a revoked one
// neither; other workers' credentials are untouched by both.
func TestReleasedAndRevokedCredentialsAreVoid(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	released := e.launch(t, "run-1", "k-released", "")
	revoked := e.launch(t, "run-1", "k-revoked", "")
	bystander := e.launch(t, "run-1", "k-bystander", "")
	tokens := map[string]string{}
	for _, w := range []string{released, revoked, bystander} {
		tokens[w] = e.rt.Specs[w].Token
	}
	unauthorized := func(what, token string) {
		t.Helper()
		if _, err := e.svc.AuthenticateWorker(ctx, token); !galleyerr.Is(galleyerr.Unauthorized, err) {
			t.Errorf("%s: %v, want unauthorized", what, err)
		}
	}

	e.apply(t, call("run-1", "k-release", `{"type":"release-resource","resource":`+workerRef(released)+`}`))
	unauthorized("released worker's credential", tokens[released])

	if err := e.svc.RevokeWorkerCredential(ctx, revoked); err != nil {
		t.Fatal(err)
	}
	unauthorized("revoked credential", tokens[revoked])
	if o := e.observe(t, revoked); o.State != protocol.StateStarting {
		t.Errorf("revocation changed the worker: %+v", o)
	}
	// Revocation needs no new signing key: the bystander's credential, made
	// with the same key, still works, as does a forged one's refusal.
	if h, err := e.svc.AuthenticateWorker(ctx, tokens[bystander]); err != nil || h != bystander {
		t.Fatalf("bystander: %q, %v", h, err)
	}
	unauthorized("a forged credential", bystander+".Zm9yZ2Vk")
	unauthorized("one worker's mac under another's handle", revoked+tokens[bystander][len(bystander):])
	// A re-launch of the same key is the same incarnation: it replays, and
	// hands out no new credential.
	e.apply(t, call("run-1", "k-revoked", launchBody("")))
	unauthorized("revoked credential after a replay", tokens[revoked])
}
