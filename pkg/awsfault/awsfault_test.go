package awsfault_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/awsfault"
)

// fakeDB counts the calls that reached it. Methods it does not define
// panic through the nil embedded interface, which no test reaches.
type fakeDB struct {
	awsfault.DynamoDBAPI
	mu      sync.Mutex
	updates int
	txs     int
	live    map[string]types.AttributeValue // the item every GetItem answers
}

func (f *fakeDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &dynamodb.GetItemOutput{Item: f.live}, nil
}

func (f *fakeDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	return &dynamodb.UpdateItemOutput{}, nil
}

func (f *fakeDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txs++
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

func (f *fakeDB) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.updates + f.txs
}

var condUpdate = &dynamodb.UpdateItemInput{ConditionExpression: aws.String("#v = :v")}

func code(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

func TestFaults(t *testing.T) {
	for _, tc := range []struct {
		fault     awsfault.Fault
		in        *dynamodb.UpdateItemInput
		wantCalls int
		check     func(t *testing.T, err error)
	}{
		{awsfault.None, condUpdate, 1, func(t *testing.T, err error) {
			if err != nil {
				t.Fatal(err)
			}
		}},
		{awsfault.Throttle, condUpdate, 0, func(t *testing.T, err error) {
			if code(err) != "ThrottlingException" {
				t.Fatalf("err = %v, want ThrottlingException", err)
			}
		}},
		{awsfault.Timeout, condUpdate, 0, wantTimeout},
		{awsfault.LostResponse, condUpdate, 1, wantTimeout},
		{awsfault.ConditionFailed, condUpdate, 0, func(t *testing.T, err error) {
			var ccf *types.ConditionalCheckFailedException
			if !errors.As(err, &ccf) {
				t.Fatalf("err = %v, want ConditionalCheckFailedException", err)
			}
		}},
		// A write without a condition cannot fail one: it passes.
		{awsfault.ConditionFailed, &dynamodb.UpdateItemInput{}, 1, func(t *testing.T, err error) {
			if err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			db := &fakeDB{}
			inj := awsfault.New()
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: tc.fault})
			c := &awsfault.DynamoDB{Client: db, Faults: inj}
			_, err := c.UpdateItem(t.Context(), tc.in)
			tc.check(t, err)
			if db.count() != tc.wantCalls || inj.Calls("UpdateItem") != tc.wantCalls {
				t.Errorf("real calls = %d (counted %d), want %d", db.count(), inj.Calls("UpdateItem"), tc.wantCalls)
			}
			var op *smithy.OperationError
			if err != nil && !errors.As(err, &op) {
				t.Errorf("err %v is not an operation error, as the SDK's are", err)
			}
		})
	}
}

func wantTimeout(t *testing.T, err error) {
	t.Helper()
	var te interface{ Timeout() bool }
	if !errors.As(err, &te) || !te.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if code(err) != "" {
		t.Fatalf("a timeout carries API error code %q", code(err))
	}
}

func TestTransactionConditionFailed(t *testing.T) {
	db := &fakeDB{}
	inj := awsfault.New()
	inj.Script(awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.ConditionFailed})
	c := &awsfault.DynamoDB{Client: db, Faults: inj}
	_, err := c.TransactWriteItems(t.Context(), &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{ConditionExpression: aws.String("x")}},
		{Put: &types.Put{}},
	}})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		t.Fatalf("err = %v, want TransactionCanceledException", err)
	}
	var got []string
	for _, r := range tce.CancellationReasons {
		got = append(got, aws.ToString(r.Code))
	}
	if fmt.Sprint(got) != "[ConditionalCheckFailed None]" {
		t.Errorf("reasons = %v", got)
	}
	if db.count() != 0 {
		t.Errorf("the refused transaction reached the client")
	}
}

