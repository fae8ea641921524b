package sqsbell_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/doorbelltest"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell/sqsbelltest"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

func client(t *testing.T) *sqs.Client { return sqsbelltest.Client(t) }

func prefix(t *testing.T, c *sqs.Client) string { return sqsbelltest.Prefix(t, c, "galleytest") }

func newBell(t *testing.T, c sqsbell.SQSAPI, p string, opts ...sqsbell.Option) *sqsbell.Bell {
	t.Helper()
	b, err := sqsbell.New(c, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	// One bell per subtest, as separate processes would have, on shared
	// queues (the suite's topics are unique per subtest).
	doorbelltest.Run(t, func(t *testing.T) service.Doorbell { return newBell(t, c, p) })
}

// Bells on one SQS, as separate processes (function instances) have: one
// ring wakes a listener in each.
func TestConformanceProcesses(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	doorbelltest.RunProcesses(t, func(t *testing.T) service.Doorbell { return newBell(t, c, p) })
}

func waitFor(t *testing.T, l service.Listener, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return l.Wait(ctx)
}

func listen(t *testing.T, b *sqsbell.Bell, topic string) service.Listener {
	t.Helper()
	l, err := b.Listen(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustWake(t *testing.T, l service.Listener) {
	t.Helper()
	if err := waitFor(t, l, 15*time.Second); err != nil {
		t.Fatalf("Wait = %v, want a wake", err)
	}
}

func mustStayQuiet(t *testing.T, l service.Listener) {
	t.Helper()
	if err := waitFor(t, l, doorbelltest.Quiet); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want DeadlineExceeded", err)
	}
}

// The queue is created with a short retention and visibility timeout, is
// tagged, and is named from the prefix and a hash of the topic.
func TestQueueShape(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	b := newBell(t, c, p)
	ctx := t.Context()
	topic := "mailbox/run-1"
	if err := b.Ring(ctx, topic); err != nil {
		t.Fatal(err)
	}
	name := b.QueueName(topic)
	if len(name) != len(p)+33 || name[:len(p)+1] != p+"-" {
		t.Errorf("queue name %q", name)
	}
	if b.QueueName("mailbox/run-2") == name {
		t.Error("two topics share a queue")
	}
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("Ring did not create the queue: %v", err)
	}
	attrs, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	if got := attrs.Attributes["MessageRetentionPeriod"]; got != "60" {
		t.Errorf("retention %s, want 60", got)
	}
	// 0: a receive leaves the ring to the topic's other listeners.
	if got := attrs.Attributes["VisibilityTimeout"]; got != "0" {
		t.Errorf("visibility timeout %s, want 0", got)
	}
	tags, err := c.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: url.QueueUrl})
	if err != nil {
		t.Fatal(err)
	}
	if tags.Tags[sqsbell.TagPrefix] != p || tags.Tags[sqsbell.TagLastListen] == "" {
		t.Errorf("tags %v", tags.Tags)
	}
	if _, err := sqsbell.New(c, "bad prefix!"); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Errorf("bad prefix: %v", err)
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Rings sent before Listen (less a slack for clock skew) are dropped
// without a wake: the caller's store check after Listen saw their cause.
func TestStaleRingsDropped(t *testing.T) {
	c := client(t)
	clk := &clock{now: time.Now()}
	b := newBell(t, c, prefix(t, c), sqsbell.WithClock(clk.Now))
	ctx := t.Context()
	if err := b.Ring(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute) // Listen "a minute later"
	l := listen(t, b, "t")
	mustStayQuiet(t, l)
	// A ring after Listen still wakes (its SentTimestamp is real time,
	// behind the fake clock, so stamp the listener back to now).
	clk.Add(-time.Minute)
	l2 := listen(t, b, "t")
	b.Ring(ctx, "t")
	mustWake(t, l2)
}

