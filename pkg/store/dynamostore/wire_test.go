package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// wired returns a store whose client sends every request through a
// Transport injecting inj's faults below the SDK (so the SDK's own
// retryer resends), on a fresh table made without faults.
func wired(t *testing.T, inj *awsfault.Injector) *dynamostore.Store {
	t.Helper()
	return wiredVia(t, &awsfault.Transport{Faults: inj})
}

func wiredVia(t *testing.T, tr *awsfault.Transport) *dynamostore.Store {
	t.Helper()
	standins.Require(t, standins.DynamoDB)
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.DisableValidateResponseChecksum = true
		o.HTTPClient = &http.Client{Transport: tr}
	})
	s := newTable(t, client(t))
	return dynamostore.New(c, s.Table(), dynamostore.WithRetries(3, time.Millisecond))
}

// The SDK resends a write whose first attempt DynamoDB applied and then
// answered 500 (or whose connection reset): the resend fails its condition,
// and the store must see its own write in the item the failure returns.
func TestResendAfterAppliedWrite(t *testing.T) {
	for _, f := range []awsfault.Fault{awsfault.ServerError, awsfault.Reset} {
		t.Run(f.String(), func(t *testing.T) {
			inj := awsfault.New()
			s := wired(t, inj)
			ctx := t.Context()
			for _, prev := range []store.Version{store.NoVersion, 1} {
				inj.Script(awsfault.Step{Op: "UpdateItem", Fault: f})
				v, err := s.PutEffect(ctx, effect("k", fmt.Sprint("v", prev+1)), prev)
				mustOK(t, fmt.Sprintf("put over version %d, applied then %s", prev, f), err)
				if v != prev+1 {
					t.Errorf("version %d, want %d", v, prev+1)
				}
				got, gv, err := s.GetEffect(ctx, "k")
				mustOK(t, "get", err)
				if gv != prev+1 || got.Fingerprint != fmt.Sprint("v", prev+1) {
					t.Errorf("stored %q at %d", got.Fingerprint, gv)
				}
			}
			if inj.Injected("UpdateItem", f) != 2 || inj.Calls("UpdateItem") != 4 {
				t.Fatalf("injected %d, calls %d: the SDK did not resend", inj.Injected("UpdateItem", f), inj.Calls("UpdateItem"))
			}
			// Another writer's record is still a conflict.
			_, err := s.PutEffect(ctx, effect("k", "stale"), 1)
			wantKind(t, "a stale put", err, galleyerr.Conflict)

			// Transactions: one message, one inbox item, one resource each,
			// and the sequences carry on.
			for i, id := range []string{"a", "b"} {
				inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: f})
				seq, existed, err := s.AppendMessage(ctx, "run", msg(id))
				mustOK(t, "append "+id, err)
				if seq != int64(i+1) || existed {
					t.Errorf("append %s: seq %d existed %v", id, seq, existed)
				}
			}
			checkMessages(t, s, "run", "a", "b")
			for i := range 2 {
				inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: f})
				seq, err := s.AppendInbox(ctx, "w", store.InboxItem{Key: fmt.Sprint("k", i)})
				mustOK(t, "inbox append", err)
				if seq != int64(i+1) {
					t.Errorf("inbox seq %d, want %d", seq, i+1)
				}
			}
			items, err := s.ListInbox(ctx, "w", 0, 0)
			mustOK(t, "list inbox", err)
			if len(items) != 2 {
				t.Errorf("%d inbox items, want 2", len(items))
			}
			inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: f})
			_, err = s.PutResource(ctx, store.Resource{Kind: protocol.KindWorker, Handle: "w-1"}, store.NoVersion)
			mustOK(t, "create a resource, applied then "+f.String(), err)
			if inj.Injected("TransactWriteItems", f) != 5 {
				t.Errorf("transaction faults injected: %d", inj.Injected("TransactWriteItems", f))
			}
		})
	}
}

// A plain write refused because a transaction holds its item is resent,
// not answered 503.
func TestTransactionConflictRetried(t *testing.T) {
	inj := awsfault.New()
	s := wired(t, inj)
	ctx := t.Context()
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.TxConflict}, awsfault.Step{Op: "UpdateItem", Fault: awsfault.TxConflict})
	v, err := s.PutEffect(ctx, effect("k", "mine"), store.NoVersion)
	mustOK(t, "put refused twice by a transaction conflict", err)
	if v != 1 {
		t.Errorf("version %d", v)
	}
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.TxConflict})
	n, err := s.NextCount(ctx, "c")
	mustOK(t, "count refused by a transaction conflict", err)
	if n != 1 {
		t.Errorf("count %d, want 1", n)
	}
	if inj.Injected("UpdateItem", awsfault.TxConflict) != 3 {
		t.Errorf("conflicts injected: %d", inj.Injected("UpdateItem", awsfault.TxConflict))
	}
}

// The SDK resent a write whose first attempt was applied, and another
// writer's write landed in between: the resend's failed condition shows
// the other writer's record beyond ours. Ours did happen, so the answer is
// Unavailable (no telling), never Conflict (which says it never will).
func TestResendAfterOverwrite(t *testing.T) {
	inj := awsfault.New()
	tr := &awsfault.Transport{Faults: inj}
	s := wiredVia(t, tr)
	ctx := t.Context()
	other := dynamostore.New(client(t), s.Table())
	tr.Between = func(op string) {
		if _, err := other.PutEffect(context.WithoutCancel(ctx), effect("k", "other"), 1); err != nil {
			t.Errorf("the other writer: %v", err)
		}
	}
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ServerError})
	_, err := s.PutEffect(ctx, effect("k", "mine"), store.NoVersion)
	wantKind(t, "a resent put overwritten in between", err, galleyerr.Unavailable)
	got, v, err := s.GetEffect(ctx, "k")
	mustOK(t, "get", err)
	if v != 2 || got.Fingerprint != "other" {
		t.Errorf("stored %q at %d, want the other writer's at 2", got.Fingerprint, v)
	}
}

// A nonce whose UpdateItem DynamoDB applied and then answered 500 (or
// whose connection reset) is resent by the SDK: the resend fails its
// condition on the item the first try made, which must read as this use,
// not a replay (a worker's fresh DPoP proof was refused 401 "used before"
// under the takeover load's resends). A second use is still refused.
func TestNonceResentAfterAppliedWrite(t *testing.T) {
	for _, f := range []awsfault.Fault{awsfault.ServerError, awsfault.Reset} {
		t.Run(f.String(), func(t *testing.T) {
			inj := awsfault.New()
			s := wired(t, inj)
			ctx := t.Context()
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: f})
			ok, err := s.UseNonce(ctx, "jti-1", time.Now().Add(time.Hour))
			mustOK(t, "use, applied then "+f.String(), err)
			if !ok {
				t.Error("a first use resent by the SDK answered used before")
			}
			if inj.Injected("UpdateItem", f) != 1 || inj.Calls("UpdateItem") != 2 {
				t.Fatalf("injected %d, calls %d: the SDK did not resend", inj.Injected("UpdateItem", f), inj.Calls("UpdateItem"))
			}
			again, err := s.UseNonce(ctx, "jti-1", time.Now().Add(time.Hour))
			mustOK(t, "second use", err)
			if again {
				t.Error("a second use of a live nonce answered true")
			}
		})
	}
}
