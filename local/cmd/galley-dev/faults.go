package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// faultedBackends reads --inject-aws-faults' plan and the ways to open
// the DynamoDB store and the SQS doorbell with clients injecting it. The
// plan needs one of them: nothing is opened to check.
func faultedBackends(flags *localserver.Flags, spec string) (*awsfault.Plan, []localserver.OpenOption, error) {
	table, prefix, err := flags.AWS()
	if err != nil {
		return nil, nil, err
	}
	if table == "" && prefix == "" {
		return nil, nil, fmt.Errorf("--inject-aws-faults needs --store dynamodb or --doorbell sqs")
	}
	plan, err := awsfault.ParsePlan(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("--inject-aws-faults: %w", err)
	}
	return plan, []localserver.OpenOption{
		localserver.WithDynamoDB(func(ctx context.Context, table string) (store.Store, error) {
			return openFaultedStore(ctx, table, plan)
		}),
		localserver.WithSQS(func(ctx context.Context, prefix string) (*sqsbell.Bell, error) {
			return openFaultedBell(ctx, prefix, plan)
		}),
	}, nil
}

// openFaultedStore opens the DynamoDB store on table from the AWS SDK's
// standard variables, its client injecting plan's faults; the table is
// made, when missing, without.
func openFaultedStore(ctx context.Context, table string, plan *awsfault.Plan) (*dynamostore.Store, error) {
	c, err := dynamostore.NewClientFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	if err := dynamostore.New(c, table).EnsureTable(ctx); err != nil {
		return nil, err
	}
	wired, err := dynamostore.NewClientFromEnv(ctx, func(o *dynamodb.Options) {
		o.HTTPClient = &http.Client{Transport: plan.Transport(nil)}
	})
	if err != nil {
		return nil, err
	}
	return dynamostore.New(&awsfault.DynamoDB{Client: wired, Faults: plan.Injector()}, table), nil
}

// openFaultedBell opens the SQS doorbell on queues named prefix-... from
// the AWS SDK's standard variables, its client injecting plan's faults
// and behaving as AWS's SQS does (awsfault.HarshSQS).
func openFaultedBell(ctx context.Context, prefix string, plan *awsfault.Plan) (*sqsbell.Bell, error) {
	c, err := sqsbell.NewClientFromEnv(ctx, func(o *sqs.Options) {
		o.HTTPClient = &http.Client{Transport: plan.SQSTransport(nil)}
	})
	if err != nil {
		return nil, err
	}
	return sqsbell.New(&awsfault.SQS{Client: c, Faults: plan.Injector()}, prefix)
}