// Sweep deletes queues idle beyond the age and keeps the ones a listener
// touched; a swept topic works again on its next use.
func TestSweep(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	clk := &clock{now: time.Now()}
	b := newBell(t, c, p, sqsbell.WithClock(clk.Now), sqsbell.WithTouchEvery(time.Hour))
	ctx := t.Context()
	listen(t, b, "idle")
	listen(t, b, "busy")
	if _, err := b.Sweep(ctx, time.Hour); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Errorf("Sweep with an idle age under twice the touch interval: %v", err)
	}
	n, err := b.Sweep(ctx, 3*time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("Sweep of fresh queues deleted %d: %v", n, err)
	}
	clk.Add(2 * time.Hour)
	listen(t, b, "busy") // touches: the last touch is older than an hour
	clk.Add(2 * time.Hour)
	// A queue whose maker failed to tag it is nobody's: swept at once.
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(p + "-untagged"), Tags: map[string]string{sqsbell.TagPrefix: p}})
	if err != nil {
		t.Fatal(err)
	}
	n, err = b.Sweep(ctx, 3*time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Sweep deleted %d (%v), want 2", n, err)
	}
	if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(b.QueueName("idle"))}); err == nil {
		t.Error("the idle queue survived")
	}
	if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(b.QueueName("busy"))}); err != nil {
		t.Errorf("the busy queue was deleted: %v", err)
	}
	// The swept topic is used again: the queue comes back. (The clock goes
	// back to real time, since rings carry SQS's timestamps.)
	clk.Add(-4 * time.Hour)
	l := listen(t, b, "idle")
	if err := b.Ring(ctx, "idle"); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)
}

// A queue deleted under a waiting listener: Wait returns as if rung (the
// waiter re-reads the store), the queue is created again, and the next
// ring wakes.
func TestQueueDeletedUnderListener(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	b := newBell(t, c, p, sqsbell.WithMaxBackoff(10*time.Millisecond))
	ctx := t.Context()
	l := listen(t, b, "t")
	url, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(b.QueueName("t"))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)            // degraded: a wake without a ring
	other := newBell(t, c, p) // another process
	if err := other.Ring(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)
}

// Faults injected into the SQS client: a receive whose answer was lost
// loses no ring (receiving leaves it visible); a throttled
// send is reported and sends nothing; a send whose answer was lost is
// reported uncertain but still wakes; a receive that keeps failing makes
// Wait poll (return as if rung) instead of sleeping to its deadline.
func TestFaults(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	ctx := t.Context()

	t.Run("LostReceive", func(t *testing.T) {
		inj := awsfault.New()
		b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, p, sqsbell.WithMaxBackoff(10*time.Millisecond))
		l := listen(t, b, "lost-receive")
		if err := b.Ring(ctx, "lost-receive"); err != nil {
			t.Fatal(err)
		}
		inj.Script(awsfault.Step{Op: "ReceiveMessage", Fault: awsfault.LostResponse})
		mustWake(t, l) // degraded wake after the failed receive
		mustWake(t, l) // the ring itself, still visible
		if inj.Injected("ReceiveMessage", awsfault.LostResponse) != 1 {
			t.Fatal("no lost receive injected")
		}
		mustStayQuiet(t, l)
	})

	t.Run("ThrottledRing", func(t *testing.T) {
		inj := awsfault.New()
		b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, p)
		l := listen(t, b, "throttled")
		inj.Script(awsfault.Step{Op: "SendMessage", Fault: awsfault.Throttle})
		if err := b.Ring(ctx, "throttled"); !galleyerr.Is(galleyerr.Unavailable, err) {
			t.Fatalf("throttled Ring = %v, want Unavailable", err)
		}
		mustStayQuiet(t, l)
		b.Ring(ctx, "throttled")
		mustWake(t, l)
	})

	t.Run("LostSend", func(t *testing.T) {
		inj := awsfault.New()
		b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, p)
		l := listen(t, b, "lost-send")
		inj.Script(awsfault.Step{Op: "SendMessage", Fault: awsfault.LostResponse})
		if err := b.Ring(ctx, "lost-send"); !galleyerr.Is(galleyerr.Unavailable, err) {
			t.Fatalf("Ring with a lost answer = %v, want Unavailable", err)
		}
		mustWake(t, l)
	})

	t.Run("ReceiveKeepsFailing", func(t *testing.T) {
		inj := awsfault.New()
		inj.SetRates(1, map[awsfault.Fault]float64{awsfault.Throttle: 1}, "ReceiveMessage")
		b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, p, sqsbell.WithMaxBackoff(20*time.Millisecond))
		l := listen(t, b, "failing")
		for range 3 {
			mustWake(t, l)
		}
		if n := inj.Injected("ReceiveMessage", awsfault.Throttle); n != 3 {
			t.Errorf("%d throttled receives, want 3", n)
		}
	})
}

