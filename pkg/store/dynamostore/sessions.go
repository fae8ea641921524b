package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// An operator session is one item, partition "S#<id hash>", its document
// the store.Session and its TTL attribute the session's expiry: DynamoDB
// deletes it some time after, and until then reads and the put's
// condition treat an expired one as absent. A login tally is one item,
// partition "T#<key>", its count in n and its expiry in the TTL attribute.
const (
	sessionSK   = "S"
	typeSession = "session"
	tallySK     = "T"
	typeTally   = "tally"
)

func sessionKey(idHash string) map[string]types.AttributeValue {
	return keyOf("S#"+idHash, sessionSK)
}

// PutSession writes the session's item under the condition that none
// lives there. Like UseNonce, the item holds this call's write id, so a
// resend by the SDK of a write DynamoDB had applied finds its own item
// and succeeds.
func (s *Store) PutSession(ctx context.Context, se store.Session) error {
	const op = galleyerr.Op("dynamostore.PutSession")
	switch {
	case se.IDHash == "":
		return galleyerr.E(op, galleyerr.Invalid, "empty key")
	case se.Expires.IsZero():
		return galleyerr.E(op, galleyerr.Invalid, "a session must expire")
	}
	doc, name, err := encodeDoc(se)
	if err != nil {
		return galleyerr.E(op, galleyerr.Invalid, err)
	}
	w := newWriteID()
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:           aws.String(s.table),
		Key:                 sessionKey(se.IDHash),
		UpdateExpression:    aws.String("SET #d = :d, #e = :e, #t = :t, #w = :w"),
		ConditionExpression: aws.String("attribute_not_exists(#pk) OR #e <= :now"),
		ExpressionAttributeNames: map[string]string{
			"#d": name, "#e": attrExpires, "#t": attrType, "#pk": attrPK, "#w": attrWriter,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":d": doc, ":e": num(se.Expires.Unix()), ":t": str(typeSession), ":now": num(s.now().Unix()), ":w": str(w),
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ccf):
		if getS(ccf.Item, attrWriter) == w {
			return nil // our own applied try, resent by the SDK
		}
		return galleyerr.E(op, galleyerr.Conflict, "a session lives under that id")
	}
	return mapErr(op, err, classify(err) == unknown)
}

// GetSession reads the session's item, consistently; an expired one that
// DynamoDB has not deleted yet is NotFound.
func (s *Store) GetSession(ctx context.Context, idHash string) (store.Session, error) {
	const op = galleyerr.Op("dynamostore.GetSession")
	if idHash == "" {
		return store.Session{}, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	item, err := s.getItem(ctx, sessionKey(idHash))
	if err != nil {
		return store.Session{}, mapErr(op, err, false)
	}
	if item == nil || expired(item, s.now()) {
		return store.Session{}, galleyerr.E(op, galleyerr.NotFound, "no such session")
	}
	var se store.Session
	if err := decodeDoc(item, &se); err != nil {
		return store.Session{}, corrupt(op, err)
	}
	return se, nil
}

// DeleteSession deletes the session's item; deleting is idempotent, so a
// resend is harmless.
func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	const op = galleyerr.Op("dynamostore.DeleteSession")
	if idHash == "" {
		return galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: sessionKey(idHash)})
	if err != nil {
		return mapErr(op, err, false)
	}
	return nil
}

// AddTally adds one to the tally's item with UpdateItem ADD under the
// condition that the tally lives (or is absent), keeping the expiry its
// first add set, and answers the count DynamoDB returns: one atomic write
// an attempt. When the item's expiry has passed (DynamoDB deletes it
// lazily), a second write starts it over at 1, conditioned on that
// expiry still having passed, so of concurrent restarts one wins and the
// others count on. A write whose answer was lost is resent as is, which
// may count the attempt twice (a tally errs on the side of its limit).
func (s *Store) AddTally(ctx context.Context, key string, expires time.Time) (int64, error) {
	const op = galleyerr.Op("dynamostore.AddTally")
	if key == "" {
		return 0, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	names := map[string]string{"#n": attrCounter, "#e": attrExpires, "#t": attrType, "#pk": attrPK}
	now := s.now().Unix()
	add := &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      keyOf("T#"+key, tallySK),
		UpdateExpression:         aws.String("ADD #n :one SET #t = :t, #e = if_not_exists(#e, :e)"),
		ConditionExpression:      aws.String("attribute_not_exists(#pk) OR #e > :now"),
		ExpressionAttributeNames: names,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": num(1), ":t": str(typeTally), ":e": num(expires.Unix()), ":now": num(now),
		},
		ReturnValues: types.ReturnValueUpdatedNew,
	}
	restart := &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      add.Key,
		UpdateExpression:         aws.String("SET #n = :one, #t = :t, #e = :e"),
		ConditionExpression:      aws.String("attribute_not_exists(#e) OR #e <= :now"),
		ExpressionAttributeNames: map[string]string{"#n": attrCounter, "#e": attrExpires, "#t": attrType},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": num(1), ":t": str(typeTally), ":e": num(expires.Unix()), ":now": num(now),
		},
		ReturnValues: types.ReturnValueUpdatedNew,
	}
	in := add
	conflicts, lost, turns := 0, 0, 0
	for {
		out, err := s.db.UpdateItem(ctx, in)
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			n, ok := getN(out.Attributes, attrCounter)
			if !ok || n < 1 {
				return 0, galleyerr.E(op, galleyerr.Other, "DynamoDB answered the tally's update without its count")
			}
			return n, nil
		case errors.As(err, &ccf):
			// The tally expired (the add's condition), or another
			// restarted it first (the restart's): try the other write.
			if turns++; turns > 4 {
				return 0, galleyerr.E(op, galleyerr.Unavailable, "the tally kept changing between its adds and restarts", err)
			}
			if in == add {
				in = restart
			} else {
				in = add
			}
			continue
		case isTxConflict(err) && conflicts < maxConflictRetries && ctx.Err() == nil:
			conflicts++
			s.sleep(ctx, conflicts)
			continue
		case classify(err) == unknown && lost < s.ambiguousRetries && ctx.Err() == nil:
			lost++
			s.sleep(ctx, lost)
			continue
		}
		return 0, mapErr(op, err, false)
	}
}
