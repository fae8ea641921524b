package awsfault

import (
	"context"
	"slices"
	"sync"

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

	keys sync.Map // table name → its key attributes' names, for puts
}

var _ DynamoDBAPI = (*DynamoDB)(nil)

const dynamoService = "DynamoDB"

var dynamoThrottle = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "awsfault: throttled (injected)", Fault: smithy.FaultClient}

func ccf(item map[string]types.AttributeValue) error {
	return &types.ConditionalCheckFailedException{Message: aws.String("awsfault: the conditional request failed (injected)"), Item: item}
}

// condFailure is how an injected ConditionFailed answers a single-item
// write with condition cond on table's item at key: DynamoDB's
// ConditionalCheckFailedException, carrying the live item when the write
// asked for it (rv ALL_OLD), as DynamoDB's does. When the write asked and
// no item stands, nothing faithful can be injected: with no item DynamoDB
// fails the condition only if absence fails it, and then the real call
// says so; otherwise it applies the write. So the write goes through.
func (d *DynamoDB) condFailure(table *string, key itemKey, cond *string, rv types.ReturnValuesOnConditionCheckFailure) condFault {
	if cond == nil {
		return nil
	}
	return func(ctx context.Context) error {
		if rv != types.ReturnValuesOnConditionCheckFailureAllOld {
			return ccf(nil)
		}
		item, err := d.liveItem(ctx, table, key)
		if err != nil || item == nil {
			return nil
		}
		return ccf(item)
	}
}

// liveItem reads the item at key as it stands (a consistent read, made
// past the injector).
func (d *DynamoDB) liveItem(ctx context.Context, table *string, key itemKey) (map[string]types.AttributeValue, error) {
	k, err := key(ctx)
	if err != nil {
		return nil, err
	}
	out, err := d.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// itemKey answers the key of the item a write names; a put's key needs the
// table's key schema, read only when a fault needs the item.
type itemKey func(context.Context) (map[string]types.AttributeValue, error)

func keyIs(k map[string]types.AttributeValue) itemKey {
	return func(context.Context) (map[string]types.AttributeValue, error) { return k, nil }
}

// keyOfItem is the key of a put's item: its attributes the table's key
// schema names (read once per table).
func (d *DynamoDB) keyOfItem(table *string, item map[string]types.AttributeValue) itemKey {
	return func(ctx context.Context) (map[string]types.AttributeValue, error) {
		names, err := d.keyNames(ctx, aws.ToString(table))
		if err != nil {
			return nil, err
		}
		k := make(map[string]types.AttributeValue, len(names))
		for _, n := range names {
			k[n] = item[n]
		}
		return k, nil
	}
}

func (d *DynamoDB) keyNames(ctx context.Context, table string) ([]string, error) {
	if v, ok := d.keys.Load(table); ok {
		return v.([]string), nil
	}
	out, err := d.Client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, k := range out.Table.KeySchema {
		names = append(names, aws.ToString(k.AttributeName))
	}
	d.keys.Store(table, names)
	return names, nil
}

func (d *DynamoDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "GetItem", nil, dynamoThrottle, func(ctx context.Context) (*dynamodb.GetItemOutput, error) {
		return d.Client.GetItem(ctx, in, o...)
	})
}

func (d *DynamoDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "PutItem", d.condFailure(in.TableName, d.keyOfItem(in.TableName, in.Item), in.ConditionExpression, in.ReturnValuesOnConditionCheckFailure), dynamoThrottle, func(ctx context.Context) (*dynamodb.PutItemOutput, error) {
		return d.Client.PutItem(ctx, in, o...)
	})
}

func (d *DynamoDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "UpdateItem", d.condFailure(in.TableName, keyIs(in.Key), in.ConditionExpression, in.ReturnValuesOnConditionCheckFailure), dynamoThrottle, func(ctx context.Context) (*dynamodb.UpdateItemOutput, error) {
		return d.Client.UpdateItem(ctx, in, o...)
	})
}

func (d *DynamoDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return call(d.Faults, ctx, dynamoService, "DeleteItem", d.condFailure(in.TableName, keyIs(in.Key), in.ConditionExpression, in.ReturnValuesOnConditionCheckFailure), dynamoThrottle, func(ctx context.Context) (*dynamodb.DeleteItemOutput, error) {
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
// reason for every item that has a condition, carrying the live item where
// that item asked for it (ALL_OLD) and one stands.
func (d *DynamoDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	var cond condFault
	if slices.ContainsFunc(in.TransactItems, hasCondition) {
		cond = func(ctx context.Context) error {
			reasons := make([]types.CancellationReason, len(in.TransactItems))
			for i, it := range in.TransactItems {
				reasons[i] = types.CancellationReason{Code: aws.String("None")}
				if !hasCondition(it) {
					continue
				}
				reasons[i].Code = aws.String("ConditionalCheckFailed")
				if table, key, ok := d.oldOf(it); ok {
					reasons[i].Item, _ = d.liveItem(ctx, table, key)
				}
			}
			return &types.TransactionCanceledException{
				Message:             aws.String("awsfault: transaction cancelled (injected)"),
				CancellationReasons: reasons,
			}
		}
	}
	return call(d.Faults, ctx, dynamoService, "TransactWriteItems", cond, dynamoThrottle, func(ctx context.Context) (*dynamodb.TransactWriteItemsOutput, error) {
		return d.Client.TransactWriteItems(ctx, in, o...)
	})
}

// oldOf names the item a transaction's item asks to have returned when its
// condition fails (ALL_OLD), and whether it asks.
func (d *DynamoDB) oldOf(it types.TransactWriteItem) (*string, itemKey, bool) {
	const old = types.ReturnValuesOnConditionCheckFailureAllOld
	switch {
	case it.ConditionCheck != nil && it.ConditionCheck.ReturnValuesOnConditionCheckFailure == old:
		return it.ConditionCheck.TableName, keyIs(it.ConditionCheck.Key), true
	case it.Put != nil && it.Put.ReturnValuesOnConditionCheckFailure == old:
		return it.Put.TableName, d.keyOfItem(it.Put.TableName, it.Put.Item), true
	case it.Update != nil && it.Update.ReturnValuesOnConditionCheckFailure == old:
		return it.Update.TableName, keyIs(it.Update.Key), true
	case it.Delete != nil && it.Delete.ReturnValuesOnConditionCheckFailure == old:
		return it.Delete.TableName, keyIs(it.Delete.Key), true
	}
	return nil, nil, false
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
