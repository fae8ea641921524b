package dynamostore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// faulty returns a store whose client injects inj's faults, on a fresh
// table (created without faults).
func faulty(t *testing.T, inj *awsfault.Injector, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	c := client(t)
	s := newTable(t, c, opts...)
	opts = append([]dynamostore.Option{dynamostore.WithRetries(3, time.Millisecond)}, opts...)
	return dynamostore.New(&awsfault.DynamoDB{Client: c, Faults: inj}, s.Table(), opts...)
}

func effect(key, fp string) store.Effect {
	return store.Effect{Key: key, Fingerprint: fp, State: store.EffectInFlight, Updated: time.Unix(1, 0).UTC()}
}

func wantKind(t *testing.T, what string, err error, k galleyerr.Kind) {
	t.Helper()
	if !galleyerr.Is(k, err) {
		t.Fatalf("%s: err = %v, want kind %v", what, err, k)
	}
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// A conditional put whose answer is lost: the store resends it, finds its
// own write at the version it asked for, and answers success; the record
// holds exactly one write, and a caller's retry of the same put loses.
func TestLostResponseOnPut(t *testing.T) {
	for _, prev := range []store.Version{store.NoVersion, 1} {
		t.Run(fmt.Sprint("prev=", prev), func(t *testing.T) {
			inj := awsfault.New()
			s := faulty(t, inj)
			ctx := t.Context()
			if prev != store.NoVersion {
				_, err := s.PutEffect(ctx, effect("k", "first"), store.NoVersion)
				mustOK(t, "create", err)
			}
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.LostResponse})
			v, err := s.PutEffect(ctx, effect("k", "mine"), prev)
			mustOK(t, "put with a lost answer", err)
			if v != prev+1 {
				t.Errorf("version %d, want %d", v, prev+1)
			}
			if n := inj.Injected("UpdateItem", awsfault.LostResponse); n != 1 {
				t.Fatalf("lost responses injected: %d", n)
			}
			got, gv, err := s.GetEffect(ctx, "k")
			mustOK(t, "get", err)
			if gv != prev+1 || got.Fingerprint != "mine" {
				t.Errorf("stored %q at version %d, want \"mine\" at %d", got.Fingerprint, gv, prev+1)
			}
			_, err = s.PutEffect(ctx, effect("k", "retry"), prev)
			wantKind(t, "the caller's retry", err, galleyerr.Conflict)
		})
	}
}

// When every answer is lost, the store cannot tell: Unavailable. The write
// happened once, and the caller's retry from its old version loses.
func TestEveryAnswerLost(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	for range 4 {
		inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.LostResponse})
	}
	_, err := s.PutEffect(ctx, effect("k", "mine"), store.NoVersion)
	wantKind(t, "put with every answer lost", err, galleyerr.Unavailable)
	got, v, err := s.GetEffect(ctx, "k")
	mustOK(t, "get", err)
	if v != 1 || got.Fingerprint != "mine" {
		t.Errorf("stored %q at version %d, want one write", got.Fingerprint, v)
	}
	_, err = s.PutEffect(ctx, effect("k", "retry"), store.NoVersion)
	wantKind(t, "retry", err, galleyerr.Conflict)
}

// A lost answer whose write lost to another writer in between: the resend
// fails its condition, another writer's id is there, so it is a Conflict.
func TestLostResponseThenOtherWriter(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	// Our first try times out before reaching DynamoDB, and the other
	// writer's create is there when ours is resent.
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.Timeout})
	other := dynamostore.New(client(t), s.Table())
	_, err := other.PutEffect(ctx, effect("k", "other"), store.NoVersion)
	mustOK(t, "other writer", err)
	_, err = s.PutEffect(ctx, effect("k", "mine"), store.NoVersion)
	wantKind(t, "put after another writer", err, galleyerr.Conflict)
	got, _, err := s.GetEffect(ctx, "k")
	mustOK(t, "get", err)
	if got.Fingerprint != "other" {
		t.Errorf("stored %q, want the other writer's", got.Fingerprint)
	}
}