// A write that asks for the item when its condition fails (ALL_OLD) gets
// the live item with an injected failure, as DynamoDB's failure carries
// it; with no live item there is no faithful failure to inject, and the
// write reaches the client.
func TestConditionFailedCarriesTheLiveItem(t *testing.T) {
	withOld := &dynamodb.UpdateItemInput{ConditionExpression: aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}
	live := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "w": &types.AttributeValueMemberS{Value: "other"}}

	db := &fakeDB{live: live}
	inj := awsfault.New()
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ConditionFailed})
	c := &awsfault.DynamoDB{Client: db, Faults: inj}
	_, err := c.UpdateItem(t.Context(), withOld)
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("err = %v, want ConditionalCheckFailedException", err)
	}
	if w, _ := ccf.Item["w"].(*types.AttributeValueMemberS); w == nil || w.Value != "other" {
		t.Errorf("the failure carries item %v, want the live one", ccf.Item)
	}
	if db.count() != 0 || inj.Injected("UpdateItem", awsfault.ConditionFailed) != 1 {
		t.Errorf("real writes %d, injected %d; want 0 and 1", db.count(), inj.Injected("UpdateItem", awsfault.ConditionFailed))
	}

	db = &fakeDB{}
	inj = awsfault.New()
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.ConditionFailed})
	c = &awsfault.DynamoDB{Client: db, Faults: inj}
	if _, err := c.UpdateItem(t.Context(), withOld); err != nil {
		t.Fatalf("with no live item: err = %v, want the write made", err)
	}
	if db.count() != 1 || inj.Injected("UpdateItem", awsfault.ConditionFailed) != 0 {
		t.Errorf("with no live item: real writes %d, injected %d; want 1 and 0", db.count(), inj.Injected("UpdateItem", awsfault.ConditionFailed))
	}
}

// A step waits for a call of its operation; other calls pass untouched.
func TestScriptOrder(t *testing.T) {
	db := &fakeDB{}
	inj := awsfault.New()
	inj.Script(
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.None},
		awsfault.Step{Op: "TransactWriteItems", Fault: awsfault.Throttle},
		awsfault.Step{Fault: awsfault.Timeout},
	)
	c := &awsfault.DynamoDB{Client: db, Faults: inj}
	ctx := t.Context()
	tx := &dynamodb.TransactWriteItemsInput{}
	var errs []string
	record := func(err error) {
		switch {
		case err == nil:
			errs = append(errs, "ok")
		case code(err) != "":
			errs = append(errs, code(err))
		default:
			errs = append(errs, "timeout")
		}
	}
	_, err := c.UpdateItem(ctx, condUpdate) // no step for it yet
	record(err)
	_, err = c.TransactWriteItems(ctx, tx) // None: passes
	record(err)
	_, err = c.UpdateItem(ctx, condUpdate) // still waiting for a transaction
	record(err)
	_, err = c.TransactWriteItems(ctx, tx) // Throttle
	record(err)
	_, err = c.UpdateItem(ctx, condUpdate) // "" matches any: Timeout
	record(err)
	_, err = c.UpdateItem(ctx, condUpdate) // script done
	record(err)
	if want := "[ok ok ok ThrottlingException timeout ok]"; fmt.Sprint(errs) != want {
		t.Errorf("outcomes %v, want %s", errs, want)
	}
	if inj.Pending() != 0 {
		t.Errorf("%d steps left", inj.Pending())
	}
	if inj.Injected("TransactWriteItems", awsfault.Throttle) != 1 || inj.Injected("", awsfault.Timeout) != 1 {
		t.Errorf("counters: throttle %d, timeout %d", inj.Injected("TransactWriteItems", awsfault.Throttle), inj.Injected("", awsfault.Timeout))
	}
}

