package harness

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// fakeWake is galley's side of a bell: grants in turn, and the waits.
type fakeWake struct {
	mu     sync.Mutex
	grants []workerapi.WakeGrant
	errs   []error
	asked  int
	waits  []int64
}

func (f *fakeWake) Wake(context.Context) (workerapi.WakeGrant, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := f.asked
	f.asked++
	if i < len(f.errs) && f.errs[i] != nil {
		return workerapi.WakeGrant{}, f.errs[i]
	}
	return f.grants[min(i, len(f.grants)-1)], nil
}

func (f *fakeWake) Wait(_ context.Context, after int64, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, after)
	return nil
}

// fakeQueue is a worker's queue as its grant's session sees it.
type fakeQueue struct {
	mu       sync.Mutex
	rings    []string // receipt handles of rings not yet received
	ids      []string // their message ids, when set
	deleted  []string
	receives int
	fail     error
}

func (q *fakeQueue) ReceiveMessage(_ context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.receives++
	if in.WaitTimeSeconds != sqsWaitSeconds {
		return nil, errors.New("not a long poll")
	}
	if q.fail != nil {
		return nil, q.fail
	}
	out := &sqs.ReceiveMessageOutput{}
	for i, h := range q.rings {
		m := types.Message{ReceiptHandle: aws.String(h)}
		if i < len(q.ids) {
			m.MessageId = aws.String(q.ids[i])
		}
		out.Messages = append(out.Messages, m)
	}
	q.rings, q.ids = nil, nil
	return out, nil
}

func (q *fakeQueue) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range in.Entries {
		q.deleted = append(q.deleted, *e.ReceiptHandle)
	}
	return &sqs.DeleteMessageBatchOutput{}, nil
}

func sqsGrant(expires time.Time) workerapi.WakeGrant {
	return workerapi.WakeGrant{Kind: workerapi.WakeSQS, Expires: expires,
		SQS: &workerapi.SQSWake{QueueURL: "https://sqs.example/q", Region: "us-east-1", AccessKeyID: "a", SecretAccessKey: "s", SessionToken: "t"}}
}

func newTestBell(api wakeAPI, q *fakeQueue, dials *int) *wakeBell {
	b := newWakeBell(api, slog.New(slog.DiscardHandler), time.Second, "", "")
	b.dial = func(workerapi.SQSWake) (sqsReceiver, error) {
		*dials++
		return q, nil
	}
	return b
}

// A ring wakes the harness (and is deleted); a quiet long poll does not;
// the grant is asked for once while it lasts.
func TestWakeBellRingsThroughItsQueue(t *testing.T) {
	api := &fakeWake{grants: []workerapi.WakeGrant{sqsGrant(time.Now().Add(time.Hour))}}
	q := &fakeQueue{}
	dials := 0
	b := newTestBell(api, q, &dials)
	ctx := context.Background()
	if b.wait(ctx, 0) {
		t.Fatal("a quiet receive said read now")
	}
	q.rings = []string{"r1", "r2"}
	if !b.wait(ctx, 0) {
		t.Fatal("a ring did not wake the harness")
	}
	if len(q.deleted) != 2 {
		t.Fatalf("deleted %v, want both rings", q.deleted)
	}
	if b.wait(ctx, 0) {
		t.Fatal("a deleted ring woke the harness again")
	}
	if api.asked != 1 || dials != 1 || len(api.waits) != 0 {
		t.Fatalf("grants asked %d, clients %d, galley waits %d; want 1, 1, 0", api.asked, dials, len(api.waits))
	}
}

// A grant about to expire is renewed before the receive; a failing
// renewal keeps the grant while it lasts.
func TestWakeBellRenewsItsGrant(t *testing.T) {
	soon := sqsGrant(time.Now().Add(renewBefore / 2))
	api := &fakeWake{grants: []workerapi.WakeGrant{soon, sqsGrant(time.Now().Add(time.Hour))},
		errs: []error{nil, galleyerr.Errorf(galleyerr.Unavailable, "sts down")}}
	q := &fakeQueue{}
	dials := 0
	b := newTestBell(api, q, &dials)
	b.wait(context.Background(), 0) // first grant
	b.wait(context.Background(), 0) // renewal fails: the first grant serves
	if api.asked != 2 || q.receives != 2 {
		t.Fatalf("asked %d, receives %d; want 2 and 2", api.asked, q.receives)
	}
	b.wait(context.Background(), 0) // renewed
	if api.asked != 3 || !b.grant.Expires.After(time.Now().Add(renewBefore)) {
		t.Fatalf("asked %d, grant expires %v: not renewed", api.asked, b.grant.Expires)
	}
}