// Definite failures: throttling answers Unavailable and writes nothing; a
// failed condition on an update answers Conflict and writes nothing; a
// timeout before the call is resent and applied once. A create's condition
// fails only on a live item: an injected failure with none to return goes
// through, as DynamoDB would apply the write.
func TestDefiniteFaults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   awsfault.Fault
		prior   bool           // the record exists (version 1) before the faulted write
		want    galleyerr.Kind // Other: no error
		written bool
	}{
		{"throttle", awsfault.Throttle, false, galleyerr.Unavailable, false},
		{"condition-failed", awsfault.ConditionFailed, true, galleyerr.Conflict, false},
		{"condition-failed on a create", awsfault.ConditionFailed, false, galleyerr.Other, true},
		{"timeout", awsfault.Timeout, false, galleyerr.Other, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inj := awsfault.New()
			s := faulty(t, inj)
			ctx := t.Context()
			prev := store.NoVersion
			if tc.prior {
				v, err := s.PutEffect(ctx, effect("k", "before"), store.NoVersion)
				mustOK(t, "prior put", err)
				prev = v
			}
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: tc.fault})
			_, err := s.PutEffect(ctx, effect("k", "mine"), prev)
			if tc.want == galleyerr.Other {
				mustOK(t, "put", err)
			} else {
				wantKind(t, "put", err, tc.want)
			}
			want := prev
			if tc.written {
				want++
			}
			got, v, err := s.GetEffect(ctx, "k")
			if want == store.NoVersion {
				wantKind(t, "get", err, galleyerr.NotFound)
				return
			}
			mustOK(t, "get", err)
			if v != want || (tc.written != (got.Fingerprint == "mine")) {
				t.Errorf("version %d holding %q, want %d (written: %v)", v, got.Fingerprint, want, tc.written)
			}
		})
	}
}

// Appends and resource creations are transactions; a lost answer is
// resent with the same token and resolved by the write id: one message, one
// resource, and the sequence carries on without a gap.
func TestLostResponseOnTransaction(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()

	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.LostResponse})
	seq, _, err := s.AppendMessage(ctx, "run", msg("a"))
	mustOK(t, "append with a lost answer", err)
	if seq != 1 {
		t.Errorf("seq %d, want 1", seq)
	}
	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Timeout})
	seq, _, err = s.AppendMessage(ctx, "run", msg("b"))
	mustOK(t, "append after a timeout", err)
	if seq != 2 {
		t.Errorf("seq %d, want 2", seq)
	}
	checkMessages(t, s, "run", "a", "b")
	// The caller's own retry of a finds it: nothing is appended.
	seq, existed, err := s.AppendMessage(ctx, "run", msg("a"))
	if err != nil || seq != 1 || !existed {
		t.Errorf("the caller's retry of a: (%d, existed %v, %v), want (1, true)", seq, existed, err)
	}
	checkMessages(t, s, "run", "a", "b")

	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.LostResponse})
	v, err := s.PutResource(ctx, store.Resource{Kind: "worker", Handle: "w-1"}, store.NoVersion)
	mustOK(t, "create with a lost answer", err)
	if v != 1 {
		t.Errorf("version %d, want 1", v)
	}
	_, err = s.PutResource(ctx, store.Resource{Kind: "worker", Handle: "w-1"}, store.NoVersion)
	wantKind(t, "the caller's retry", err, galleyerr.Conflict)
	list, err := s.ListResources(ctx)
	mustOK(t, "list", err)
	if len(list) != 1 {
		t.Errorf("%d resources listed, want 1", len(list))
	}
	if n := inj.Injected("", awsfault.LostResponse) + inj.Injected("", awsfault.Timeout); n != 3 {
		t.Errorf("faults injected: %d, want 3", n)
	}
}

// A throttled or condition-refused transaction writes nothing; an append
// refused by a (forced) condition retries on a fresh read and succeeds.
func TestTransactionDefiniteFaults(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Throttle})
	_, _, err := s.AppendMessage(ctx, "run", msg("a"))
	wantKind(t, "throttled append", err, galleyerr.Unavailable)
	checkMessages(t, s, "run")

	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.ConditionFailed})
	seq, _, err := s.AppendMessage(ctx, "run", msg("b"))
	mustOK(t, "append refused once", err)
	if seq != 1 {
		t.Errorf("seq %d, want 1", seq)
	}
	checkMessages(t, s, "run", "b")
}

// A try that was still in flight when the store gave up lands later: the
// call answered Unavailable (uncertain), the late write takes its place in
// the sequence, and later appends follow it without a gap or a duplicate.
func TestDelayedAppendLandsInOrder(t *testing.T) {
	inj := awsfault.New()
	inj.SetDelay(100 * time.Millisecond)
	s := faulty(t, inj)
	ctx := t.Context()
	inj.Script(
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Delayed},
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Timeout},
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Timeout},
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Timeout},
	)
	_, _, err := s.AppendMessage(ctx, "run", msg("late"))
	wantKind(t, "append that gave up", err, galleyerr.Unavailable)
	inj.Wait()
	seq, _, err := s.AppendMessage(ctx, "run", msg("next"))
	mustOK(t, "next append", err)
	if seq != 2 {
		t.Errorf("seq %d, want 2 (after the late one)", seq)
	}
	// The caller's retry of the one that gave up finds the late write.
	seq, existed, err := s.AppendMessage(ctx, "run", msg("late"))
	if err != nil || seq != 1 || !existed {
		t.Errorf("retry of late: (%d, existed %v, %v), want (1, true)", seq, existed, err)
	}
	checkMessages(t, s, "run", "late", "next")
}

