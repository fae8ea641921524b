package sqsbell_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/standins"
)

// harsh is a client of the SQS stand-in through HarshSQS (telling time by
// clk) and, below it, a Transport injecting inj's faults.
func harsh(t *testing.T, clk *clock, inj *awsfault.Injector) (*sqs.Client, *awsfault.HarshSQS) {
	t.Helper()
	standins.Require(t, standins.SQS)
	h := awsfault.NewHarshSQS(nil, 1)
	h.Now = clk.Now
	cfg, err := config.LoadDefaultConfig(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var rt http.RoundTripper = h
	if inj != nil {
		rt = &awsfault.Transport{Base: h, Faults: inj}
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: rt} }), h
}

// fakeSTS answers every AssumeRole with credentials lasting an hour of clk.
type fakeSTS struct{ clk *clock }

func (f fakeSTS) AssumeRole(context.Context, *sts.AssumeRoleInput, ...func(*sts.Options)) (*sts.AssumeRoleOutput, error) {
	return &sts.AssumeRoleOutput{Credentials: &ststypes.Credentials{AccessKeyId: aws.String("AKIDWAKE"),
		SecretAccessKey: aws.String("wake-secret"), SessionToken: aws.String("wake-token"), Expiration: aws.Time(f.clk.Now().Add(time.Hour))}}, nil
}

func granter(t *testing.T, b *sqsbell.Bell, clk *clock) *sqsbell.Granter {
	t.Helper()
	g, err := sqsbell.NewGranter(b, fakeSTS{clk}, "arn:aws:iam::123456789012:role/wake", "us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// receiveRing long-polls url as the harness does and deletes what it got.
func receiveRing(t *testing.T, c *sqs.Client, url string) int {
	t.Helper()
	ctx := t.Context()
	out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5, VisibilityTimeout: 30, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatalf("receiving from the worker's queue: %v", err)
	}
	var entries []types.DeleteMessageBatchRequestEntry
	for i, m := range out.Messages {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(string(rune('a' + i))), ReceiptHandle: m.ReceiptHandle})
	}
	if len(entries) > 0 {
		if d, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil || len(d.Failed) > 0 {
			t.Fatalf("deleting rings: %v %+v", err, d)
		}
	}
	return len(out.Messages)
}

// TestWorkerLife25Hours: a worker lives 25 hours (compressed by a manual
// clock). Its harness asks the same warm process for its wake grant every
// 50 minutes, as it renews it; the reconciler (another process) sweeps
// queues idle for 24 hours every hour; a third process rings the worker's
// inbox after each grant. The queue survives every sweep, every ring
// arrives, and SQS's 60 s refusal of a deleted name never shows.
func TestWorkerLife25Hours(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, h := harsh(t, clk, nil)
	p := prefix(t, client(t))
	const topic = "inbox:w-long"
	g := granter(t, newBell(t, c, p, sqsbell.WithClock(clk.Now)), clk)
	sweeper := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	ringer := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	ctx := t.Context()
	start := clk.Now()
	var url string
	lastSweep := start
	for clk.Now().Sub(start) <= 25*time.Hour {
		grant, err := g.GrantWake(ctx, topic, "w-long")
		if err != nil {
			t.Fatalf("grant at %v: %v", clk.Now().Sub(start), err)
		}
		if url != "" && grant.SQS.QueueURL != url {
			t.Errorf("grant at %v names another queue", clk.Now().Sub(start))
		}
		url = grant.SQS.QueueURL
		if clk.Now().Sub(lastSweep) >= time.Hour {
			lastSweep = clk.Now()
			if n, err := sweeper.Sweep(ctx, 24*time.Hour); err != nil || n != 0 {
				t.Fatalf("sweep at %v deleted %d queues (%v)", clk.Now().Sub(start), n, err)
			}
		}
		if err := ringer.Ring(ctx, topic); err != nil {
			t.Fatalf("ring at %v: %v", clk.Now().Sub(start), err)
		}
		if n := receiveRing(t, c, url); n != 1 {
			t.Fatalf("at %v the worker received %d rings, want 1", clk.Now().Sub(start), n)
		}
		clk.Add(50 * time.Minute)
	}
	if n := h.Counts().DeletedRecently; n != 0 {
		t.Errorf("%d creations refused as deleted recently", n)
	}
}

