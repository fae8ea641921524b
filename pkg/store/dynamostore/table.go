package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// EnsureTable creates the store's table when it is missing (on-demand
// capacity, keys pk and sk) and turns on TTL on attribute expires, then waits
// until the table is active. It is safe to run concurrently and on every
// start; a table that exists is left as it is apart from enabling TTL.
func (s *Store) EnsureTable(ctx context.Context) error {
	const op = galleyerr.Op("dynamostore.EnsureTable")
	_, err := s.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	if isCode(err, "ResourceNotFoundException") {
		_, err = s.db.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName:   aws.String(s.table),
			BillingMode: types.BillingModePayPerRequest,
			AttributeDefinitions: []types.AttributeDefinition{
				{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
				{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
			},
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
			},
		})
		if isCode(err, "ResourceInUseException") {
			err = nil // created by a concurrent EnsureTable
		}
	}
	if err != nil {
		return mapErr(op, err, false)
	}
	if err := s.waitActive(ctx, op); err != nil {
		return err
	}
	ttl, err := s.db.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.table)})
	if err != nil {
		return mapErr(op, err, false)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = s.db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(s.table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrExpires), Enabled: aws.Bool(true)},
	})
	if err != nil && !isCode(err, "ValidationException") { // "TTL is already enabled" races
		return mapErr(op, err, false)
	}
	return nil
}

func (s *Store) waitActive(ctx context.Context, op galleyerr.Op) error {
	for delay := 50 * time.Millisecond; ; delay = min(delay*2, 2*time.Second) {
		out, err := s.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
		if err != nil && !isCode(err, "ResourceNotFoundException") {
			return mapErr(op, err, false)
		}
		if err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return galleyerr.E(op, galleyerr.Unavailable, "table "+s.table+" did not become active", ctx.Err())
		case <-t.C:
		}
	}
}

func isCode(err error, code string) bool {
	var api smithy.APIError
	return err != nil && errors.As(err, &api) && api.ErrorCode() == code
}
