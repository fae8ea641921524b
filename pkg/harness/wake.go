package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// wakeAPI is the part of the worker API a bell uses.
type wakeAPI interface {
	Wake(ctx context.Context) (workerapi.WakeGrant, error)
	Wait(ctx context.Context, after int64, wait time.Duration) error
}

// A bell tells the harness when its inbox may hold something new, so that
// it reads the inbox only then: an idle worker makes no call to galley
// but its heartbeats. Which bell runs is galley's choice (the wake grant):
// on AWS the worker's own SQS queue, which the harness long-polls with
// credentials that can receive from that queue alone, so waiting holds no
// Lambda invocation; on the local server a wait through galley.
type bell interface {
	// wait returns true when the inbox should be read now: a ring came, or
	// the bell cannot tell (it failed, or it waits through galley). false
	// means a quiet wait: nothing rang.
	wait(ctx context.Context, after int64) bool
}

// The bell's timings.
const (
	// sqsWaitSeconds is one receive's long poll: SQS's maximum.
	sqsWaitSeconds = 20
	// ringVisibility hides a received ring (seconds) for longer than its
	// queue keeps it (sqsbell's 60 s retention): a ring that would not
	// delete is never received again from the copy that returned it.
	ringVisibility = 90
	// ringMemory is how long the bell remembers a ring it acted on: the
	// queue's retention, with room for clock skew.
	ringMemory = 2 * time.Minute
	// maxRemembered bounds that memory (a receive takes 10 rings at most).
	maxRemembered = 1000
	// staleFirst and staleMost bound the pause after a receive that
	// returned only rings already acted on (SQS delivers at least once: a
	// copy of a deleted ring may come back, and a long poll answers it at
	// once). The pause doubles while such receives follow one another, to
	// a long poll's length, so a copy that keeps coming back costs a few
	// receives a minute and a new ring waits one pause at most.
	staleFirst = time.Second
	staleMost  = sqsWaitSeconds * time.Second
	// renewBefore: a grant is renewed this long before it expires.
	renewBefore = 10 * time.Minute
	// bellRetry bounds the pause after a bell failed before the harness
	// reads the inbox anyway (and tries the bell again).
	bellRetry = 30 * time.Second
)

// wakeBell asks galley for the worker's grant and follows it, renewing it
// before it expires; while no grant works, it answers "read now" at most
// every bellRetry.
type wakeBell struct {
	api       wakeAPI
	log       *slog.Logger
	inboxWait time.Duration
	endpoint  string   // the SQS endpoint; empty: the SDK's default
	caBundle  string   // a PEM file of CAs to trust besides the system's
	proxy     *url.URL // the egress service as the harness; nil for none

	grant   workerapi.WakeGrant
	sqs     sqsReceiver
	failure time.Duration // the pause after the latest failure
	// acted: the rings (message ids) that woke the harness, and when;
	// stale: the pause after the latest receive of only such rings.
	acted map[string]time.Time
	stale time.Duration
	// dial makes the SQS client of a grant (tests replace it).
	dial func(workerapi.SQSWake) (sqsReceiver, error)
}

// sqsReceiver is the part of the SQS client a bell uses.
type sqsReceiver interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

func newWakeBell(api wakeAPI, log *slog.Logger, inboxWait time.Duration, endpoint, caBundle string) *wakeBell {
	b := &wakeBell{api: api, log: log, inboxWait: inboxWait, endpoint: endpoint, caBundle: caBundle, acted: map[string]time.Time{}}
	b.dial = b.dialSQS
	return b
}

func (b *wakeBell) wait(ctx context.Context, after int64) bool {
	if err := b.ensureGrant(ctx); err != nil {
		return b.failed(ctx, "asking galley for the wake grant failed", err)
	}
	switch b.grant.Kind {
	case workerapi.WakeGalley:
		if err := b.api.Wait(ctx, after, b.inboxWait); err != nil {
			return b.failed(ctx, "waiting through galley failed", err)
		}
		b.failure = 0
		return true
	default: // WakeSQS; ensureGrant refuses other kinds
		return b.receive(ctx)
	}
}

// ensureGrant asks for a grant when there is none or it ends soon. A
// renewal that fails keeps the old grant while it lasts.
func (b *wakeBell) ensureGrant(ctx context.Context) error {
	if b.grant.Kind != "" && (b.grant.Expires.IsZero() || time.Until(b.grant.Expires) > renewBefore) {
		return nil
	}
	g, err := b.api.Wake(ctx)
	if err == nil {
		err = b.use(g)
	}
	if err != nil && b.grant.Kind != "" && time.Until(b.grant.Expires) > 0 {
		b.log.Warn("renewing the wake grant failed; the current one lasts a while", "err", err, "expires", b.grant.Expires)
		return nil
	}
	return err
}

// use adopts a grant: for SQS, a client with the grant's credentials and
// nothing else of the environment (the harness has removed its AWS_
// variables; the endpoint and CA bundle were read before).
func (b *wakeBell) use(g workerapi.WakeGrant) error {
	switch g.Kind {
	case workerapi.WakeGalley:
		b.grant, b.sqs = g, nil
		b.log.Info("waiting for wake-ups through galley")
		return nil
	case workerapi.WakeSQS:
		if g.SQS == nil || g.SQS.QueueURL == "" || g.SQS.Region == "" {
			return galleyerr.Errorf(galleyerr.Other, "the SQS wake grant names no queue or region")
		}
		client, err := b.dial(*g.SQS)
		if err != nil {
			return err
		}
		renewed := b.grant.Kind == workerapi.WakeSQS
		b.grant, b.sqs = g, client
		if !renewed {
			b.log.Info("waiting for wake-ups on the worker's queue", "queue", g.SQS.QueueURL, "expires", g.Expires)
		}
		return nil
	}
	return galleyerr.Errorf(galleyerr.Other, "unknown wake grant kind %q", g.Kind)
}

