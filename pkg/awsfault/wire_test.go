package awsfault_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/standins"
)

func randName(stem string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return stem + "-" + hex.EncodeToString(b[:])
}

// dynamo is a DynamoDB Local client whose requests go through rt, and a
// fresh table with a string key "pk".
func dynamo(t *testing.T, rt http.RoundTripper) (*dynamodb.Client, string) {
	t.Helper()
	standins.Require(t, standins.DynamoDB)
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.DisableValidateResponseChecksum = true
		o.HTTPClient = &http.Client{Transport: rt}
	})
	table := randName("awsfault")
	plain := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	_, err = plain.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		plain.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	return c, table
}

// A 500 after the first UpdateItem was applied: the SDK's retryer sends it
// again, and the resend fails the condition the first attempt met.
func TestWireServerErrorResends(t *testing.T) {
	for _, f := range []awsfault.Fault{awsfault.ServerError, awsfault.Reset} {
		t.Run(f.String(), func(t *testing.T) {
			inj := awsfault.New()
			c, table := dynamo(t, &awsfault.Transport{Faults: inj})
			inj.Script(awsfault.Step{Op: "UpdateItem", Fault: f})
			_, err := c.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
				TableName:                           aws.String(table),
				Key:                                 map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
				UpdateExpression:                    aws.String("SET v = :one"),
				ConditionExpression:                 aws.String("attribute_not_exists(v)"),
				ExpressionAttributeValues:           map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			})
			var ccf *types.ConditionalCheckFailedException
			if !errors.As(err, &ccf) {
				t.Fatalf("err = %v, want the resend's ConditionalCheckFailedException", err)
			}
			if ccf.Item == nil {
				t.Errorf("the failed condition returned no item")
			}
			if n := inj.Calls("UpdateItem"); n != 2 {
				t.Errorf("UpdateItem reached DynamoDB %d times, want 2 (the SDK's resend)", n)
			}
		})
	}
}

func TestWireThrottleAndConflict(t *testing.T) {
	inj := awsfault.New()
	c, table := dynamo(t, &awsfault.Transport{Faults: inj})
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}
	// One throttle: the SDK retries it, and the write succeeds.
	inj.Script(awsfault.Step{Op: "PutItem", Fault: awsfault.Throttle})
	if _, err := c.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: key}); err != nil {
		t.Fatalf("a throttled put the SDK retried: %v", err)
	}
	if inj.Calls("PutItem") != 1 || inj.Injected("PutItem", awsfault.Throttle) != 1 {
		t.Errorf("calls %d, throttles %d", inj.Calls("PutItem"), inj.Injected("PutItem", awsfault.Throttle))
	}
	// Throttled on every attempt: the SDK gives up with DynamoDB's error.
	inj.Script(awsfault.Step{Op: "GetItem", Fault: awsfault.Throttle}, awsfault.Step{Op: "GetItem", Fault: awsfault.Throttle}, awsfault.Step{Op: "GetItem", Fault: awsfault.Throttle})
	_, err := c.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table), Key: key}, func(o *dynamodb.Options) { o.RetryMaxAttempts = 3 })
	var pte *types.ProvisionedThroughputExceededException
	var te *types.ThrottlingException
	if !errors.As(err, &pte) && !errors.As(err, &te) {
		t.Errorf("err = %v, want DynamoDB's throttling", err)
	}
	// A plain write racing a transaction: not retried by the SDK.
	inj.Script(awsfault.Step{Op: "UpdateItem", Fault: awsfault.TxConflict})
	_, err = c.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{TableName: aws.String(table), Key: key, UpdateExpression: aws.String("SET v = :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}}})
	var tce *types.TransactionConflictException
	if !errors.As(err, &tce) {
		t.Errorf("err = %v, want TransactionConflictException", err)
	}
}

// sqsVia is a client of the SQS stand-in whose requests go through rt.
func sqsVia(t *testing.T, rt http.RoundTripper) *sqs.Client {
	t.Helper()
	standins.Require(t, standins.SQS)
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: rt} })
}