// The same seed and the same calls give the same faults.
func TestRatesDeterministic(t *testing.T) {
	run := func(seed uint64) string {
		inj := awsfault.New()
		inj.SetRates(seed, map[awsfault.Fault]float64{awsfault.Throttle: 0.2, awsfault.Timeout: 0.2, awsfault.ConditionFailed: 0.2}, "UpdateItem")
		c := &awsfault.DynamoDB{Client: &fakeDB{}, Faults: inj}
		var out []byte
		for range 64 {
			_, err := c.UpdateItem(t.Context(), condUpdate)
			switch {
			case err == nil:
				out = append(out, '.')
			case code(err) == "ThrottlingException":
				out = append(out, 'T')
			case code(err) == "ConditionalCheckFailedException":
				out = append(out, 'C')
			default:
				out = append(out, 't')
			}
		}
		return string(out)
	}
	a, b, c := run(7), run(7), run(8)
	if a != b {
		t.Errorf("seed 7 gave %s then %s", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 gave the same faults %s", a)
	}
	for _, f := range "TCt." {
		if !strings.ContainsRune(a, f) {
			t.Errorf("64 calls at these rates never gave %q: %s", f, a)
		}
	}
}

// A Delayed call answers a timeout at once and reaches the client later.
func TestDelayed(t *testing.T) {
	db := &fakeDB{}
	inj := awsfault.New()
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.Delayed})
	c := &awsfault.DynamoDB{Client: db, Faults: inj}
	ctx, cancel := context.WithCancel(t.Context())
	_, err := c.UpdateItem(ctx, condUpdate)
	wantTimeout(t, err)
	cancel() // the caller gives up; the request still lands
	inj.Wait()
	if db.count() != 1 {
		t.Errorf("the delayed call reached the client %d times, want 1", db.count())
	}
}

type fakeSQS struct {
	awsfault.SQSAPI
	sends int
}

func (f *fakeSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	f.sends++
	return &sqs.SendMessageOutput{}, nil
}

func TestSQS(t *testing.T) {
	q := &fakeSQS{}
	inj := awsfault.New()
	inj.Script(
		awsfault.Step{Op: "SendMessage", Fault: awsfault.Throttle},
		awsfault.Step{Op: "SendMessage", Fault: awsfault.ConditionFailed}, // not for SQS: passes
		awsfault.Step{Op: "SendMessage", Fault: awsfault.LostResponse},
	)
	c := &awsfault.SQS{Client: q, Faults: inj}
	_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{})
	if code(err) != "RequestThrottled" {
		t.Errorf("throttle: %v", err)
	}
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{}); err != nil {
		t.Errorf("condition-failed on SQS: %v, want it to pass", err)
	}
	_, err = c.SendMessage(t.Context(), &sqs.SendMessageInput{})
	wantTimeout(t, err)
	if q.sends != 2 {
		t.Errorf("sends reaching SQS = %d, want 2", q.sends)
	}
}

// A kind drawn for calls it does not apply to is owed to the next call it
// applies to until it has fired once, so a short run with few
// conditional writes still injects condition-failed; after it fired, it
// is owed no more.
func TestOwedUntilFirstFired(t *testing.T) {
	inj := awsfault.New()
	inj.SetRates(3, map[awsfault.Fault]float64{awsfault.ConditionFailed: 0.5}, "UpdateItem")
	c := &awsfault.DynamoDB{Client: &fakeDB{}, Faults: inj}
	plain := &dynamodb.UpdateItemInput{} // no condition: condition-failed does not apply
	for range 20 {
		if _, err := c.UpdateItem(t.Context(), plain); err != nil {
			t.Fatalf("an unconditional write failed: %v", err)
		}
	}
	if n := inj.Injected("", awsfault.ConditionFailed); n != 0 {
		t.Fatalf("%d condition-failed injected into unconditional writes", n)
	}
	if _, err := c.UpdateItem(t.Context(), condUpdate); code(err) != "ConditionalCheckFailedException" {
		t.Fatalf("the first conditional write after owed draws: err = %v, want ConditionalCheckFailedException", err)
	}
	// Fired once: twenty more owed-looking draws leave nothing owed, so
	// the conditional writes after them fail at the rate alone, and over
	// a long run at about half.
	failed := 0
	for range 200 {
		for range 20 {
			c.UpdateItem(t.Context(), plain)
		}
		if _, err := c.UpdateItem(t.Context(), condUpdate); err != nil {
			failed++
		}
	}
	if failed < 60 || failed > 140 {
		t.Errorf("%d of 200 conditional writes failed after the first: want about 100 (the rate), not all (still owed)", failed)
	}
}
