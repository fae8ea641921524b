// Package sqsbell is the doorbell of galley on AWS: a ring is an SQS
// message on the topic's queue, and a waiter long-polls that queue. It
// implements service.Doorbell; doorbelltest checks it on fauxqs.
//
// SQS only wakes: it cannot fence and has no peek, so a ring carries
// nothing and the store stays the truth. A lost ring costs latency (the
// waiter re-reads the store at its deadline), a duplicated or stale ring a
// spurious wake (the waiter re-reads and waits again).
//
// Every waiter on a topic wakes on one ring, in this process or another
// (on AWS, two waiters are two function instances): the queue's visibility
// timeout is 0, so receiving a ring does not hide it from the other
// receivers, and a listener does not delete a ring younger than KeepRings.
// Each listener remembers the rings it woke on and the time of its last
// wake (its caller re-reads the store after it), so one ring wakes it
// once. While only such rings are visible it looks again every Recheck
// instead of long-polling, and the first listener to see a ring older than
// KeepRings deletes it (through a one-second long poll, which cannot miss
// it as a short poll may).
//
// A listener that cannot reach its queue (Listen's CreateQueue failed, a
// receive failed, the queue was swept) does not fail and does not sleep:
// each Wait pauses at most a second (WithMaxBackoff) and returns as if
// rung, so its caller re-reads the store at that interval until SQS
// answers again.
//
// Each topic (a run's mailbox, a worker's inbox) has one standard queue,
// named <prefix>-<32 hex digits of the SHA-256 of "v2:" and the topic>,
// created on the first Listen or Ring, holding rings for 60 seconds (SQS's
// minimum), tagged with its last use and its topic from its creation. A
// listener touches its queue's galley-last-listen tag at most once an hour
// per process, every wake grant touches it, and Sweep deletes the queues of
// the prefix idle for longer than a given age, except those whose topic's
// owner lives (KeepTopics). docs/storage.md gives the costs, the limits and
// the permissions each role needs.
package sqsbell

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// SQSAPI is the part of the SQS client the doorbell uses; the SDK's
// *sqs.Client and awsfault's decorator implement it.
type SQSAPI interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	TagQueue(context.Context, *sqs.TagQueueInput, ...func(*sqs.Options)) (*sqs.TagQueueOutput, error)

	// For Sweep only.
	ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
	ListQueueTags(context.Context, *sqs.ListQueueTagsInput, ...func(*sqs.Options)) (*sqs.ListQueueTagsOutput, error)
	DeleteQueue(context.Context, *sqs.DeleteQueueInput, ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error)
}

const (
	// maxReceiveWait is SQS's longest long poll.
	maxReceiveWait = 20 * time.Second
	// retention: a ring older than a minute woke nobody who still waits.
	retentionSeconds = "60"
	// visibilitySeconds: 0, so that a receive leaves the ring visible to
	// every other listener of the topic (SQS has no broadcast; the
	// functions may not use SNS). The SDK drops a zero VisibilityTimeout
	// from ReceiveMessage, so the queue's attribute carries it.
	visibilitySeconds = "0"
	// collectSeconds hides the rings a deleting receive takes just long
	// enough to delete them (a receipt handle of a receive whose
	// visibility has lapsed may not delete).
	collectSeconds = 1
	// collectWaitSeconds: the collecting receive is a long poll, which no
	// server's sampling can leave empty while old rings are visible.
	collectWaitSeconds = 1
	// nameVersion is hashed into queue names: the queues of the version
	// that hid rings for 2 s had other attributes, and CreateQueue refuses
	// a name with different attributes. Those idle out by the sweep.
	nameVersion = "v2:"
	// staleSlack: rings sent this long before Listen or the last wake are
	// dropped without a wake (the caller's store read after it saw their
	// cause); the slack covers clock skew between SQS and this host.
	staleSlack = 2 * time.Second
	// KeepRings is how long a ring stays in its queue for listeners that
	// were between two receives when it came (re-reading the store after
	// a wake, or checking it after Listen); then the first listener that
	// sees it deletes it. The queue keeps it 60 s at most anyway.
	KeepRings = 5 * time.Second
	// Recheck is how often a listener looks at its queue while only rings
	// it has already woken on are visible (a long poll would answer at
	// once): a new ring then wakes it within Recheck.
	Recheck = 250 * time.Millisecond
	// TagLastListen holds the Unix time a listener last used the queue.
	TagLastListen = "galley-last-listen"
	// TagTopicPrefix marks the queue as a doorbell of this prefix.
	TagPrefix = "galley-doorbell"
	// TagTopic names the queue's topic, so that Sweep can ask whether its
	// owner still lives (KeepTopics).
	TagTopic  = "galley-topic"
	maxCached = 10000
	// tagTries bounds the TagQueue attempts of one touch beyond the SDK's
	// own retries: TagQueue is throttled on AWS.
	tagTries = 3
)

