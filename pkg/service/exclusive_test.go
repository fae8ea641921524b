package service_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
)

// gatedRuntime holds the first Start until the test opens the gate, so a
// claim stays in flight for as long as the test needs; later Starts pass.
type gatedRuntime struct {
	*servicetest.Runtime
	first   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedRuntime) Start(ctx context.Context, spec service.WorkerSpec) error {
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.gate
	}
	return g.Runtime.Start(ctx, spec)
}

// TestExclusiveStoreTakesOverOnlyDeadClaims: with an exclusive store, a
// claim an earlier process left in flight (the server was killed and
// restarted) is taken over at once and converges, while a claim this
// process holds still refuses its copies until its lease ends.
func TestExclusiveStoreTakesOverOnlyDeadClaims(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	rt := &gatedRuntime{Runtime: servicetest.NewRuntime(), entered: make(chan struct{}), gate: make(chan struct{})}
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.Lease, cfg.ExclusiveStore = 30*time.Second, true
		*o = append(*o, service.WithClock(clock), service.WithRuntime(rt))
	})
	ctx := context.Background()
	c := call("run-1", "k-live", launchBody("live/branch"))

	// A claim of this process: its copy is refused while the first runs.
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.Apply(ctx, c, clock.Now())
		done <- err
	}()
	<-rt.entered
	if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.InFlight, err) {
		t.Fatalf("a copy during this process's own claim: %v, want in-flight", err)
	}
	close(rt.gate)
	if err := <-done; err != nil {
		t.Fatalf("first copy: %v", err)
	}
	first, _ := e.apply(t, c) // a replay of the stored receipt

	// The claim of a process that died: rolled back to in flight under a
	// lease of another incarnation that has most of its time left.
	rec, ver, err := e.store.GetEffect(ctx, "k-live")
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Receipt = store.EffectInFlight, nil
	rec.Lease, rec.LeaseExpires = "0123456789abcdef.dead", clock.Now().Add(29*time.Second)
	if _, err := e.store.PutEffect(ctx, rec, ver); err != nil {
		t.Fatal(err)
	}
	second, _ := e.apply(t, c)
	if fmt.Sprint(first) != fmt.Sprint(second) {
		t.Fatalf("takeover receipt differs:\n%+v\n%+v", first, second)
	}
	if n := len(rt.Starts); n != 1 {
		t.Fatalf("takeover started %d distinct workers, want 1", n)
	}
}

// TestSharedStoreWaitsOutALease: without the exclusive promise, another
// process's claim may be alive, so its lease is honoured.
func TestSharedStoreWaitsOutALease(t *testing.T) {
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
		cfg.Lease = 30 * time.Second
		*o = append(*o, service.WithClock(clock))
	})
	ctx := context.Background()
	c := call("run-1", "k-other", launchBody("other/branch"))
	e.apply(t, c)
	rec, ver, err := e.store.GetEffect(ctx, "k-other")
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.Receipt = store.EffectInFlight, nil
	rec.Lease, rec.LeaseExpires = "0123456789abcdef.other", clock.Now().Add(29*time.Second)
	if _, err := e.store.PutEffect(ctx, rec, ver); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Apply(ctx, c, clock.Now()); !galleyerr.Is(galleyerr.InFlight, err) {
		t.Fatalf("another process's live claim on a shared store: %v, want in-flight", err)
	}
}
