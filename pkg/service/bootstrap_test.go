package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
)

func newKey(t *testing.T) *dpop.Key {
	t.Helper()
	k, err := dpop.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// proof is k's proof for a POST to path carrying cred, at now.
func proof(t *testing.T, k *dpop.Key, path, cred string, now time.Time) dpop.Request {
	t.Helper()
	p, err := k.Proof("POST", "http://galley.test"+path, cred, now)
	if err != nil {
		t.Fatal(err)
	}
	return dpop.Request{Proof: p, Method: "POST", Path: path}
}

func TestExchangeBootstrap(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithClock(clock)) })
	e.clock = clock
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-1", "")
	token := e.rt.Specs[w].Token
	code := bootstrap.Code(token, w)
	const claim, thief = "claim-of-the-real-harness-0001", "claim-of-someone-else-00000001"
	key, thiefKey := newKey(t), newKey(t)
	xp := func(k *dpop.Key) dpop.Request { return proof(t, k, workerapi.PathCredential, "", clock.Now()) }

	if _, err := e.svc.ExchangeBootstrap(ctx, w, "gb1.forged", claim, xp(key)); err == nil {
		t.Fatal("a forged code was exchanged")
	}
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, dpop.Request{Method: "POST", Path: workerapi.PathCredential}); err == nil {
		t.Fatal("an exchange without a proof got the credential")
	}
	first := xp(key)
	got, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, first)
	if err != nil || got != token {
		t.Fatalf("first exchange: %v", err)
	}
	if got, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, xp(key)); err != nil || got != token {
		t.Fatalf("retry of the same claim: %v", err)
	}
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, first); err == nil {
		t.Fatal("a replayed exchange proof was accepted")
	}
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, xp(thiefKey)); err == nil {
		t.Fatal("the first claim with another key got the credential")
	}
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, thief, xp(thiefKey)); err == nil {
		t.Fatal("a second claimant got the credential")
	}

	other := e.launch(t, "run-1", "k-2", "")
	otherCode := bootstrap.Code(e.rt.Specs[other].Token, other)
	if _, err := e.svc.ExchangeBootstrap(ctx, w, otherCode, claim, xp(key)); err == nil {
		t.Fatal("another worker's code was exchanged for this worker")
	}
	clock.Advance(bootstrap.DefaultTTL + time.Second)
	if _, err := e.svc.ExchangeBootstrap(ctx, other, otherCode, claim, xp(key)); err == nil {
		t.Fatal("an expired code was exchanged")
	}
}

// A credential bound to its harness's key (issue 21, item 5): the key's
// fresh proofs pass; the credential without a proof, with a proof of
// another key, or with a proof used before is refused 401.
func TestWorkerCredentialBoundToKey(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithClock(clock)) })
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-1", "")
	token := e.rt.Specs[w].Token
	harnessKey, thiefKey := newKey(t), newKey(t)
	call := func(k *dpop.Key) dpop.Request { return proof(t, k, workerapi.PathSelf, token, clock.Now()) }
	refused := func(what string, req dpop.Request) {
		t.Helper()
		if _, err := e.svc.AuthenticateWorkerCall(ctx, token, req); !galleyerr.Is(galleyerr.Unauthorized, err) {
			t.Fatalf("%s: %v, want Unauthorized", what, err)
		}
	}
	refused("the credential without a proof", dpop.Request{Method: "POST", Path: workerapi.PathSelf})

	// The harness's first call binds the credential to its key.
	first := call(harnessKey)
	if h, err := e.svc.AuthenticateWorkerCall(ctx, token, first); err != nil || h != w {
		t.Fatalf("the harness's first call: %q, %v", h, err)
	}
	if h, err := e.svc.AuthenticateWorkerCall(ctx, token, call(harnessKey)); err != nil || h != w {
		t.Fatalf("the harness's next call: %q, %v", h, err)
	}
	refused("a stolen credential without a proof", dpop.Request{Method: "POST", Path: workerapi.PathSelf})
	refused("a stolen credential with the thief's own key", call(thiefKey))
	refused("a replayed proof", first)
	p := call(harnessKey)
	p.Path = workerapi.PathExited
	refused("a proof for another route", p)
	refused("a proof for another credential", proof(t, harnessKey, workerapi.PathSelf, w+".forged", clock.Now()))
	refused("a proof made two windows ago", proof(t, harnessKey, workerapi.PathSelf, token, clock.Now().Add(-2*dpop.Window)))
}

// A parked worker resumed long after its launch (docs/parking.md): its
// new task's code is young from the resume, not from the record's
// creation, and the launch's code stays refused.
func TestExchangeBootstrapOfAResumedWorker(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newParkEnv(t, nil, service.WithClock(clock))
	e.clock = clock
	ctx := context.Background()
	w, q := e.askAndPark(t, "k-boot")
	launchCode := bootstrap.Code(e.rt.Specs[w].Token, w)
	clock.Advance(time.Hour)
	e.apply(t, call("run-1", "k-boot-reply", replyBody(w, q, "v2")))
	token := e.rt.ResumeSpec(w).Token
	code := bootstrap.Code(token, w)
	key := newKey(t)
	const claim = "claim-of-the-resumed-harness-01"
	xp := func() dpop.Request { return proof(t, key, workerapi.PathCredential, "", clock.Now()) }
	if _, err := e.svc.ExchangeBootstrap(ctx, w, launchCode, claim, xp()); err == nil {
		t.Fatal("the launch's code was exchanged after the resume")
	}
	clock.Advance(bootstrap.DefaultTTL - time.Minute)
	got, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, xp())
	if err != nil || got != token {
		t.Fatalf("the resumed task's exchange an hour after the launch: %v", err)
	}
	// Past its own window, a retry of the same claim is refused too.
	clock.Advance(2 * time.Minute)
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, claim, xp()); err == nil {
		t.Fatal("the resumed task's code was exchanged after its window")
	}
}
