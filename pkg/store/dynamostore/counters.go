package dynamostore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// counterPK is a house counter's partition; its one item has sort key
// counterItemSK.
func counterPK(name string) string { return "C#" + name }

const counterItemSK = "C"

// NextCount adds one to the counter's item with UpdateItem ADD, which
// DynamoDB applies atomically, and answers the value it returns: two
// writes never see one value. A write whose answer was lost is resent as
// is; if the first try had applied, the resend skips a value, which a
// counter allows (it hands out unique numbers, not a gap-free sequence).
func (s *Store) NextCount(ctx context.Context, name string) (int64, error) {
	const op = galleyerr.Op("dynamostore.NextCount")
	if name == "" {
		return 0, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       keyOf(counterPK(name), counterItemSK),
		UpdateExpression:          aws.String("ADD #n :one SET #t = :t"),
		ExpressionAttributeNames:  map[string]string{"#n": attrCounter, "#t": attrType},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": num(1), ":t": str(typeCounter)},
		ReturnValues:              types.ReturnValueUpdatedNew,
	}
	conflicts := 0
	for attempt := 0; ; attempt++ {
		out, err := s.db.UpdateItem(ctx, in)
		if err == nil {
			n, ok := getN(out.Attributes, attrCounter)
			if !ok || n < 1 {
				return 0, galleyerr.E(op, galleyerr.Other, "DynamoDB answered the counter's update without its new value")
			}
			return n, nil
		}
		if isTxConflict(err) && conflicts < maxConflictRetries && ctx.Err() == nil {
			conflicts++
			attempt--
			s.sleep(ctx, conflicts)
			continue
		}
		// Resending is safe whatever became of the try (it only skips),
		// so a lost answer is resent rather than resolved.
		if classify(err) != unknown || attempt >= s.ambiguousRetries || ctx.Err() != nil {
			return 0, mapErr(op, err, false)
		}
		s.sleep(ctx, attempt)
	}
}
