package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
)

func TestExchangeBootstrap(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithClock(clock)) })
	e.clock = clock
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-1", "")
	token := e.rt.Specs[w].Token
	code := bootstrap.Code(token, w)
	const claim, thief = "claim-of-the-real-harness-0001", "claim-of-someone-else-00000001"

	if _, err := e.svc.ExchangeBootstrap(ctx, w, "gb1.forged", claim); err == nil {
		t.Fatal("a forged code was exchanged")
	}
	got, err := e.svc.ExchangeBootstrap(ctx, w, code, claim)
	if err != nil || got != token {
		t.Fatalf("first exchange: %v", err)
	}
	if got, err := e.svc.ExchangeBootstrap(ctx, w, code, claim); err != nil || got != token {
		t.Fatalf("retry of the same claim: %v", err)
	}
	if _, err := e.svc.ExchangeBootstrap(ctx, w, code, thief); err == nil {
		t.Fatal("a second claimant got the credential")
	}

	other := e.launch(t, "run-1", "k-2", "")
	otherCode := bootstrap.Code(e.rt.Specs[other].Token, other)
	if _, err := e.svc.ExchangeBootstrap(ctx, w, otherCode, claim); err == nil {
		t.Fatal("another worker's code was exchanged for this worker")
	}
	clock.Advance(bootstrap.DefaultTTL + time.Second)
	if _, err := e.svc.ExchangeBootstrap(ctx, other, otherCode, claim); err == nil {
		t.Fatal("an expired code was exchanged")
	}
}