// tagValueRE is what an SQS tag value may hold.
var tagValueRE = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]{0,256}$`)

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,46}$`)

// Bell is an SQS doorbell.
type Bell struct {
	sqs        SQSAPI
	prefix     string
	now        func() time.Time
	touchEvery time.Duration
	maxBackoff time.Duration
	after      func(time.Duration) <-chan time.Time // pauses (tests fire them at once)

	mu      sync.Mutex
	urls    map[string]string    // topic → queue URL
	touched map[string]time.Time // queue URL → when this process last tagged it
	keep    func(ctx context.Context, topic string) (bool, error)
}

var _ service.Doorbell = (*Bell)(nil)

// Option configures a Bell.
type Option func(*Bell)

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option { return func(b *Bell) { b.now = now } }

// WithTouchEvery sets how often a process refreshes a queue's
// galley-last-listen tag while it listens (default one hour). Sweep's idle
// age must exceed it with room to spare.
func WithTouchEvery(d time.Duration) Option { return func(b *Bell) { b.touchEvery = d } }

// WithMaxBackoff bounds the pause after SQS failed (creating the queue, or
// a receive) before Wait returns as if rung, so that the waiter re-reads
// the store at least this often while the doorbell is broken (default
// 1 s). The pause starts at 200 ms and doubles.
func WithMaxBackoff(d time.Duration) Option { return func(b *Bell) { b.maxBackoff = d } }

// New returns a doorbell whose queues are named <prefix>-<hash>. prefix is
// 1 to 46 letters, digits, '-' or '_' (queue names stop at 80), less one
// trailing '-', and should name the deployment, as two deployments sharing
// one must not share rings.
func New(client SQSAPI, prefix string, opts ...Option) (*Bell, error) {
	prefix = strings.TrimSuffix(prefix, "-") // "galley-house-" names the same queues
	if !prefixRE.MatchString(prefix) {
		return nil, galleyerr.Errorf(galleyerr.Invalid, "sqsbell: queue prefix %q must be 1 to 46 letters, digits, '-' or '_'", prefix)
	}
	b := &Bell{
		sqs: client, prefix: prefix, now: time.Now, touchEvery: time.Hour, maxBackoff: time.Second, after: time.After,
		urls: map[string]string{}, touched: map[string]time.Time{},
	}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// NewClientFromEnv builds an SQS client from the standard variables:
// AWS_REGION, the credential chain, and AWS_ENDPOINT_URL_SQS (or
// AWS_ENDPOINT_URL) for a stand-in such as fauxqs or LocalStack; opts apply
// after (a fault run's HTTP transport).
func NewClientFromEnv(ctx context.Context, opts ...func(*sqs.Options)) (*sqs.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, galleyerr.E(galleyerr.Op("sqsbell.NewClientFromEnv"), galleyerr.Other, err)
	}
	return sqs.NewFromConfig(cfg, opts...), nil
}