// A queue whose worker lives is never swept, whatever its last use; one
// whose worker settled (or a run's) is, once idle.
func TestSweepKeepsLiveWorkers(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, _ := harsh(t, clk, nil)
	p := prefix(t, client(t))
	b := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	asked := map[string]int{}
	b.KeepTopics(func(_ context.Context, topic string) (bool, error) {
		asked[topic]++
		return topic == "inbox:w-live", nil
	})
	for _, topic := range []string{"inbox:w-live", "inbox:w-gone", "run:r-1"} {
		listen(t, b, topic)
	}
	clk.Add(30 * time.Hour)
	n, err := b.Sweep(t.Context(), 24*time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("sweep deleted %d (%v), want 2", n, err)
	}
	if _, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(b.QueueName("inbox:w-live"))}); err != nil {
		t.Fatalf("the live worker's queue was swept: %v", err)
	}
	if asked["inbox:w-live"] != 1 || asked["inbox:w-gone"] != 1 {
		t.Errorf("asked %v", asked)
	}
	// Kept and touched: the next sweep does not ask again.
	if n, err := b.Sweep(t.Context(), 24*time.Hour); err != nil || n != 0 || asked["inbox:w-live"] != 1 {
		t.Errorf("second sweep: %d deleted (%v), asked %v", n, err, asked)
	}
}

// A new queue is tagged in CreateQueue itself: a TagQueue that SQS keeps
// throttling leaves it neither deletable nor counted as touched, and the
// next use tags it.
func TestThrottledTagQueue(t *testing.T) {
	clk := &clock{now: time.Now()}
	inj := awsfault.New()
	inj.SetRates(1, map[awsfault.Fault]float64{awsfault.Throttle: 1}, "TagQueue")
	c, _ := harsh(t, clk, inj)
	p := prefix(t, client(t))
	b := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	listen(t, b, "t")
	if inj.Injected("TagQueue", awsfault.Throttle) == 0 {
		t.Fatal("no TagQueue was throttled")
	}
	if n, err := b.Sweep(t.Context(), 3*time.Hour); err != nil || n != 0 {
		t.Fatalf("a sweep right after the throttled tag deleted %d (%v)", n, err)
	}
	inj.SetRates(1, nil)
	clk.Add(30 * time.Minute) // within the touch interval
	listen(t, b, "t")
	if inj.Calls("TagQueue") != 1 {
		t.Errorf("TagQueue reached SQS %d times after the throttling ended, want 1 (the failed touch did not count)", inj.Calls("TagQueue"))
	}
}

// A warm process's cached URL of a swept queue: the next grant finds it
// missing and makes the queue again, or, within SQS's minute, fails
// saying so; it never hands out the dead URL.
func TestGrantAfterSweep(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, h := harsh(t, clk, nil)
	p := prefix(t, client(t))
	g := granter(t, newBell(t, c, p, sqsbell.WithClock(clk.Now)), clk)
	ctx := t.Context()
	const topic = "inbox:w-1"
	first, err := g.GrantWake(ctx, topic, "w-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(first.SQS.QueueURL)}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.GrantWake(ctx, topic, "w-1"); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("a grant within the minute after the sweep: %v, want Unavailable", err)
	}
	if h.Counts().DeletedRecently != 1 {
		t.Errorf("counts %+v", h.Counts())
	}
	clk.Add(61 * time.Second)
	again, err := g.GrantWake(ctx, topic, "w-1")
	if err != nil {
		t.Fatalf("a grant after the minute: %v", err)
	}
	other := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	if err := other.Ring(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if n := receiveRing(t, c, again.SQS.QueueURL); n != 1 {
		t.Errorf("the regranted queue got %d rings", n)
	}
}

// A listener's cleanup receive long-polls: on AWS a short poll samples
// some servers and may miss an old ring, and the long poll after it would
// answer that ring at once again, a loop of receives while it stays. Here
// every short poll misses (HarshSQS) while an old ring is visible: the
// listener takes and deletes it at once, then waits on a quiet queue. A
// short-polling cleanup makes a long poll and a short one per Recheck
// (about 16 receives in 2 s) and deletes nothing.
func TestCleanupReceiveDoesNotMiss(t *testing.T) {
	clk := &clock{now: time.Now()}
	inj := awsfault.New() // counts the receives
	c, h := harsh(t, clk, inj)
	h.MissRate = 1
	p := prefix(t, client(t))
	ringer := newBell(t, c, p)
	if err := ringer.Ring(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	// The listener's clock runs ahead: the ring is older than KeepRings,
	// and older than Listen, so it wakes nobody and is to be deleted.
	clk.Add(time.Minute)
	b := newBell(t, c, p, sqsbell.WithClock(clk.Now))
	l := listen(t, b, "t")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := l.Wait(ctx); err == nil {
		t.Error("an old ring woke the listener")
	}
	// The long poll, the cleanup, the long poll on the quiet queue (and
	// one more, should the test's 2 s outlast that one's rounding).
	if n := inj.Calls("ReceiveMessage"); n > 4 {
		t.Errorf("%d receives in 2 s with an old ring while short polls miss; want at most 4", n)
	} else {
		t.Logf("%d receives in 2 s with an old ring while short polls miss", n)
	}
	if n := inj.Calls("DeleteMessageBatch"); n != 1 {
		t.Errorf("%d deletes, want 1 (the old ring)", n)
	}
	if n := h.Counts().Misses; n != 0 {
		t.Errorf("%d short polls missed: the cleanup short-polled", n)
	}
}
