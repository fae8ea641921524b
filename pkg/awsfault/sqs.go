package awsfault

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

// SQSAPI is the part of the SQS client the decorator wraps; the SDK's
// *sqs.Client implements it.
type SQSAPI interface {
	CreateQueue(context.Context, *sqs.CreateQueueInput, ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error)
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	DeleteQueue(context.Context, *sqs.DeleteQueueInput, ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error)
	ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
	ListQueueTags(context.Context, *sqs.ListQueueTagsInput, ...func(*sqs.Options)) (*sqs.ListQueueTagsOutput, error)
	TagQueue(context.Context, *sqs.TagQueueInput, ...func(*sqs.Options)) (*sqs.TagQueueOutput, error)
	SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
}

// SQS is an SQS client that injects Faults' faults into calls to Client.
// It implements SQSAPI. ConditionFailed does not apply to SQS.
type SQS struct {
	Client SQSAPI
	Faults *Injector
}

var _ SQSAPI = (*SQS)(nil)

const sqsService = "SQS"

var sqsThrottle = &smithy.GenericAPIError{Code: "RequestThrottled", Message: "awsfault: throttled (injected)", Fault: smithy.FaultClient}

func (s *SQS) CreateQueue(ctx context.Context, in *sqs.CreateQueueInput, o ...func(*sqs.Options)) (*sqs.CreateQueueOutput, error) {
	return call(s.Faults, ctx, sqsService, "CreateQueue", nil, sqsThrottle, func(ctx context.Context) (*sqs.CreateQueueOutput, error) {
		return s.Client.CreateQueue(ctx, in, o...)
	})
}

func (s *SQS) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, o ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return call(s.Faults, ctx, sqsService, "GetQueueUrl", nil, sqsThrottle, func(ctx context.Context) (*sqs.GetQueueUrlOutput, error) {
		return s.Client.GetQueueUrl(ctx, in, o...)
	})
}

func (s *SQS) DeleteQueue(ctx context.Context, in *sqs.DeleteQueueInput, o ...func(*sqs.Options)) (*sqs.DeleteQueueOutput, error) {
	return call(s.Faults, ctx, sqsService, "DeleteQueue", nil, sqsThrottle, func(ctx context.Context) (*sqs.DeleteQueueOutput, error) {
		return s.Client.DeleteQueue(ctx, in, o...)
	})
}

func (s *SQS) ListQueues(ctx context.Context, in *sqs.ListQueuesInput, o ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	return call(s.Faults, ctx, sqsService, "ListQueues", nil, sqsThrottle, func(ctx context.Context) (*sqs.ListQueuesOutput, error) {
		return s.Client.ListQueues(ctx, in, o...)
	})
}

func (s *SQS) ListQueueTags(ctx context.Context, in *sqs.ListQueueTagsInput, o ...func(*sqs.Options)) (*sqs.ListQueueTagsOutput, error) {
	return call(s.Faults, ctx, sqsService, "ListQueueTags", nil, sqsThrottle, func(ctx context.Context) (*sqs.ListQueueTagsOutput, error) {
		return s.Client.ListQueueTags(ctx, in, o...)
	})
}

func (s *SQS) TagQueue(ctx context.Context, in *sqs.TagQueueInput, o ...func(*sqs.Options)) (*sqs.TagQueueOutput, error) {
	return call(s.Faults, ctx, sqsService, "TagQueue", nil, sqsThrottle, func(ctx context.Context) (*sqs.TagQueueOutput, error) {
		return s.Client.TagQueue(ctx, in, o...)
	})
}

func (s *SQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return call(s.Faults, ctx, sqsService, "SendMessage", nil, sqsThrottle, func(ctx context.Context) (*sqs.SendMessageOutput, error) {
		return s.Client.SendMessage(ctx, in, o...)
	})
}

func (s *SQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return call(s.Faults, ctx, sqsService, "ReceiveMessage", nil, sqsThrottle, func(ctx context.Context) (*sqs.ReceiveMessageOutput, error) {
		return s.Client.ReceiveMessage(ctx, in, o...)
	})
}

func (s *SQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return call(s.Faults, ctx, sqsService, "DeleteMessageBatch", nil, sqsThrottle, func(ctx context.Context) (*sqs.DeleteMessageBatchOutput, error) {
		return s.Client.DeleteMessageBatch(ctx, in, o...)
	})
}
