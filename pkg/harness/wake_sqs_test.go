package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestWakeBellDeletesItsRings runs the bell on a worker queue of the SQS
// stand-in made as galley makes them (visibility 0), through HarshSQS,
// where the receipt handle of a visibility-0 receive has expired by the
// time it is deleted, as on AWS. The ring wakes the harness once, is
// deleted, and the next wait is quiet.
func TestWakeBellDeletesItsRings(t *testing.T) {
	standins.Require(t, standins.SQS)
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := awsfault.NewHarshSQS(nil, 1)
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: h} })
	var b [5]byte
	_, _ = rand.Read(b[:])
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("galleytest-wake-" + hex.EncodeToString(b[:])),
		Attributes: map[string]string{"VisibilityTimeout": "0", "MessageRetentionPeriod": "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	g := sqsGrant(time.Now().Add(time.Hour))
	g.SQS.QueueURL = *q.QueueUrl
	bell := newWakeBell(&fakeWake{grants: []workerapi.WakeGrant{g}}, slog.New(slog.DiscardHandler), time.Second, "", "")
	bell.dial = func(workerapi.SQSWake) (sqsReceiver, error) { return c, nil }

	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("ring")}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if !bell.wait(wctx, 0) {
		t.Fatal("the ring did not wake the bell")
	}
	qctx, qcancel := context.WithTimeout(ctx, 3*time.Second)
	defer qcancel()
	if bell.wait(qctx, 0) {
		t.Fatal("the deleted ring woke the bell again")
	}
	if n := h.Counts().ExpiredHandles; n != 0 {
		t.Errorf("%d deletes used an expired receipt handle", n)
	}
}
