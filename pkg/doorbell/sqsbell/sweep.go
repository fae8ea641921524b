package sqsbell

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/galleyerr"
)

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