// pauses is a bell's pause (WithAfter) under the test's control: each
// pause sends its length on asked and ends when the test sends on release.
type pauses struct {
	asked   chan time.Duration
	release chan time.Time
}

func newPauses() *pauses {
	return &pauses{asked: make(chan time.Duration), release: make(chan time.Time)}
}

func (p *pauses) after(d time.Duration) <-chan time.Time {
	p.asked <- d
	return p.release
}

// A listener whose Listen could not create the queue (SQS down) does not
// fail: each Wait returns as if rung after a pause of at most a second, so
// the waiter re-reads the store at that interval until its deadline, and
// once SQS answers again a ring wakes it.
func TestListenWhileSQSDown(t *testing.T) {
	c := client(t)
	p := prefix(t, c)
	inj := awsfault.New()
	inj.SetRates(1, map[awsfault.Fault]float64{awsfault.Throttle: 1}, "CreateQueue")
	ps := newPauses()
	b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, p, sqsbell.WithAfter(ps.after))
	l, err := b.Listen(t.Context(), "down")
	if err != nil {
		t.Fatalf("Listen with SQS down = %v, want a listener that polls", err)
	}
	defer l.Close()
	var asked []time.Duration
	for i := range 6 {
		done := make(chan error, 1)
		go func() { done <- waitFor(t, l, 15*time.Second) }()
		d := <-ps.asked
		asked = append(asked, d)
		if d <= 0 || d > time.Second {
			t.Fatalf("pause %d before re-reading the store: %v, want at most 1s", i, d)
		}
		ps.release <- time.Time{}
		if err := <-done; err != nil {
			t.Fatalf("Wait %d with SQS down = %v, want nil (re-read the store)", i, err)
		}
	}
	if asked[len(asked)-1] != time.Second {
		t.Errorf("pauses %v, want them to grow to 1s", asked)
	}
	if n := inj.Injected("CreateQueue", awsfault.Throttle); n != 7 {
		t.Errorf("%d failed CreateQueue, want 7 (Listen and each Wait tries again)", n)
	}

	inj.SetRates(1, nil)
	other := newBell(t, c, p)
	if err := other.Ring(t.Context(), "down"); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)
}

// Listen with an ended context fails (and is the only way it fails).
func TestListenEndedContext(t *testing.T) {
	c := client(t)
	b := newBell(t, c, prefix(t, c))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Listen(ctx, "t"); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Fatalf("Listen(ended context) = %v, want Unavailable", err)
	}
}

// visible counts the rings in the queue of topic without hiding them.
func visible(t *testing.T, c *sqs.Client, b *sqsbell.Bell, topic string) int {
	t.Helper()
	url, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(b.QueueName(topic))})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Messages)
}

// next returns the length of the listener's next pause, failing if its
// Wait ends first.
func (p *pauses) next(t *testing.T, done <-chan error) time.Duration {
	t.Helper()
	select {
	case d := <-p.asked:
		return d
	case err := <-done:
		t.Fatalf("Wait = %v before the expected pause", err)
		return 0
	}
}