// Under a seeded mix of every fault, concurrent appenders never duplicate,
// lose or reorder an acknowledged message, and the ledger stays gap-free;
// an append that answered Unavailable appears at most once.
func TestAppendsUnderFaults(t *testing.T) {
	inj := awsfault.New()
	inj.SetDelay(5 * time.Millisecond)
	s := faulty(t, inj)
	ctx := t.Context()
	inj.SetRates(42, map[awsfault.Fault]float64{
		awsfault.Throttle: 0.05, awsfault.Timeout: 0.05, awsfault.LostResponse: 0.1,
		awsfault.Delayed: 0.05, awsfault.ConditionFailed: 0.05,
	})
	const writers, each = 4, 15
	var mu sync.Mutex
	acked := map[string]int64{}
	uncertain := map[string]bool{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%02d", w, i)
				seq, _, err := s.AppendMessage(ctx, "run", msg(id))
				mu.Lock()
				switch {
				case err == nil:
					acked[id] = seq
				case galleyerr.Is(galleyerr.Unavailable, err):
					uncertain[id] = true
				default:
					t.Errorf("append %s: %v", id, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	inj.Wait()
	inj.SetRates(0, nil)
	ms, err := dynamostore.New(client(t), s.Table()).ListMessages(ctx, "run", 0, 0)
	mustOK(t, "list", err)
	seen := map[string]int64{}
	for i, m := range ms {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has sequence %d: a gap", i+1, m.Seq)
		}
		if _, dup := seen[m.Row.ID]; dup {
			t.Errorf("%s stored twice", m.Row.ID)
		}
		seen[m.Row.ID] = m.Seq
		if _, ok := acked[m.Row.ID]; !ok && !uncertain[m.Row.ID] {
			t.Errorf("%s stored but never appended", m.Row.ID)
		}
	}
	for id, seq := range acked {
		if seen[id] != seq {
			t.Errorf("%s acknowledged at %d, stored at %d", id, seq, seen[id])
		}
	}
	t.Logf("%d acknowledged, %d uncertain (%d of them stored); faults: throttle %d, timeout %d, lost %d, delayed %d, condition %d",
		len(acked), len(uncertain), len(ms)-len(acked), inj.Injected("", awsfault.Throttle), inj.Injected("", awsfault.Timeout),
		inj.Injected("", awsfault.LostResponse), inj.Injected("", awsfault.Delayed), inj.Injected("", awsfault.ConditionFailed))
	if inj.Injected("", awsfault.LostResponse) == 0 || inj.Injected("", awsfault.Delayed) == 0 {
		t.Error("the run injected no lost or delayed answer: the test proved nothing")
	}
}

// A caller that retries every uncertain append with the same row id (as
// the service does with a worker's post) stores each row exactly once,
// under a seeded mix of every fault, whatever became of the tries it gave
// up on: each retry answers the sequence its row holds.
func TestRetriedAppendsUnderFaults(t *testing.T) {
	inj := awsfault.New()
	inj.SetDelay(5 * time.Millisecond)
	s := faulty(t, inj)
	ctx := t.Context()
	inj.SetRates(43, map[awsfault.Fault]float64{
		awsfault.Throttle: 0.05, awsfault.Timeout: 0.1, awsfault.LostResponse: 0.15,
		awsfault.Delayed: 0.1, awsfault.ConditionFailed: 0.05,
	})
	const writers, each = 3, 12
	var mu sync.Mutex
	acked := map[string]int64{}
	retried := 0
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%02d", w, i)
				for try := 0; ; try++ {
					seq, _, err := s.AppendMessage(ctx, "run", msg(id))
					if err == nil {
						mu.Lock()
						acked[id], retried = seq, retried+min(try, 1)
						mu.Unlock()
						break
					}
					if !galleyerr.Is(galleyerr.Unavailable, err) || try == 50 {
						t.Errorf("append %s: %v", id, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	inj.Wait()
	inj.SetRates(0, nil)
	ms, err := dynamostore.New(client(t), s.Table()).ListMessages(ctx, "run", 0, 0)
	mustOK(t, "list", err)
	if len(ms) != writers*each {
		t.Errorf("%d messages stored, want %d", len(ms), writers*each)
	}
	for i, m := range ms {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has sequence %d: a gap", i+1, m.Seq)
		}
		if acked[m.Row.ID] != m.Seq {
			t.Errorf("%s stored at %d, its append answered %d", m.Row.ID, m.Seq, acked[m.Row.ID])
		}
	}
	t.Logf("%d appends retried; faults: lost %d, delayed %d, timeout %d", retried,
		inj.Injected("", awsfault.LostResponse), inj.Injected("", awsfault.Delayed), inj.Injected("", awsfault.Timeout))
	if retried == 0 {
		t.Error("no append needed a retry: the test proved nothing")
	}
}

// Read-modify-write increments under faults: the final count is at least
// the acknowledged increments and at most those plus the uncertain ones.
func TestCASUnderFaults(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	inj.SetRates(7, map[awsfault.Fault]float64{
		awsfault.Throttle: 0.05, awsfault.Timeout: 0.05, awsfault.LostResponse: 0.15, awsfault.ConditionFailed: 0.05,
	}, "UpdateItem")
	var mu sync.Mutex
	acked, unsure := 0, 0
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for range 15 {
				for {
					e, v, err := s.GetEffect(ctx, "counter")
					if galleyerr.Is(galleyerr.NotFound, err) {
						e = effect("counter", "0")
					} else if err != nil {
						t.Error(err)
						return
					}
					var n int
					fmt.Sscan(e.Fingerprint, &n)
					e.Fingerprint = fmt.Sprint(n + 1)
					_, err = s.PutEffect(ctx, e, v)
					if galleyerr.Is(galleyerr.Conflict, err) {
						continue
					}
					mu.Lock()
					if err == nil {
						acked++
					} else if galleyerr.Is(galleyerr.Unavailable, err) {
						unsure++
					} else {
						t.Error(err)
					}
					mu.Unlock()
					break
				}
			}
		})
	}
	wg.Wait()
	e, _, err := s.GetEffect(ctx, "counter")
	mustOK(t, "get", err)
	var n int
	fmt.Sscan(e.Fingerprint, &n)
	if n < acked || n > acked+unsure {
		t.Errorf("count %d after %d acknowledged and %d uncertain increments", n, acked, unsure)
	}
	if inj.Injected("UpdateItem", awsfault.LostResponse) == 0 {
		t.Error("no lost response injected")
	}
}

func msg(id string) store.Message {
	return store.Message{Row: protocol.MailMessage{ID: id, Kind: protocol.MsgStatus, Body: "body " + id}, At: time.Unix(2, 0).UTC()}
}

func checkMessages(t *testing.T, s *dynamostore.Store, run string, ids ...string) {
	t.Helper()
	ms, err := s.ListMessages(context.WithoutCancel(t.Context()), run, 0, 0)
	mustOK(t, "list", err)
	var got []string
	for i, m := range ms {
		if m.Seq != int64(i+1) {
			t.Errorf("message %d has sequence %d", i+1, m.Seq)
		}
		got = append(got, m.Row.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("messages %v, want %v", got, ids)
	}
}

// An injected condition failure on a nonce's write is what DynamoDB would
// answer had another writer just used the nonce: the live item under
// ALL_OLD. With no live item DynamoDB cannot fail that condition, so the
// injector lets the write through, and a fresh DPoP proof is accepted in
// one write. (An injector that refused it naming no item had UseNonce read
// a replay: the fault load's workers were refused 401 "used before".) A
// second use under the same fault is refused with the first use's item,
// which is not this call's.
func TestNonceUnderInjectedConditionFailure(t *testing.T) {
	inj := awsfault.New()
	s := faulty(t, inj)
	ctx := t.Context()
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ConditionFailed})
	ok, err := s.UseNonce(ctx, "jti-1", time.Now().Add(time.Hour))
	mustOK(t, "first use", err)
	if !ok {
		t.Error("a first use answered used before")
	}
	if n := inj.Injected("UpdateItem", awsfault.ConditionFailed); n != 0 {
		t.Errorf("injected %d condition failures on a write no item could fail, want 0", n)
	}
	if n := inj.Calls("UpdateItem"); n != 1 {
		t.Errorf("%d writes reached DynamoDB, want the one", n)
	}
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ConditionFailed})
	again, err := s.UseNonce(ctx, "jti-1", time.Now().Add(time.Hour))
	mustOK(t, "second use", err)
	if again {
		t.Error("a second use of a live nonce answered true")
	}
	if n := inj.Injected("UpdateItem", awsfault.ConditionFailed); n != 1 {
		t.Errorf("injected %d condition failures on the live nonce, want 1", n)
	}
}
