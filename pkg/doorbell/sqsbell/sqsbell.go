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
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

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
