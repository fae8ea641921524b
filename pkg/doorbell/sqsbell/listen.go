package sqsbell

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

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