// Open is the one call a server makes: a client from the environment and a
// doorbell on it. Queues are created as topics are first used.
func Open(ctx context.Context, prefix string, opts ...Option) (*Bell, error) {
	c, err := NewClientFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	return New(c, prefix, opts...)
}

// KeepTopics has Sweep keep, whatever its age, a queue whose topic keep
// says is still live (a living worker's inbox), and touch it. The service
// sets it from the store's records (service.New).
func (b *Bell) KeepTopics(keep func(ctx context.Context, topic string) (bool, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.keep = keep
}

// QueueName is the queue of topic.
func (b *Bell) QueueName(topic string) string {
	h := sha256.Sum256([]byte(nameVersion + topic))
	return b.prefix + "-" + hex.EncodeToString(h[:16])
}

// queue returns topic's queue URL, creating the queue when this process
// has not seen it. CreateQueue is idempotent for identical attributes (tags
// are not compared, and apply only when the queue is made), so a new queue
// is tagged with its last use from its first moment: no failed TagQueue can
// leave it deletable. Within a minute of the name's deletion SQS refuses
// it (QueueDeletedRecently): the caller fails, and its next use tries again.
func (b *Bell) queue(ctx context.Context, topic string) (string, error) {
	b.mu.Lock()
	url, ok := b.urls[topic]
	b.mu.Unlock()
	if ok {
		return url, nil
	}
	now := b.now()
	tags := map[string]string{TagPrefix: b.prefix, TagLastListen: strconv.FormatInt(now.Unix(), 10)}
	if tagValueRE.MatchString(topic) {
		tags[TagTopic] = topic
	}
	out, err := b.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(b.QueueName(topic)),
		Attributes: map[string]string{
			string(types.QueueAttributeNameMessageRetentionPeriod): retentionSeconds,
			string(types.QueueAttributeNameVisibilityTimeout):      visibilitySeconds,
		},
		Tags: tags,
	})
	if err != nil {
		return "", err
	}
	url = aws.ToString(out.QueueUrl)
	b.mu.Lock()
	if len(b.urls) >= maxCached {
		clear(b.urls)
	}
	b.urls[topic] = url
	b.mu.Unlock()
	// A queue this process met (made earlier, elsewhere) counts as used
	// now; a failure is tried again at the next use.
	_ = b.touch(ctx, url, false)
	return url, nil
}

func (b *Bell) forget(topic, url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.urls[topic] == url {
		delete(b.urls, topic)
	}
	delete(b.touched, url)
}

// touch refreshes the queue's last-listen tag when this process has not
// done so for touchEvery (always when force is set), trying again while
// SQS throttles. The touch counts only once TagQueue succeeded, so a
// failed one is tried again at the next use. A queue that no longer exists
// (swept) is forgotten, and its error returned.
func (b *Bell) touch(ctx context.Context, url string, force bool) error {
	now := b.now()
	b.mu.Lock()
	last, ok := b.touched[url]
	b.mu.Unlock()
	if !force && ok && now.Sub(last) < b.touchEvery {
		return nil
	}
	var err error
	for try := 0; try < tagTries; try++ {
		_, err = b.sqs.TagQueue(ctx, &sqs.TagQueueInput{QueueUrl: aws.String(url), Tags: map[string]string{TagLastListen: strconv.FormatInt(now.Unix(), 10)}})
		if err == nil {
			b.mu.Lock()
			if len(b.touched) >= maxCached {
				clear(b.touched)
			}
			b.touched[url] = now
			b.mu.Unlock()
			return nil
		}
		if isMissing(err) {
			b.forgetURL(url)
			return err
		}
		if !isThrottled(err) {
			return err
		}
		select {
		case <-time.After(100 * time.Millisecond << try):
		case <-ctx.Done():
			return err
		}
	}
	return err
}

// forgetURL drops a queue URL from the caches, whatever its topic.
func (b *Bell) forgetURL(url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for topic, u := range b.urls {
		if u == url {
			delete(b.urls, topic)
		}
	}
	delete(b.touched, url)
}