// Whatever fails, the harness is told to read its inbox (after a pause),
// and a refused receive drops the grant so that a new one is asked for.
func TestWakeBellFailuresMeanRead(t *testing.T) {
	api := &fakeWake{grants: []workerapi.WakeGrant{sqsGrant(time.Now().Add(time.Hour))},
		errs: []error{galleyerr.Errorf(galleyerr.Unavailable, "no grant")}}
	q := &fakeQueue{}
	dials := 0
	b := newTestBell(api, q, &dials)
	if !b.wait(context.Background(), 0) {
		t.Fatal("a failed grant did not mean read now")
	}
	q.fail = errors.New("AccessDenied")
	if !b.wait(context.Background(), 0) {
		t.Fatal("a refused receive did not mean read now")
	}
	q.fail = nil
	b.wait(context.Background(), 0)
	if api.asked != 3 {
		t.Fatalf("grants asked %d, want 3 (the failed one, the first, the one after the refusal)", api.asked)
	}
}

// On the local server the grant is a wait through galley, with the cursor.
func TestWakeBellWaitsThroughGalley(t *testing.T) {
	api := &fakeWake{grants: []workerapi.WakeGrant{{Kind: workerapi.WakeGalley}}}
	dials := 0
	b := newTestBell(api, &fakeQueue{}, &dials)
	if !b.wait(context.Background(), 7) || !b.wait(context.Background(), 9) {
		t.Fatal("a wait through galley did not mean read now")
	}
	if len(api.waits) != 2 || api.waits[0] != 7 || api.waits[1] != 9 || api.asked != 1 || dials != 0 {
		t.Fatalf("waits %v, asked %d, dials %d", api.waits, api.asked, dials)
	}
}

// A ring delivered again (SQS delivers at least once) after the harness
// acted on it wakes nothing, is deleted again, and makes the bell pause
// before its next receive, longer while such receives follow one another;
// a new ring beside it wakes the harness.
func TestWakeBellIgnoresRingsActedOn(t *testing.T) {
	api := &fakeWake{grants: []workerapi.WakeGrant{sqsGrant(time.Now().Add(time.Hour))}}
	q := &fakeQueue{rings: []string{"h1"}, ids: []string{"m1"}}
	dials := 0
	b := newTestBell(api, q, &dials)
	if !b.wait(context.Background(), 0) {
		t.Fatal("a ring did not wake the harness")
	}
	// The pauses are cut short by a context that has ended.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, want := range []time.Duration{staleFirst, 2 * staleFirst, 4 * staleFirst} {
		q.rings, q.ids = []string{"h1b"}, []string{"m1"}
		if b.wait(ended, 0) {
			t.Fatal("a copy of a ring acted on woke the harness")
		}
		if b.stale != want {
			t.Fatalf("pause %v after a copy, want %v", b.stale, want)
		}
	}
	q.rings, q.ids = []string{"h1c", "h2"}, []string{"m1", "m2"}
	if !b.wait(context.Background(), 0) {
		t.Fatal("a new ring beside a copy did not wake the harness")
	}
	// (The copies received under the ended context were not deleted.)
	if b.stale != 0 || len(q.deleted) != 3 || q.deleted[1] != "h1c" || q.deleted[2] != "h2" {
		t.Fatalf("pause %v, deleted %v; want 0 and h1, h1c, h2", b.stale, q.deleted)
	}
	b.stale = staleMost
	for range 3 {
		q.rings, q.ids = []string{"h2b"}, []string{"m2"}
		b.wait(ended, 0)
	}
	if b.stale != staleMost {
		t.Fatalf("pause %v, want at most %v", b.stale, staleMost)
	}
}
