package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// TestCompletionWriteFailures: the write that records a receipt may fail
// without a definite answer. A lost answer, a failure before the write and
// a spurious conflict are settled by reading the record, and the effect
// answers its receipt; a write that keeps failing ends the lease, so the
// client's retry converges at once instead of after the lease.
func TestCompletionWriteFailures(t *testing.T) {
	for _, c := range []struct {
		name    string
		faults  []faultstore.Fault
		applied bool // the first call answers the receipt
	}{
		{"answer lost", []faultstore.Fault{{When: faultstore.After, Times: 1}}, true},
		{"failed before writing", []faultstore.Fault{{When: faultstore.Before, Times: 1}}, true},
		{"spurious conflict", []faultstore.Fault{{When: faultstore.Conflict, Times: 1}}, true},
		// Every attempt fails; the write that ends the lease passes.
		{"keeps failing", []faultstore.Fault{{When: faultstore.Before, Times: 3}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
			fs := faultstore.New(memstore.New())
			e := newEnv(t, func(cfg *service.Config, o *[]service.Option) {
				cfg.Lease = 30 * time.Second
				*o = append(*o, service.WithClock(clock), service.WithStore(fs))
			})
			e.clock = clock
			ctx := context.Background()
			w := e.launch(t, "run-1", "k-launch", "feature/complete")
			msg := call("run-1", "k-msg", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`)
			// The message's PutEffect calls: the claim, the write that
			// records that acting begins, then the completion.
			for _, f := range c.faults {
				f.Method, f.Key, f.Skip = "PutEffect", "k-msg", 2
				fs.Inject(f)
			}
			_, err := e.svc.Apply(ctx, msg, clock.Now())
			if c.applied != (err == nil) {
				t.Fatalf("first call: %v, want applied %v", err, c.applied)
			}
			if fs.Injected("PutEffect") == 0 {
				t.Fatal("no fault fired")
			}
			if !c.applied {
				if galleyerr.Is(galleyerr.Invalid, err) {
					t.Fatalf("a failure after acting answered not-applied: %v", err)
				}
				fs.Clear()
				// No clock advance: the lease was ended, the retry converges.
				if _, err := e.svc.Apply(ctx, msg, clock.Now()); err != nil {
					t.Fatalf("retry after the failed completion: %v", err)
				}
			}
			rec, _, err := fs.GetEffect(ctx, "k-msg")
			if err != nil || rec.State != store.EffectApplied {
				t.Fatalf("effect record %+v %v, want applied", rec, err)
			}
			inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
			if err != nil || len(inbox.Items) != 1 {
				t.Fatalf("inbox %+v %v, want the message once", inbox, err)
			}
		})
	}
}