type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestHarshSQSDeletedRecently(t *testing.T) {
	clock := &manualClock{t: time.Unix(1e9, 0)}
	h := awsfault.NewHarshSQS(nil, 1)
	h.Now = clock.Now
	c := sqsVia(t, h)
	ctx := t.Context()
	name := randName("harsh")
	create := func() error {
		_, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
		return err
	}
	if err := create(); err != nil {
		t.Fatal(err)
	}
	u, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: u.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	clock.Add(59 * time.Second)
	err = create()
	var dr *sqstypes.QueueDeletedRecently
	if !errors.As(err, &dr) {
		t.Fatalf("CreateQueue 59 s after DeleteQueue: %v, want QueueDeletedRecently", err)
	}
	clock.Add(2 * time.Second)
	if err := create(); err != nil {
		t.Fatalf("CreateQueue 61 s after DeleteQueue: %v", err)
	}
	t.Cleanup(func() {
		u, err := c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err == nil {
			c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: u.QueueUrl})
		}
	})
	if h.Counts().DeletedRecently != 1 {
		t.Errorf("counts %+v", h.Counts())
	}
}

func TestHarshSQSShortPollsAndHandles(t *testing.T) {
	h := awsfault.NewHarshSQS(nil, 1)
	h.MissRate = 1
	c := sqsVia(t, h)
	ctx := t.Context()
	name := randName("harsh")
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{"VisibilityTimeout": "0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("ring")}); err != nil {
		t.Fatal(err)
	}
	short, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl})
	if err != nil || len(short.Messages) != 0 {
		t.Fatalf("a short poll that misses: %d messages, %v", len(short.Messages), err)
	}
	long, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5})
	if err != nil || len(long.Messages) != 1 {
		t.Fatalf("a long poll: %d messages, %v", len(long.Messages), err)
	}
	// The handle of a visibility-0 receive has expired.
	del, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []sqstypes.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: long.Messages[0].ReceiptHandle}}})
	if err != nil || len(del.Failed) != 1 || aws.ToString(del.Failed[0].Code) != "InvalidParameterValue" {
		t.Fatalf("delete with an expired handle: %+v, %v", del, err)
	}
	// With a real visibility timeout the handle deletes.
	again, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, WaitTimeSeconds: 5, VisibilityTimeout: 30})
	if err != nil || len(again.Messages) != 1 {
		t.Fatalf("the ring stayed: %d messages, %v", len(again.Messages), err)
	}
	del, err = c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []sqstypes.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: again.Messages[0].ReceiptHandle}}})
	if err != nil || len(del.Successful) != 1 || len(del.Failed) != 0 {
		t.Fatalf("delete with a live handle: %+v, %v", del, err)
	}
	if n := h.Counts(); n.Misses != 1 || n.ExpiredHandles != 1 {
		t.Errorf("counts %+v", n)
	}
}

// DeleteRate deletes the queue under a sender, who then meets
// QueueDoesNotExist, and the name stays refused for a minute.
func TestHarshSQSDeleteRate(t *testing.T) {
	h := awsfault.NewHarshSQS(nil, 1)
	h.DeleteRate = 1
	c := sqsVia(t, h)
	ctx := t.Context()
	name := randName("harsh")
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	_, err = c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("ring")})
	var dne *sqstypes.QueueDoesNotExist
	if !errors.As(err, &dne) {
		t.Fatalf("a send to a queue deleted under it: %v, want QueueDoesNotExist", err)
	}
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	var dr *sqstypes.QueueDeletedRecently
	if !errors.As(err, &dr) {
		t.Fatalf("CreateQueue after the deletion: %v, want QueueDeletedRecently", err)
	}
	if n := h.Counts(); n.Deleted != 1 || n.DeletedRecently != 1 {
		t.Errorf("counts %+v", n)
	}
}
