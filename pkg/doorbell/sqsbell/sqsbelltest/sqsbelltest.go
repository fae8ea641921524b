// Package sqsbelltest gives tests a client of the SQS stand-in (fauxqs, or
// whatever AWS_ENDPOINT_URL_SQS names) and throwaway queue prefixes.
package sqsbelltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/standins"
)

// Client returns a client of the SQS stand-in. It skips the test when
// AWS_ENDPOINT_URL_SQS is unset and fails it instead when
// GALLEY_REQUIRE_STANDINS=1, so that CI never passes by running nothing.
func Client(t testing.TB) *sqs.Client {
	t.Helper()
	standins.Require(t, standins.SQS)
	c, err := sqsbell.NewClientFromEnv(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Prefix returns a fresh queue prefix starting with stem and deletes the
// queues under it after the test.
func Prefix(t testing.TB, c *sqs.Client, stem string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	p := stem + "-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx := context.Background()
		out, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(p)})
		if err != nil {
			return
		}
		for _, u := range out.QueueUrls {
			_, _ = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
		}
	})
	return p
}

// NewBell is a doorbell on c under a fresh prefix starting with stem,
// which it returns, telling time by now (tests age queues with a manual
// clock).
func NewBell(t testing.TB, c *sqs.Client, stem string, now func() time.Time) (*sqsbell.Bell, string) {
	t.Helper()
	prefix := Prefix(t, c, stem)
	b, err := sqsbell.New(c, prefix, sqsbell.WithClock(now))
	if err != nil {
		t.Fatal(err)
	}
	return b, prefix
}

// Touch listens on topic once, which creates its queue and marks it used
// now.
func Touch(t testing.TB, b *sqsbell.Bell, topic string) {
	t.Helper()
	l, err := b.Listen(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
