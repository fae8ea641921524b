package dynamostore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// Every event item carries the TTL attribute DynamoDB expires it by, its
// append time plus the retention, and an expired event is gone from reads
// at once.
func TestEventTTL(t *testing.T) {
	c := client(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := newTable(t, c, dynamostore.WithEventRetention(2*time.Hour), dynamostore.WithClock(clock))
	ctx := t.Context()
	seq, err := s.AppendEvent(ctx, "w-1", store.Event{Kind: "status", Text: "hello", At: now})
	mustOK(t, "append", err)
	out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.Table()), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "V#w-1"},
			"sk": &types.AttributeValueMemberS{Value: fmt.Sprintf("e#%020d", seq)},
		}})
	mustOK(t, "get the event item", err)
	exp, ok := out.Item["expires"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("the event item has no TTL attribute: %v", out.Item)
	}
	if want := strconv.FormatInt(now.Add(2*time.Hour).Unix(), 10); exp.Value != want {
		t.Errorf("expires = %s, want %s (append time + retention)", exp.Value, want)
	}
	mu.Lock()
	now = now.Add(3 * time.Hour)
	mu.Unlock()
	es, err := s.ListEvents(ctx, "w-1", 0, 0)
	mustOK(t, "list", err)
	if len(es) != 0 {
		t.Errorf("an expired event is listed: %+v", es)
	}
	// Its number is not given again.
	seq2, err := s.AppendEvent(ctx, "w-1", store.Event{Kind: "status", Text: "again", At: now})
	mustOK(t, "append after expiry", err)
	if seq2 != seq+1 {
		t.Errorf("the append after an expired event got %d, want %d", seq2, seq+1)
	}
}

// Two stores on one table (two Lambda instances) append to one worker's
// log at once: every number is taken once, and the log has no gap.
func TestEventsTwoWriters(t *testing.T) {
	c := client(t)
	a := newTable(t, c)
	b := dynamostore.New(c, a.Table())
	ctx := t.Context()
	const each = 20
	var wg sync.WaitGroup
	seqs := make([][]int64, 2)
	for i, s := range []*dynamostore.Store{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				seq, err := s.AppendEvent(context.WithoutCancel(ctx), "w-1", store.Event{Kind: "status", Text: fmt.Sprint(i, "-", j)})
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
					return
				}
				seqs[i] = append(seqs[i], seq)
			}
		}()
	}
	wg.Wait()
	es, err := b.ListEvents(ctx, "w-1", 0, 0)
	mustOK(t, "list", err)
	if len(es) != 2*each {
		t.Fatalf("listed %d events, want %d", len(es), 2*each)
	}
	for k, e := range es {
		if e.Seq != int64(k+1) {
			t.Fatalf("event %d has sequence %d", k, e.Seq)
		}
	}
	seen := map[int64]bool{}
	for _, ss := range seqs {
		for _, s := range ss {
			if seen[s] {
				t.Errorf("sequence %d answered twice", s)
			}
			seen[s] = true
		}
	}
}
