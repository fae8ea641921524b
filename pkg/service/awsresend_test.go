package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// TestResendsAfterAppliedWrites runs effects on the DynamoDB store through
// DynamoDB Local where the first attempt of each conditional write is
// applied and then answered 500 (or its connection reset), so the SDK
// sends it again: the claim is this copy's own, not another's in flight,
// and the effects apply once.
func TestResendsAfterAppliedWrites(t *testing.T) {
	standins.Require(t, standins.DynamoDB)
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inj := awsfault.New()
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.DisableValidateResponseChecksum = true
		o.HTTPClient = &http.Client{Transport: &awsfault.Transport{Faults: inj}}
	})
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := "galley-svc-" + hex.EncodeToString(b[:])
	st := dynamostore.New(c, table, dynamostore.WithRetries(3, time.Millisecond))
	if err := st.EnsureTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)}) })
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithStore(st)) })

	for i := range 40 {
		f := awsfault.ServerError
		if i%2 == 1 {
			f = awsfault.Reset
		}
		inj.Script(awsfault.Step{Op: "UpdateItem", Fault: f}, awsfault.Step{Op: "TransactWriteItems", Fault: f})
	}
	w := e.launch(t, "run-1", "k-1", "")
	e.apply(t, call("run-1", "k-msg", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`))
	// The same copies again answer what was stored.
	e.apply(t, call("run-1", "k-msg", `{"type":"message-worker","worker":`+workerRef(w)+`,"body":"hello"}`))
	// A cancel settles the worker through the read-modify-write loop.
	e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(w)+`}`))
	if o := e.observe(t, w); o.State != "settled" {
		t.Errorf("the cancelled worker is %q", o.State)
	}
	if n := inj.Injected("", awsfault.ServerError) + inj.Injected("", awsfault.Reset); n < 4 {
		t.Fatalf("only %d faults fired", n)
	}
	items, err := st.ListInbox(ctx, w, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs := 0
	for _, it := range items {
		if it.Key == "k-msg" {
			msgs++
		}
	}
	if msgs != 1 {
		t.Errorf("the message reached the inbox %d times, want once", msgs)
	}
}

// appliedConflict is a store whose first PutEffect of a fresh record is
// applied and answered Conflict, as a store that took its own resent
// write's failed condition for another writer's would.
type appliedConflict struct {
	store.Store
	fired bool
}

func (s *appliedConflict) PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error) {
	v, err := s.Store.PutEffect(ctx, e, prev)
	if err == nil && !s.fired && prev == store.NoVersion {
		s.fired = true
		return 0, galleyerr.Errorf(galleyerr.Conflict, "the record changed since it was read")
	}
	return v, err
}

// The claim finds its own lease after such a Conflict and goes on: it
// never answers in-flight for a claim it holds itself.
func TestClaimFindsItsOwnWrite(t *testing.T) {
	st := &appliedConflict{Store: memstore.New()}
	e := newEnv(t, func(_ *service.Config, o *[]service.Option) { *o = append(*o, service.WithStore(st)) })
	e.launch(t, "run-1", "k-1", "")
	if !st.fired {
		t.Fatal("the store never answered its Conflict")
	}
}