func isThrottled(err error) bool {
	var rt *types.RequestThrottled
	var api smithy.APIError
	if errors.As(err, &rt) {
		return true
	}
	if !errors.As(err, &api) {
		return false
	}
	switch api.ErrorCode() {
	case "RequestThrottled", "ThrottlingException", "Throttling", "OverLimit":
		return true
	}
	return false
}

// isDeletedRecently: SQS refuses a queue name for 60 seconds after its
// deletion.
func isDeletedRecently(err error) bool {
	var dr *types.QueueDeletedRecently
	var api smithy.APIError
	return errors.As(err, &dr) || errors.As(err, &api) && strings.HasSuffix(api.ErrorCode(), "QueueDeletedRecently")
}

// Ring sends one ring to topic's queue. An error means the ring may be
// lost; the store stays the truth, so a caller may log it and go on.
func (b *Bell) Ring(ctx context.Context, topic string) error {
	const op = galleyerr.Op("sqsbell.Ring")
	for try := 0; ; try++ {
		url, err := b.queue(ctx, topic)
		if err == nil {
			_, err = b.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("ring")})
			if err == nil {
				return nil
			}
			// Swept (create it again), or created less than a second ago
			// (SQS needs that long before a new queue takes messages). A
			// name deleted within the minute fails at once (queue): the
			// ring is lost, and the waiters read the store meanwhile.
			if isMissing(err) && try < 3 {
				b.forget(topic, url)
				select {
				case <-time.After(250 * time.Millisecond << try):
					continue
				case <-ctx.Done():
				}
			}
		}
		return galleyerr.E(op, galleyerr.Unavailable, "the ring may be lost", err)
	}
}

// Listen makes sure topic's queue exists, so that every ring from now on
// is kept for the listener, and returns the listener. It fails only when
// ctx has ended: when SQS fails, the listener's Wait tries the queue again
// and meanwhile returns as if rung at most a second apart (the caller
// re-reads the store), so a broken doorbell degrades to polling.
func (b *Bell) Listen(ctx context.Context, topic string) (service.Listener, error) {
	const op = galleyerr.Op("sqsbell.Listen")
	if err := ctx.Err(); err != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	since := b.now()
	url, err := b.queue(ctx, topic)
	if err == nil {
		_ = b.touch(ctx, url, false) // when due: a long-lived topic's queue stays
	} else if cerr := ctx.Err(); cerr != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, cerr)
	}
	lctx, cancel := context.WithCancel(context.Background())
	return &listener{bell: b, topic: topic, url: url, since: since, seen: map[string]time.Time{}, closed: lctx, close: cancel}, nil
}

type listener struct {
	bell  *Bell
	topic string
	url   string // "" until the queue could be created
	// since: rings sent before it (less the slack) woke nobody who needs
	// them here: the caller read the store after Listen or after the last
	// wake. seen: the rings within the slack this listener woke on.
	since  time.Time
	seen   map[string]time.Time // message id → sent
	closed context.Context
	close  context.CancelFunc
	fails  int
}

var errClosed = galleyerr.E(galleyerr.Op("sqsbell.Wait"), galleyerr.Other, "listener closed")

