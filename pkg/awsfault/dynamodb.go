package awsfault

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// DynamoDBAPI is the part of the DynamoDB client the decorator wraps; the
// SDK's *dynamodb.Client implements it.
type DynamoDBAPI interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DeleteTable(context.Context, *dynamodb.DeleteTableInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error)
	DescribeTimeToLive(context.Context, *dynamodb.DescribeTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// DynamoDB is a DynamoDB client that injects Faults' faults into calls to
// Client. It implements DynamoDBAPI.
type DynamoDB struct {
	Client DynamoDBAPI
	Faults *Injector
}

var _ DynamoDBAPI = (*DynamoDB)(nil)

const dynamoService = "DynamoDB"

var dynamoThrottle = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "awsfault: throttled (injected)", Fault: smithy.FaultClient}

func ccf() error {
	return &types.ConditionalCheckFailedException{Message: aws.String("awsfault: the conditional request failed (injected)")}
}

func ifCond(expr *string) func() error {
	return func() error {
		if expr == nil {
			return nil
		}
		return ccf()
	}
}

func (d *DynamoDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "GetItem", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.GetItemOutput, error) {
		return d.Client.GetItem(ctx, in, o...)
	})
}

func (d *DynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "PutItem", ifCond(in.ConditionExpression), dynamoThrottle, func(ctx context.Context) (*dynamodb.PutItemOutput, error) {
		return d.Client.PutItem(ctx, in, o...)
	})
}

func (d *DynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "UpdateItem", ifCond(in.ConditionExpression), dynamoThrottle, func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
		return d.Client.UpdateItem(ctx, in, o...)
	})
}

func (d *DynamoDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "DeleteItem", ifCond(in.ConditionExpression), dynamoThrottle, func(ctx context.Context) (*dynamodb.DeleteItemOutput, error) {
		return d.Client.DeleteItem(ctx, in, o...)
	})
}

func (d *DynamoDB) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return call(d.Faults, ctx, dynamoService, "Query", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.QueryOutput, error) {
		return d.Client.Query(ctx, in, o...)
	})
}

// TransactWriteItems fails a ConditionFailed as DynamoDB cancels a
// transaction: TransactionCanceledException with a ConditionalCheckFailed
// reason for every item that has a condition.
func (d *DynamoDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	cond := func() error {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		conditional := false
		for i, it := range in.TransactItems {
			code := "None"
			if hasCondition(it) {
				code, conditional = "ConditionalCheckFailed", true
			}
			reasons[i] = types.CancellationReason{Code: aws.String(code)}
		}
		if !conditional {
			return nil
		}
		return &types.TransactionCanceledException{
			Message:             aws.String("awsfault: transaction cancelled (injected)"),
			CancellationReasons: reasons,
		}
	}
	return call(d.Faults, ctx, dynamoService, "TransactWriteItems", cond, dynamoThrottle, func(ctx context.Context) (*dynamodb.TransactWriteItemsOutput, error) {
		return d.Client.TransactWriteItems(ctx, in, o...)
	})
}

func hasCondition(it types.TransactWriteItem) bool {
	switch {
	case it.ConditionCheck != nil:
		return true
	case it.Put != nil:
		return it.Put.ConditionExpression != nil
	case it.Update != nil:
		return it.Update.ConditionExpression != nil
	case it.Delete != nil:
		return it.Delete.ConditionExpression != nil
	}
	return false
}

func (d *DynamoDB) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return call(d.Faults, ctx, dynamoService, "DescribeTable", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.DescribeTableOutput, error) {
		return d.Client.DescribeTable(ctx, in, o...)
	})
}

func (d *DynamoDB) CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, o ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error) {
	return call(d.Faults, ctx, dynamoService, "CreateTable", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.CreateTableOutput, error) {
		return d.Client.CreateTable(ctx, in, o...)
	})
}

func (d *DynamoDB) DeleteTable(ctx context.Context, in *dynamodb.DeleteTableInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteTableOutput, error) {
	return call(d.Faults, ctx, dynamoService, "DeleteTable", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.DeleteTableOutput, error) {
		return d.Client.DeleteTable(ctx, in, o...)
	})
}

func (d *DynamoDB) DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error) {
	return call(d.Faults, ctx, dynamoService, "DescribeTimeToLive", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.DescribeTimeToLiveOutput, error) {
		return d.Client.DescribeTimeToLive(ctx, in, o...)
	})
}

func (d *DynamoDB) UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error) {
	return call(d.Faults, ctx, dynamoService, "UpdateTimeToLive", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.UpdateTimeToLiveOutput, error) {
		return d.Client.UpdateTimeToLive(ctx, in, o...)
	})
}
