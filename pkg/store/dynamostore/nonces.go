package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// A nonce is one item, partition "N#<key>", whose TTL attribute is its
// expiry: DynamoDB deletes it some time after, and until then the
// condition below treats an expired one as absent.
const (
	nonceSK   = "N"
	typeNonce = "nonce"
)

// UseNonce writes the nonce's item with UpdateItem under the condition
// that none lives (absent, or its expiry passed), so that of concurrent
// writers in any number of Lambda instances one succeeds. The item holds
// this call's write id, and a failed condition returns the item (ALL_OLD;
// the condition fails only on a live item, which DynamoDB then returns):
// when the SDK resent a write DynamoDB had applied (a 500 or a reset after
// it), the resend finds this call's own item and answers true, not a
// replay. A write whose answer was lost beyond the SDK is not resent here:
// it is Unavailable, and the caller makes a fresh nonce.
func (s *Store) UseNonce(ctx context.Context, key string, expires time.Time) (bool, error) {
	const op = galleyerr.Op("dynamostore.UseNonce")
	if key == "" {
		return false, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	w := newWriteID()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 keyOf("N#"+key, nonceSK),
		UpdateExpression:    aws.String("SET #e = :e, #t = :t, #w = :w"),
		ConditionExpression: aws.String("attribute_not_exists(#pk) OR #e <= :now"),
		ExpressionAttributeNames: map[string]string{
			"#e": attrExpires, "#t": attrType, "#pk": attrPK, "#w": attrWriter,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":e": num(expires.Unix()), ":t": str(typeNonce), ":now": num(s.now().Unix()), ":w": str(w),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ccf):
		// Our own applied try, resent by the SDK, or another's use.
		return getS(ccf.Item, attrWriter) == w, nil
	}
	return false, mapErr(op, err, classify(err) == unknown)
}