// Wait long-polls the queue, 20 seconds at most per receive, until a ring
// this listener has not woken on, or ctx's end. When SQS fails it pauses
// (at most the bell's maximum backoff, 1 s by default) and returns nil as
// if rung, so that the waiter re-reads the store: a broken doorbell
// degrades to polling, never to a missed message.
func (l *listener) Wait(ctx context.Context) error {
	if l.closed.Err() != nil {
		return errClosed
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	defer context.AfterFunc(l.closed, stop)()
	b := l.bell
	collect := false // the last receive showed rings older than KeepRings
	for {
		if l.url == "" {
			url, err := b.queue(wctx, l.topic)
			if err != nil {
				return l.degrade(ctx)
			}
			l.url = url
		}
		in := &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(l.url),
			MaxNumberOfMessages:         10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp},
		}
		if collect {
			// A receive that hides what it takes for a second, so that its
			// receipt handles delete. The young rings it takes reach the
			// other listeners a second late. It long-polls (a second): a
			// short poll samples some of SQS's servers and may miss the
			// old rings, and the long poll after it would answer them at
			// once again, a loop of receives while they stay (up to a
			// minute); a long poll asks every server, and returns at once
			// as they are there.
			in.VisibilityTimeout = collectSeconds
			in.WaitTimeSeconds = collectWaitSeconds
		} else {
			// Long polls count whole seconds: round up, and let the
			// deadline cut the last one short. That hides nothing, as
			// receiving leaves rings visible.
			wait := maxReceiveWait
			if d, ok := ctx.Deadline(); ok {
				wait = min(time.Until(d)+time.Second-1, maxReceiveWait)
			}
			in.WaitTimeSeconds = int32(max(wait/time.Second, 1))
		}
		out, err := b.sqs.ReceiveMessage(wctx, in)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case l.closed.Err() != nil:
			return errClosed
		case err != nil:
			if isMissing(err) {
				// Swept while we listened: create it again on the next Wait.
				b.forget(l.topic, l.url)
				l.url = ""
			}
			return l.degrade(ctx)
		}
		l.fails = 0
		wake, old := l.sort(out.Messages)
		collected := collect
		collect = false
		if collected {
			l.delete(wctx, old)
		}
		if wake {
			return nil
		}
		switch {
		case len(out.Messages) == 0:
			// Nothing visible (after a cleanup receive too: another
			// listener took the old rings): long-poll again.
			_ = b.touch(wctx, l.url, false)
		case !collected && len(old) > 0:
			collect = true
		case collected && len(old) == len(out.Messages):
			// All deleted: long-poll again at once.
		default:
			// Only rings this listener already woke on (or whose cause
			// its caller already read) are visible, and they stay a
			// while for the other listeners: look again shortly, as a
			// long poll would answer at once.
			select {
			case <-b.after(Recheck):
			case <-ctx.Done():
				return ctx.Err()
			case <-l.closed.Done():
				return errClosed
			}
		}
	}
}

// degrade pauses after a failure of SQS (200 ms doubling to the bell's
// maximum) and returns nil as if rung: the waiter re-reads the store.
func (l *listener) degrade(ctx context.Context) error {
	l.fails++
	backoff := min(l.bell.maxBackoff, 100*time.Millisecond<<min(l.fails, 8))
	select {
	case <-l.bell.after(backoff):
		l.woke()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.closed.Done():
		return errClosed
	}
}

// woke records a wake: the caller re-reads the store after it, which
// covers every ring sent before it.
func (l *listener) woke() {
	l.since = l.bell.now()
	cut := l.since.Add(-staleSlack)
	for id, sent := range l.seen {
		if sent.Before(cut) {
			delete(l.seen, id)
		}
	}
}

// sort reports whether ms hold a ring this listener has not woken on and
// whose cause its caller may not have read (sent after since, less the
// slack), and returns the rings older than KeepRings, which any listener
// may delete. A ring without a readable timestamp wakes (once).
func (l *listener) sort(ms []types.Message) (wake bool, old []types.Message) {
	now := l.bell.now()
	cut := l.since.Add(-staleSlack)
	for _, m := range ms {
		id := aws.ToString(m.MessageId)
		milli, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		sent := time.UnixMilli(milli)
		if err != nil {
			sent = now
		} else if now.Sub(sent) > KeepRings {
			old = append(old, m)
		}
		if _, ok := l.seen[id]; ok || sent.Before(cut) {
			continue
		}
		l.seen[id] = sent
		wake = true
	}
	if wake {
		l.woke()
	}
	return wake, old
}

