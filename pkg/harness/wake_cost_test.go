package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/workerapi"
)

// staleCopies is an http.RoundTripper in front of the SQS stand-in that
// behaves as AWS's SQS may where fauxqs does not: SQS keeps copies of a
// message on several servers and delivers at least once, so a receive may
// return a message it returned before (a copy on a server that missed the
// delete, or the visibility), and a long poll returns at once when it
// finds one. Here every message received stays, as such a copy, in every
// later receive of its queue until the queue's retention (60 s for a
// worker's queue) has passed since it was received: a receive while a copy
// is held asks the stand-in without waiting (fauxqs's short polls see
// every message) and answers at once with what it found and the copies.
// It counts the receives.
type staleCopies struct {
	base   http.RoundTripper
	retain time.Duration

	mu       sync.Mutex
	copies   map[string]staleCopy // message id → its copy
	receives int
}

type staleCopy struct {
	msg  json.RawMessage
	sent time.Time
}

func newStaleCopies(base http.RoundTripper) *staleCopies {
	return &staleCopies{base: base, retain: 60 * time.Second, copies: map[string]staleCopy{}}
}

func (s *staleCopies) Receives() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.receives
}

func (s *staleCopies) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.ReceiveMessage" || r.Body == nil {
		return s.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	s.receives++
	var held []json.RawMessage
	for id, c := range s.copies {
		if now.Sub(c.sent) > s.retain {
			delete(s.copies, id)
			continue
		}
		held = append(held, c.msg)
	}
	s.mu.Unlock()
	if len(held) > 0 {
		var in map[string]any
		if err := json.Unmarshal(body, &in); err == nil {
			in["WaitTimeSeconds"] = 0
			body, _ = json.Marshal(in)
		}
	}
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	resp, err := s.base.RoundTrip(r2)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var out struct {
		Messages []json.RawMessage `json:"Messages"`
	}
	_ = json.Unmarshal(rb, &out)
	found := map[string]bool{}
	s.mu.Lock()
	for _, m := range out.Messages {
		var head struct {
			MessageID string `json:"MessageId"`
		}
		if json.Unmarshal(m, &head) != nil || head.MessageID == "" {
			continue
		}
		found[head.MessageID] = true
		if _, ok := s.copies[head.MessageID]; !ok {
			s.copies[head.MessageID] = staleCopy{msg: m, sent: now}
		}
	}
	for id, c := range s.copies {
		if !found[id] {
			out.Messages = append(out.Messages, c.msg)
		}
	}
	s.mu.Unlock()
	if len(out.Messages) > 0 {
		rb, _ = json.Marshal(out)
	}
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	resp.ContentLength = int64(len(rb))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// staleQueue is a worker's queue on the SQS stand-in, made as galley makes
// them (visibility 0, rings kept 60 s), reached through HarshSQS (short
// polls that miss, expired handles of visibility-0 receives) in front of
// staleCopies; a bell on it, and a function that rings it.
func staleQueue(t testing.TB) (*wakeBell, *staleCopies, func()) {
	standins.Require(t, standins.SQS)
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sc := newStaleCopies(http.DefaultTransport)
	harsh := awsfault.NewHarshSQS(sc, 1)
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: harsh} })
	var b [5]byte
	_, _ = rand.Read(b[:])
	q, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("galleytest-wakecost-" + hex.EncodeToString(b[:])),
		Attributes: map[string]string{"VisibilityTimeout": "0", "MessageRetentionPeriod": "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}) })
	g := sqsGrant(time.Now().Add(time.Hour))
	g.SQS.QueueURL = *q.QueueUrl
	bell := newWakeBell(&fakeWake{grants: []workerapi.WakeGrant{g}}, slog.New(slog.DiscardHandler), time.Second, "", "")
	bell.dial = func(workerapi.SQSWake) (sqsReceiver, error) { return c, nil }
	ring := func() {
		t.Helper()
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("ring")}); err != nil {
			t.Fatal(err)
		}
	}
	return bell, sc, ring
}

