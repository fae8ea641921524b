package sqsbell

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/galleyerr"
)

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