// delete removes received rings. A failure leaves them to be deleted by
// the next listener that sees them, or by SQS's retention.
func (l *listener) delete(ctx context.Context, ms []types.Message) {
	if len(ms) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, 0, len(ms))
	for i, m := range ms {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	l.bell.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(l.url), Entries: entries})
}

// Close ends the listener; a Wait in progress returns. The queue stays for
// other listeners and rings until Sweep finds it idle.
func (l *listener) Close() error {
	l.close()
	return nil
}

// Sweep deletes the doorbell queues of this prefix whose last listen is
// older than idle (at least twice the touch interval, so that a queue in
// use is never taken), and returns how many it deleted. Run it from time to
// time (a scheduled function, or the local server's housekeeping). A queue
// deleted under a late listener or ring is created again on its next use;
// SQS refuses the same name for 60 seconds after a deletion, during which
// the listener polls the store instead.
func (b *Bell) Sweep(ctx context.Context, idle time.Duration) (int, error) {
	const op = galleyerr.Op("sqsbell.Sweep")
	if idle < 2*b.touchEvery {
		return 0, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("idle age %v is under twice the touch interval %v", idle, b.touchEvery))
	}
	cut := b.now().Add(-idle).Unix()
	deleted := 0
	in := &sqs.ListQueuesInput{QueueNamePrefix: aws.String(b.prefix + "-"), MaxResults: aws.Int32(1000)}
	for {
		out, err := b.sqs.ListQueues(ctx, in)
		if err != nil {
			return deleted, galleyerr.E(op, galleyerr.Unavailable, err)
		}
		for _, url := range out.QueueUrls {
			tags, err := b.sqs.ListQueueTags(ctx, &sqs.ListQueueTagsInput{QueueUrl: aws.String(url)})
			if err != nil {
				if isMissing(err) {
					continue
				}
				return deleted, galleyerr.E(op, galleyerr.Unavailable, err)
			}
			if tags.Tags[TagPrefix] != b.prefix {
				continue // a queue of a longer prefix that starts with ours
			}
			// No (or no readable) last-listen tag: made by a process that
			// failed to tag it, so nobody listens through it.
			last, err := strconv.ParseInt(tags.Tags[TagLastListen], 10, 64)
			if err == nil && last >= cut {
				continue
			}
			if live, err := b.live(ctx, tags.Tags[TagTopic]); err != nil || live {
				// Its owner lives (a worker waiting on its inbox, however
				// long): touched, not deleted. Unknown: kept till the
				// next sweep.
				if live {
					_ = b.touch(ctx, url, true)
				}
				continue
			}
			if _, err := b.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil && !isMissing(err) {
				return deleted, galleyerr.E(op, galleyerr.Unavailable, err)
			}
			b.forgetURL(url)
			deleted++
		}
		if out.NextToken == nil {
			return deleted, nil
		}
		in.NextToken = out.NextToken
	}
}

// live asks KeepTopics' function whether topic's owner lives; a queue
// with no topic tag (made before the tag) is judged by its age alone.
func (b *Bell) live(ctx context.Context, topic string) (bool, error) {
	b.mu.Lock()
	keep := b.keep
	b.mu.Unlock()
	if keep == nil || topic == "" {
		return false, nil
	}
	return keep(ctx, topic)
}

func isMissing(err error) bool {
	var dne *types.QueueDoesNotExist
	if errors.As(err, &dne) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || api.ErrorCode() == "QueueDoesNotExist")
}

// SweepEvery runs Sweep every interval until ctx ends, logging what it
// removed; the local server runs it beside --doorbell sqs.
func (b *Bell) SweepEvery(ctx context.Context, every, idle time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := b.Sweep(ctx, idle)
			if err != nil {
				log.Warn("doorbell sweep", "err", err)
			} else if n > 0 {
				log.Info("doorbell sweep removed idle queues", "queues", n)
			}
		}
	}
}
