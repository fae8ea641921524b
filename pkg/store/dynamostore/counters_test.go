package dynamostore_test

import (
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// Counts from several processes on one table: only DynamoDB's atomic ADD
// keeps them apart, and no value is answered twice.
func TestCountsAcrossProcesses(t *testing.T) {
	ss := instances(t, 4)
	const each = 20
	var (
		mu   sync.Mutex
		seen = map[int64]bool{}
		wg   sync.WaitGroup
	)
	for p, s := range ss {
		wg.Go(func() {
			for range each {
				n, err := s.NextCount(t.Context(), store.CounterAgentUID)
				if err != nil {
					t.Errorf("process %d: %v", p, err)
					return
				}
				mu.Lock()
				if seen[n] {
					t.Errorf("value %d answered twice", n)
				}
				seen[n] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != len(ss)*each {
		t.Errorf("%d distinct values, want %d", len(seen), len(ss)*each)
	}
}

// A count whose answer is lost is resent: the first try applied, so the
// resend skips a value, and the answer is still one nobody else got.
func TestLostResponseOnCount(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	first, err := s.NextCount(ctx, "c")
	mustOK(t, "first count", err)
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.LostResponse})
	n, err := s.NextCount(ctx, "c")
	mustOK(t, "count with a lost answer", err)
	if inj.Injected("UpdateItem", awsfault.LostResponse) != 1 {
		t.Fatal("no lost response was injected")
	}
	if n != first+2 {
		t.Errorf("count after a lost answer is %d, want %d (the lost try took %d)", n, first+2, first+1)
	}
	for range 4 {
		inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.LostResponse})
	}
	_, err = s.NextCount(ctx, "c")
	wantKind(t, "count with every answer lost", err, galleyerr.Unavailable)
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.Throttle})
	_, err = s.NextCount(ctx, "c")
	wantKind(t, "throttled count", err, galleyerr.Unavailable)
	last, err := s.NextCount(ctx, "c")
	mustOK(t, "count after the faults", err)
	// first+2, then four lost tries (the first and three resends), then
	// none for the throttled one.
	if last != first+7 {
		t.Errorf("count after the faults is %d, want %d: each lost try counted once, the throttled one not", last, first+7)
	}
}
