package sqsbell

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

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

func isMissing(err error) bool {
	var dne *types.QueueDoesNotExist
	if errors.As(err, &dne) {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && (api.ErrorCode() == "AWS.SimpleQueueService.NonExistentQueue" || api.ErrorCode() == "QueueDoesNotExist")
}