// waitQuietly runs the harness's side of a bell for d: it waits, and
// reads the inbox (here: counts a wake) whenever the bell says so. It
// returns the wakes.
func waitQuietly(bell *wakeBell, d time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	wakes := 0
	for ctx.Err() == nil {
		if bell.wait(ctx, 0) && ctx.Err() == nil {
			wakes++
		}
	}
	return wakes
}

// TestWakeBellQuietWithStaleRing: a worker woken by a ring then waits 20 s
// while SQS keeps returning a copy of that ring (staleCopies). The copy
// wakes nothing, and the bell makes a handful of receives, not one per
// round trip: the bound counts receives (a slow machine makes fewer), and
// is far below what a bell that long-polls again at once makes (hundreds).
// Then a new ring, the stale copy still returned, wakes the worker.
func TestWakeBellQuietWithStaleRing(t *testing.T) {
	bell, sc, ring := staleQueue(t)
	ring()
	wctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if !bell.wait(wctx, 0) {
		t.Fatal("the ring did not wake the bell")
	}
	before := sc.Receives()
	const quiet, most = 20 * time.Second, 12
	if wakes := waitQuietly(bell, quiet); wakes != 0 {
		t.Errorf("the stale copy of an acted-on ring woke the worker %d times in %v", wakes, quiet)
	}
	if n := sc.Receives() - before; n > most {
		t.Errorf("%d receives in %v of quiet with a stale ring; want at most %d", n, quiet, most)
	} else {
		t.Logf("%d receives in %v of quiet with a stale ring", n, quiet)
	}

	// A ring after the quiet wakes the worker, though the stale copy is
	// still returned (it is under a minute old) and the bell is backing off.
	ring()
	rctx, rcancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer rcancel()
	woke := false
	for !woke && rctx.Err() == nil {
		woke = bell.wait(rctx, 0)
	}
	if !woke {
		t.Fatal("a new ring after the quiet did not wake the worker")
	}
}

// BenchmarkWakeBellWaiting measures what a waiting worker's queue costs:
// receives per minute of a bell waiting a minute with nothing happening,
// on a quiet queue ("quiet") and with a stale copy of a ring it acted on
// returned by every receive ("stale", staleCopies). Run it with
// -benchtime 1x (scripts/wakecost); each iteration waits wakeCostWindow.
func BenchmarkWakeBellWaiting(b *testing.B) {
	window := wakeCostWindow()
	for _, stale := range []bool{false, true} {
		name := "quiet"
		if stale {
			name = "stale"
		}
		b.Run(name, func(b *testing.B) {
			var receives, wakes int
			for range b.N {
				bell, sc, ring := staleQueue(b)
				ring()
				wctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				if !bell.wait(wctx, 0) {
					b.Fatal("the ring did not wake the bell")
				}
				cancel()
				if !stale {
					// Let the copy of the ring lapse before the minute.
					sc.mu.Lock()
					clear(sc.copies)
					sc.retain = 0
					sc.mu.Unlock()
				}
				before := sc.Receives()
				wakes += waitQuietly(bell, window)
				receives += sc.Receives() - before
			}
			perMinute := float64(time.Minute) / float64(window) / float64(b.N)
			b.ReportMetric(float64(receives)*perMinute, "receives/min")
			b.ReportMetric(float64(wakes)*perMinute, "wakes/min")
		})
	}
}

// wakeCostWindow is how long each case of BenchmarkWakeBellWaiting waits:
// a minute from scripts/wakecost.sh (GALLEY_WAKECOST_WINDOW=1m), which
// measures; 5 s otherwise, as in make test's pass of every benchmark once,
// which only keeps it running.
func wakeCostWindow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("GALLEY_WAKECOST_WINDOW")); err == nil && d > 0 {
		return d
	}
	return 5 * time.Second
}