// A ring younger than KeepRings stays in the queue, however often the
// listener that woke on it looks again, for the listeners that were not
// receiving when it came; once older, the next listener to see it deletes
// it.
func TestRingsKeptThenDeleted(t *testing.T) {
	c := client(t)
	inj := awsfault.New()
	clk := &clock{now: time.Now()}
	ps := newPauses()
	b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, prefix(t, c), sqsbell.WithClock(clk.Now), sqsbell.WithAfter(ps.after))
	l := listen(t, b, "t")
	if err := b.Ring(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)
	done := make(chan error, 1)
	go func() { done <- waitFor(t, l, 15*time.Second) }()
	// Waiting again, the listener sees the ring it woke on and pauses.
	if d := ps.next(t, done); d != sqsbell.Recheck {
		t.Fatalf("pause %v, want Recheck", d)
	}
	if n := visible(t, c, b, "t"); n != 1 {
		t.Fatalf("%d rings in the queue after the listener looked again, want 1 (kept for the others)", n)
	}
	if inj.Calls("DeleteMessageBatch") != 0 {
		t.Fatal("a young ring was deleted")
	}
	// Five seconds later: it looks, finds the ring old, takes it with a
	// receive that hides it, deletes it and long-polls again. That long
	// poll fails (scripted), which pauses the listener once more: the
	// test's cue that the delete is done.
	clk.Add(sqsbell.KeepRings + time.Second)
	inj.Script(
		awsfault.Step{Op: "ReceiveMessage", Fault: awsfault.None},
		awsfault.Step{Op: "ReceiveMessage", Fault: awsfault.None},
		awsfault.Step{Op: "DeleteMessageBatch", Fault: awsfault.None},
		awsfault.Step{Op: "ReceiveMessage", Fault: awsfault.Throttle},
	)
	ps.release <- time.Time{}
	if d := ps.next(t, done); d > time.Second {
		t.Fatalf("pause %v after a failed receive, want at most 1s", d)
	}
	if n := inj.Calls("DeleteMessageBatch"); n != 1 {
		t.Fatalf("%d deletes, want 1", n)
	}
	if n := visible(t, c, b, "t"); n != 0 {
		t.Fatalf("%d rings in the queue, want the old one deleted", n)
	}
	ps.release <- time.Time{}
	if err := <-done; err != nil {
		t.Fatalf("Wait after a failed receive = %v, want nil (re-read the store)", err)
	}
}

// While only rings it woke on are visible, a listener looks again every
// Recheck (it does not spin on a long poll that answers at once), and a
// new ring wakes it at its next look.
func TestRecheckWhileOnlyOldRings(t *testing.T) {
	c := client(t)
	inj := awsfault.New()
	ps := newPauses()
	b := newBell(t, &awsfault.SQS{Client: c, Faults: inj}, prefix(t, c), sqsbell.WithAfter(ps.after))
	l := listen(t, b, "t")
	if err := b.Ring(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	mustWake(t, l)
	done := make(chan error, 1)
	go func() { done <- waitFor(t, l, 15*time.Second) }()
	if d := <-ps.asked; d != sqsbell.Recheck {
		t.Fatalf("pause %v, want Recheck (%v)", d, sqsbell.Recheck)
	}
	// The listener is paused: it makes no call until released.
	calls := inj.Calls("ReceiveMessage")
	if err := b.Ring(t.Context(), "t"); err != nil {
		t.Fatal(err)
	}
	if inj.Calls("ReceiveMessage") != calls {
		t.Fatal("the listener received while paused")
	}
	ps.release <- time.Time{}
	if err := <-done; err != nil {
		t.Fatalf("Wait after a second ring = %v, want nil", err)
	}
	if n := inj.Calls("ReceiveMessage"); n != calls+1 {
		t.Errorf("%d receives after the pause, want 1", n-calls)
	}
}

// Close unblocks a Wait in a long poll.
func TestCloseUnblocksWait(t *testing.T) {
	c := client(t)
	b := newBell(t, c, prefix(t, c))
	l := listen(t, b, "t")
	done := make(chan error, 1)
	go func() { done <- l.Wait(context.Background()) }()
	time.Sleep(100 * time.Millisecond) // into the receive
	l.Close()
	if err := <-done; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after Close = %v, want the closed error", err)
	}
}

// BenchmarkWake measures a ring's way to a waiting listener: SendMessage,
// the long poll's answer, the delete.
func BenchmarkWake(b *testing.B) {
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" {
		b.Skip("AWS_ENDPOINT_URL_SQS unset")
	}
	c, err := sqsbell.NewClientFromEnv(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	var r [4]byte
	rand.Read(r[:])
	p := "galleybench-" + hex.EncodeToString(r[:])
	bell, err := sqsbell.New(c, p)
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	l, err := bell.Listen(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	defer c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(queueURL(b, c, bell.QueueName("bench")))})
	for b.Loop() {
		done := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			done <- l.Wait(wctx)
		}()
		if err := bell.Ring(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
}

func queueURL(b *testing.B, c *sqs.Client, name string) string {
	out, err := c.GetQueueUrl(b.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		b.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}