// dialSQS is an SQS client with the grant's credentials.
func (b *wakeBell) dialSQS(g workerapi.SQSWake) (sqsReceiver, error) {
	opts := sqs.Options{Region: g.Region,
		Credentials: credentials.NewStaticCredentialsProvider(g.AccessKeyID, g.SecretAccessKey, g.SessionToken)}
	if b.endpoint != "" {
		opts.BaseEndpoint = aws.String(b.endpoint)
	}
	if b.caBundle != "" || b.proxy != nil {
		client, err := caClient(b.caBundle, b.proxy)
		if err != nil {
			return nil, err
		}
		opts.HTTPClient = client
	}
	return sqs.New(opts), nil
}

// caClient is an HTTP client trusting the system's CAs and, with file,
// those of the PEM file; through proxy when there is one, and never
// through one the environment names.
func caClient(file string, proxy *url.URL) (*http.Client, error) {
	t := ownTransport(proxy)
	if file == "" {
		return &http.Client{Transport: t}, nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Other, "the CA bundle", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, galleyerr.Errorf(galleyerr.Other, "the CA bundle holds no certificate")
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: t}, nil
}

// receive long-polls the worker's queue once (always the 20 s maximum, so
// a quiet queue costs three receives a minute). Any message is a ring: the
// rings received are deleted before the harness reads the inbox, so a ring
// that comes after the read is a new one. The receive hides what it takes
// for ringVisibility, longer than the queue keeps a ring, so its receipt
// handles still delete (the queue's own visibility is 0, for the service's
// listeners, and a handle of a receive whose visibility has lapsed may not
// delete), and a ring that would not delete, even once more, never comes
// back from that copy. A ring the harness already acted on (SQS delivers
// at least once) wakes nothing: it is deleted again, and the bell pauses
// before the next receive (staleFirst doubling to staleMost), as a long
// poll would answer such a copy at once again.
func (b *wakeBell) receive(ctx context.Context) bool {
	url := b.grant.SQS.QueueURL
	out, err := b.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), WaitTimeSeconds: sqsWaitSeconds, MaxNumberOfMessages: 10,
		VisibilityTimeout: ringVisibility,
	})
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		// A refused or expired grant, or a queue swept away: ask again.
		b.grant = workerapi.WakeGrant{}
		return b.failed(ctx, "receiving from the wake queue failed", err)
	}
	b.failure = 0
	if len(out.Messages) == 0 {
		b.stale = 0
		return false
	}
	fresh := b.remember(out.Messages)
	b.deleteAll(ctx, url, out.Messages)
	if fresh {
		b.stale = 0
		return true
	}
	b.stale = min(max(2*b.stale, staleFirst), staleMost)
	b.log.Debug("the wake queue returned only rings already acted on; pausing", "rings", len(out.Messages), "in", b.stale)
	_ = sleepCtx(ctx, b.stale)
	return false
}

// remember records the rings of ms as acted on (the harness reads its
// inbox after them) and reports whether any was new. A ring without an id
// is new. Rings older than ringMemory are forgotten: the queue no longer
// holds them.
func (b *wakeBell) remember(ms []types.Message) bool {
	now := time.Now()
	for id, at := range b.acted {
		if now.Sub(at) > ringMemory {
			delete(b.acted, id)
		}
	}
	fresh := false
	for _, m := range ms {
		id := aws.ToString(m.MessageId)
		if _, seen := b.acted[id]; id != "" && seen {
			continue
		}
		fresh = true
		if id != "" && len(b.acted) < maxRemembered {
			b.acted[id] = now
		}
	}
	return fresh
}

// deleteAll deletes the rings of ms, once more after a failure, and logs
// those that would not delete: hidden for ringVisibility, they expire
// before they could be received again.
func (b *wakeBell) deleteAll(ctx context.Context, url string, ms []types.Message) {
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(ms))
	for i, m := range ms {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	var err error
	for try := 0; len(entries) > 0 && ctx.Err() == nil; try++ {
		var failed []string
		entries, failed, err = b.deleteRings(ctx, url, entries)
		if len(entries) > 0 && try == 1 {
			b.log.Warn("deleting rings failed; hidden longer than the queue keeps them, they do not come back",
				"rings", len(entries), "codes", failed, "err", err, "visibility", time.Duration(ringVisibility)*time.Second)
			return
		}
	}
}

// deleteRings deletes entries and returns those that did not delete (all
// of them when the call failed) with the codes SQS gave.
func (b *wakeBell) deleteRings(ctx context.Context, url string, entries []types.DeleteMessageBatchRequestEntry) ([]types.DeleteMessageBatchRequestEntry, []string, error) {
	out, err := b.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil {
		return entries, nil, err
	}
	var left []types.DeleteMessageBatchRequestEntry
	var codes []string
	for _, f := range out.Failed {
		for _, e := range entries {
			if aws.ToString(e.Id) == aws.ToString(f.Id) {
				left = append(left, e)
				codes = append(codes, aws.ToString(f.Code))
			}
		}
	}
	return left, codes, nil
}

// failed logs err, pauses (1 s doubling to bellRetry) and answers "read
// now", so a broken bell costs latency, never a lost message.
func (b *wakeBell) failed(ctx context.Context, what string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	b.failure = min(max(2*b.failure, time.Second), bellRetry)
	if galleyerr.Is(galleyerr.Unauthorized, err) || errors.Is(err, context.Canceled) {
		b.failure = bellRetry
	}
	b.log.Warn(what+"; reading the inbox and trying again", "err", err, "in", b.failure)
	_ = sleepCtx(ctx, b.failure)
	return ctx.Err() == nil
}
