package lambdaapp

import (
	"context"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/service"
)

// newDoorbell returns the SQS doorbell on the deployment's queues (named
// with prefix, GALLEY_QUEUE_PREFIX).
func newDoorbell(_ context.Context, c aws.Config, prefix string, _ *slog.Logger) (service.Doorbell, error) {
	return sqsbell.New(sqs.NewFromConfig(c), prefix)
}
