package iamgate

import (
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// fakeDynamo answers as DynamoDB Local does: ConsumedCapacity only when
// asked for, none with a failed condition. It records what each request
// asked for.
type fakeDynamo struct {
	mu    sync.Mutex
	asked []string
}

func (f *fakeDynamo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req struct {
		ReturnConsumedCapacity string
		ConditionExpression    string
	}
	_ = json.Unmarshal(b, &req)
	f.mu.Lock()
	f.asked = append(f.asked, req.ReturnConsumedCapacity)
	f.mu.Unlock()
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	status, answer := 200, map[string]any{}
	units := map[string]float64{"PutItem": 1, "Query": 0, "TransactWriteItems": 4}[op]
	switch {
	case req.ConditionExpression != "":
		status, answer = 400, map[string]any{"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
			"Message": "The conditional request failed"}
	case op == "TransactWriteItems":
		answer["ConsumedCapacity"] = []map[string]any{{"TableName": "T", "CapacityUnits": units, "WriteCapacityUnits": units}}
	case op == "Query":
		answer["Items"], answer["Count"], answer["ScannedCount"] = []any{}, 0, 0
		fallthrough
	default:
		answer["ConsumedCapacity"] = map[string]any{"TableName": "T", "CapacityUnits": units}
	}
	if req.ReturnConsumedCapacity != "TOTAL" && req.ReturnConsumedCapacity != "INDEXES" {
		delete(answer, "ConsumedCapacity")
	}
	out, _ := json.Marshal(answer)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(out)), 10))
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

type calls struct {
	mu  sync.Mutex
	all []Call
}

func (c *calls) add(x Call) { c.mu.Lock(); c.all = append(c.all, x); c.mu.Unlock() }
func (c *calls) last(t *testing.T) Call {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.all) == 0 {
		t.Fatal("no call reported")
	}
	return c.all[len(c.all)-1]
}

// With WithUsage the gate measures the capacity every DynamoDB request
// consumes, asking the stand-in for it when the caller did not, and gives
// the caller the answer AWS would (no ConsumedCapacity unless asked for,
// a checksum that matches what it receives: the SDK verifies it).
func TestUsageMeasuresDynamoDBCapacity(t *testing.T) {
	var seen calls
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"`+tableT+`"`)}, WithUsage(seen.add))
	fake := &fakeDynamo{}
	e.gate.upstream = fake
	c := e.dynamo(nil)

	out, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item()})
	if err != nil {
		t.Fatal(err)
	}
	if out.ConsumedCapacity != nil {
		t.Errorf("the caller did not ask for ConsumedCapacity and got %+v", out.ConsumedCapacity)
	}
	if got := seen.last(t); got.Operation != "PutItem" || got.Role != roleARN || got.Status != 200 ||
		len(got.Capacity) != 1 || got.Capacity[0] != (Capacity{Table: "T", Write: 1}) {
		t.Errorf("PutItem reported %+v", got)
	}

	out, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item(),
		ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityTotal})
	if err != nil {
		t.Fatal(err)
	}
	if out.ConsumedCapacity == nil || aws.ToFloat64(out.ConsumedCapacity.CapacityUnits) != 1 {
		t.Errorf("the caller asked for ConsumedCapacity and got %+v", out.ConsumedCapacity)
	}

	// A query that finds nothing: AWS's minimum, where the stand-in says 0.
	if _, err := c.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("T"), KeyConditionExpression: aws.String("pk = :k"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":k": &ddbtypes.AttributeValueMemberS{Value: "k"}},
		ConsistentRead:            aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if got := seen.last(t); len(got.Capacity) != 1 || got.Capacity[0] != (Capacity{Table: "T", Read: 1}) {
		t.Errorf("an empty strongly consistent Query reported %+v, want 1 RRU", got)
	}

	// A failed condition is billed though nothing reports it.
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item(),
		ConditionExpression: aws.String("attribute_not_exists(pk)")})
	apiError(t, err, "ConditionalCheckFailedException")
	if got := seen.last(t); got.Status != 400 || len(got.Capacity) != 1 || got.Capacity[0] != (Capacity{Table: "T", Write: 1, Estimated: true}) {
		t.Errorf("a failed condition reported %+v", got)
	}

	// A transaction's list form.
	if _, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
		{Put: &ddbtypes.Put{TableName: aws.String("T"), Item: item()}}}}); err != nil {
		t.Fatal(err)
	}
	if got := seen.last(t); len(got.Capacity) != 1 || got.Capacity[0] != (Capacity{Table: "T", Write: 4}) {
		t.Errorf("TransactWriteItems reported %+v", got)
	}

	// A value DynamoDB refuses reaches it as the caller wrote it.
	if code, _ := e.signedDynamo("GetItem", `{"TableName":"T","Key":{"pk":{"S":"k"}},"ReturnConsumedCapacity":"SOME"}`); code != 200 {
		t.Fatalf("GetItem: %d", code)
	}

	// A denied request reaches nothing and is not reported.
	n := len(seen.all)
	_, err = c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("Other"), Key: item()})
	apiError(t, err, "AccessDeniedException")
	if len(seen.all) != n {
		t.Errorf("a denied request was reported: %+v", seen.all[n:])
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	want := []string{"TOTAL", "TOTAL", "TOTAL", "TOTAL", "TOTAL", "SOME"}
	if strings.Join(fake.asked, ",") != strings.Join(want, ",") {
		t.Errorf("the stand-in was asked for %v, want %v", fake.asked, want)
	}
}

// An SQS receive that returns no message is reported as an empty receive.
func TestUsageCountsEmptyReceives(t *testing.T) {
	var seen calls
	e := newEnv(t, SQS, true, []string{allow(`"sqs:*"`, `"`+queueQ+`"`)}, WithUsage(seen.add))
	var full bool
	e.gate.upstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		if full {
			_, _ = io.WriteString(w, `{"Messages":[{"MessageId":"m1","ReceiptHandle":"h","Body":"x","MD5OfBody":"9dd4e461268c8034f5c8564e155c67a6"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{}`)
	})
	c := sqs.NewFromConfig(e.cfg(nil))
	for _, f := range []bool{false, true} {
		full = f
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueU)})
		if err != nil {
			t.Fatal(err)
		}
		if got := seen.last(t); got.Operation != "ReceiveMessage" || got.EmptyReceive != !f || len(out.Messages) != map[bool]int{false: 0, true: 1}[f] {
			t.Errorf("receive with messages=%v reported %+v (%d messages)", f, got, len(out.Messages))
		}
	}
}
