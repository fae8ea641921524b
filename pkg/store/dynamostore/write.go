package dynamostore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// maxSeqAttempts bounds the attempts of one append under contention; each
// lost attempt means another append won, so the ledger moves on regardless.
const maxSeqAttempts = 500

// update builds the expression for f, naming every attribute through
// placeholders (some short names are DynamoDB reserved words).
type exprBuilder struct {
	names  map[string]string
	values map[string]types.AttributeValue
}

func newExpr() *exprBuilder {
	return &exprBuilder{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (e *exprBuilder) name(n string) string {
	p := "#" + n
	e.names[p] = n
	return p
}

func (e *exprBuilder) value(v types.AttributeValue) string {
	p := fmt.Sprintf(":v%d", len(e.values))
	e.values[p] = v
	return p
}

func (e *exprBuilder) update(f fields) string {
	var set, rem []string
	names := make([]string, 0, len(f.set))
	for n := range f.set {
		names = append(names, n)
	}
	sort.Strings(names) // a stable expression, so a resent write is identical
	for _, n := range names {
		set = append(set, e.name(n)+" = "+e.value(f.set[n]))
	}
	for _, n := range f.remove {
		if _, ok := f.set[n]; !ok {
			rem = append(rem, e.name(n))
		}
	}
	s := "SET " + strings.Join(set, ", ")
	if len(rem) > 0 {
		s += " REMOVE " + strings.Join(rem, ", ")
	}
	return s
}

// versionCond is the condition of a versioned write: the record is absent
// (prev is NoVersion) or still at the version the writer read.
func (e *exprBuilder) versionCond(prev store.Version) string {
	if prev == store.NoVersion {
		return "attribute_not_exists(" + e.name(attrVersion) + ")"
	}
	return e.name(attrVersion) + " = " + e.value(num(int64(prev)))
}

func (e *exprBuilder) namesOrNil() map[string]string {
	if len(e.names) == 0 {
		return nil
	}
	return e.names
}

func (e *exprBuilder) valuesOrNil() map[string]types.AttributeValue {
	if len(e.values) == 0 {
		return nil
	}
	return e.values
}

// putVersioned writes f to the item at key if its version is prev, making
// version prev+1. The condition is inside the UpdateItem: no read first.
func (s *Store) putVersioned(ctx context.Context, op galleyerr.Op, key map[string]types.AttributeValue, f fields, prev store.Version) (store.Version, error) {
	if prev < store.NoVersion {
		return 0, galleyerr.E(op, galleyerr.Conflict, "no record has a negative version")
	}
	next := prev + 1
	w := newWriteID()
	f.set[attrVersion] = num(int64(next))
	f.set[attrWriter] = str(w)
	if err := checkSize(op, f, key); err != nil {
		return 0, err
	}
	e := newExpr()
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 key,
		UpdateExpression:                    aws.String(e.update(f)),
		ConditionExpression:                 aws.String(e.versionCond(prev)),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()

	// uncertain: a try of this write may have been applied (a lost answer,
	// or the SDK sent a request again after a 500 or a reset).
	uncertain := false
	conflicts := 0
	for attempt := 0; ; attempt++ {
		var sent attempts
		_, err := s.db.UpdateItem(ctx, in, sent.option())
		if err == nil {
			return next, nil
		}
		uncertain = uncertain || sent.resent()
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// Always compared: the failure may be our own applied try's.
			return s.resolveVersioned(ctx, op, key, ccf.Item, w, next, uncertain)
		}
		if isTxConflict(err) && conflicts < maxConflictRetries && ctx.Err() == nil {
			// A transaction holds the item: refused, nothing applied.
			conflicts++
			attempt--
			s.sleep(ctx, conflicts)
			continue
		}
		if classify(err) == unknown {
			uncertain = true
		}
		if !uncertain || attempt >= s.ambiguousRetries || ctx.Err() != nil {
			return 0, mapErr(op, err, uncertain)
		}
		s.sleep(ctx, attempt)
	}
}

// maxConflictRetries bounds the resends of a plain write refused because a
// transaction held its item (TransactionConflictException), which DynamoDB
// answers while an append's transaction is in progress on the same item.
const maxConflictRetries = 8

func isTxConflict(err error) bool {
	var tce *types.TransactionConflictException
	var api smithy.APIError
	return errors.As(err, &tce) || errors.As(err, &api) && api.ErrorCode() == "TransactionConflictException"
}

// resolveVersioned decides a versioned write whose condition failed, from
// the item the failure returned (ALL_OLD) or, when it returned none after
// an uncertain try, from a read: the item this very write made (its
// version and write id) means a try was applied; anything else, a
// conflict, unless a try of ours may have been applied and overwritten
// since (uncertain), which nobody can tell.
func (s *Store) resolveVersioned(ctx context.Context, op galleyerr.Op, key, item map[string]types.AttributeValue, w string, next store.Version, uncertain bool) (store.Version, error) {
	if item == nil && uncertain {
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
		if err != nil {
			return 0, mapErr(op, err, true)
		}
		item = out.Item
	}
	v, _ := getN(item, attrVersion)
	switch {
	case item != nil && store.Version(v) == next && getS(item, attrWriter) == w:
		return next, nil // our (first) try was applied
	case uncertain && store.Version(v) > next:
		// Ours may have been applied and then overwritten: no telling.
		return 0, galleyerr.E(op, galleyerr.Unavailable, "DynamoDB did not answer and the record moved on; the write may or may not have happened")
	}
	// Another writer holds the version we asked for (or the record is
	// behind it): ours was never applied, and never will be.
	return 0, galleyerr.E(op, galleyerr.Conflict, "the record changed since it was read")
}

// seqWrite is one write that takes the next number of a counter in the same
// transaction: an appended message or inbox item (its sequence), a created
// resource (its creation ordinal).
type seqWrite struct {
	op      galleyerr.Op
	counter map[string]types.AttributeValue // the counter item's key
	// item returns the item to put for number n, with its key and w set.
	item func(n int64) (map[string]types.AttributeValue, error)
	// key returns the key of the item put for number n.
	key func(n int64) map[string]types.AttributeValue
	// keyTaken, when set, is the answer when the item exists already: a
	// resource's key is taken. When nil the item's key depends on n, and
	// the counter guarantees it is free.
	keyTaken error
	// once, when set, makes the write idempotent by an identity (a
	// message's id): see onceWrite.
	once *onceWrite
}

// onceWrite is a third item of the transaction, put only if absent (or
// expired), that names the number the write took. When it exists, the
// identity was appended before and its number is the answer: an earlier
// try of this very write whose answer was lost (its write id is ours), or
// another write of the same identity.
type onceWrite struct {
	key  map[string]types.AttributeValue
	item func(n int64) map[string]types.AttributeValue // with key, w and n
	now  int64                                         // epoch seconds: an item expired by then is free
}

// allocate runs the transaction {counter: n-1 → n; put item if absent
// [; put once-item if absent]}, retrying with the counter's new value while
// other writers win, and returns n. The counter and the item move together
// or not at all, so item n is visible only once items 1..n-1 are, and a try
// that lost the counter can never be applied later. existed says that the
// once-item named an earlier write's n: nothing was written.
func (s *Store) allocate(ctx context.Context, sw seqWrite, w string) (n int64, existed bool, err error) {
	lockKey := getS(sw.counter, attrPK) + "\x00" + getS(sw.counter, attrSK)
	l, err := s.counters.lock(ctx, lockKey)
	if err != nil {
		return 0, false, mapErr(sw.op, err, false)
	}
	defer s.counters.unlock(lockKey, l)
	n, existed, err = s.allocateLocked(ctx, sw, w, l.last, l.known)
	// A repeat's n is not the counter's value: read it next time.
	l.last, l.known = n, err == nil && !existed
	return n, existed, err
}

func (s *Store) allocateLocked(ctx context.Context, sw seqWrite, w string, obs int64, known bool) (int64, bool, error) {
	// pending is the number a try with a lost answer asked for, or -1:
	// that try may have been applied.
	var pending int64 = -1
	for attempt := 0; attempt < maxSeqAttempts; attempt++ {
		if !known {
			var err error
			if obs, err = s.readCounter(ctx, sw.counter); err != nil {
				return 0, false, mapErr(sw.op, err, pending >= 0)
			}
		}
		known = false
		if pending >= 0 && obs+1 != pending {
			// The counter passed pending-1, so number pending went to a
			// committed item: ours, or another's and ours is dead.
			n, done, err := s.resolvePending(ctx, sw, w, pending)
			if done || err != nil {
				return n, false, err
			}
			pending = -1
		}
		n := obs + 1
		in, err := s.seqTransaction(sw, w, obs, n)
		if err != nil {
			return 0, false, err
		}
		for try := 0; ; try++ {
			var sent attempts
			_, err = s.db.TransactWriteItems(ctx, in, sent.option())
			if sent.resent() {
				// The SDK sent it again after a 500 or a reset: the
				// first may have been applied, and its resend may answer
				// a cancellation for the counter it moved.
				pending = n
			}
			if err == nil || classify(err) != unknown {
				break
			}
			pending = n
			if try >= s.ambiguousRetries || ctx.Err() != nil {
				return 0, false, mapErr(sw.op, err, true)
			}
			s.sleep(ctx, try)
		}
		if err == nil {
			return n, false, nil
		}
		tce, codes := reasonCodes(err)
		if tce == nil && isTxConflict(err) {
			s.sleep(ctx, min(attempt, 4))
			continue
		}
		if tce == nil || len(codes) != len(in.TransactItems) {
			return 0, false, mapErr(sw.op, err, pending >= 0)
		}
		// Cancelled: nothing of this try was applied.
		switch {
		case sw.once != nil && codes[2] == "ConditionalCheckFailed":
			// Checked first: DynamoDB may report the counter's failure
			// too, and the identity's answer holds whatever the counter.
			n, existed, ok, err := s.resolveOnce(ctx, sw, w, tce.CancellationReasons[2].Item, pending >= 0)
			if ok || err != nil {
				return n, existed, err
			}
			// No item to answer (an injected cancellation, or expired
			// and deleted since): try again.
		case codes[1] == "ConditionalCheckFailed" && sw.keyTaken != nil:
			// The resource exists: created by an earlier try of ours
			// whose answer was lost, or by another writer.
			if pending >= 0 {
				n, done, err := s.resolvePending(ctx, sw, w, pending)
				if done || err != nil {
					return n, false, err
				}
			}
			return 0, false, sw.keyTaken
		case codes[0] == "ConditionalCheckFailed":
			// Another write took n: carry on from the counter it left.
			if v, ok := getN(tce.CancellationReasons[0].Item, attrCounter); ok && v > obs {
				obs, known = v, true
			}
		case slices.Contains(codes, "TransactionConflict"):
			s.sleep(ctx, min(attempt, 4))
		default:
			// Throttling and the like, reported per item.
			return 0, false, mapErr(sw.op, errors.Join(err, errCancelled(codes)), pending >= 0)
		}
		if ctx.Err() != nil {
			return 0, false, mapErr(sw.op, ctx.Err(), pending >= 0)
		}
	}
	return 0, false, galleyerr.E(sw.op, galleyerr.Unavailable, fmt.Sprintf("no sequence number after %d attempts under contention", maxSeqAttempts))
}

// resolveOnce answers a write whose once-item exists (item, as the
// cancellation returned it, or read again when it did not): the number it
// names, and whether another write made it (existed) rather than an earlier
// try of this one whose answer was lost. Not ok: there is no such item, and
// the write may try again. Expiry is judged by the clock the condition
// used, so that the answer and the condition never disagree.
func (s *Store) resolveOnce(ctx context.Context, sw seqWrite, w string, item map[string]types.AttributeValue, uncertain bool) (n int64, existed, ok bool, err error) {
	if item == nil {
		if item, err = s.getItem(ctx, sw.once.key); err != nil {
			return 0, false, false, mapErr(sw.op, err, uncertain)
		}
		if item == nil || expired(item, time.Unix(sw.once.now, 0)) {
			return 0, false, false, nil
		}
	}
	n, found := getN(item, attrSeq)
	if !found || n < 1 {
		return 0, false, false, corrupt(sw.op, fmt.Errorf("item %s/%s names no sequence", getS(item, attrPK), getS(item, attrSK)))
	}
	return n, getS(item, attrWriter) != w, true, nil
}

type errCancelled []string

func (e errCancelled) Error() string { return "cancellation reasons: " + strings.Join(e, ",") }

// resolvePending reads the item that a try with a lost answer asked for.
// done with n: that try was applied. Not done: it was not and never will be.
func (s *Store) resolvePending(ctx context.Context, sw seqWrite, w string, pending int64) (n int64, done bool, err error) {
	it, err := s.getItem(ctx, sw.key(pending))
	if err != nil {
		return 0, false, mapErr(sw.op, err, true)
	}
	switch {
	case it != nil && getS(it, attrWriter) == w:
		return pending, true, nil
	case it != nil && sw.keyTaken != nil:
		return 0, false, sw.keyTaken
	}
	return 0, false, nil
}

func (s *Store) seqTransaction(sw seqWrite, w string, obs, n int64) (*dynamodb.TransactWriteItemsInput, error) {
	item, err := sw.item(n)
	if err != nil {
		return nil, err
	}
	e := newExpr()
	cond := "attribute_not_exists(" + e.name(attrCounter) + ")"
	if obs > 0 {
		cond = e.name(attrCounter) + " = " + e.value(num(obs))
	}
	upd := "SET " + e.name(attrCounter) + " = " + e.value(num(n)) + ", " + e.name(attrType) + " = " + e.value(str(typeCounter))
	pe := newExpr()
	in := &dynamodb.TransactWriteItemsInput{
		// The same token on a resend makes DynamoDB answer a repeat of an
		// applied transaction with success instead of applying it again.
		ClientRequestToken: aws.String(requestToken(w, n)),
		TransactItems: []types.TransactWriteItem{
			{Update: &types.Update{
				TableName:                           aws.String(s.table),
				Key:                                 sw.counter,
				UpdateExpression:                    aws.String(upd),
				ConditionExpression:                 aws.String(cond),
				ExpressionAttributeNames:            e.namesOrNil(),
				ExpressionAttributeValues:           e.valuesOrNil(),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}},
			{Put: &types.Put{
				TableName:                aws.String(s.table),
				Item:                     item,
				ConditionExpression:      aws.String("attribute_not_exists(" + pe.name(attrPK) + ")"),
				ExpressionAttributeNames: pe.namesOrNil(),
			}},
		},
	}
	if o := sw.once; o != nil {
		// Absent, or expired but not yet deleted by DynamoDB: the store
		// forgets an id when its message expires.
		oe := newExpr()
		cond := "attribute_not_exists(" + oe.name(attrPK) + ") OR " + oe.name(attrExpires) + " <= " + oe.value(num(o.now))
		in.TransactItems = append(in.TransactItems, types.TransactWriteItem{Put: &types.Put{
			TableName:                           aws.String(s.table),
			Item:                                o.item(n),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            oe.namesOrNil(),
			ExpressionAttributeValues:           oe.valuesOrNil(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}})
	}
	return in, nil
}

func requestToken(w string, n int64) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", w, n))
	return hex.EncodeToString(h[:16])
}

func (s *Store) readCounter(ctx context.Context, key map[string]types.AttributeValue) (int64, error) {
	item, err := s.getItem(ctx, key)
	if err != nil {
		return 0, err
	}
	n, _ := getN(item, attrCounter)
	return n, nil
}

func (s *Store) getItem(ctx context.Context, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// sleep backs off with full jitter, or returns early when ctx ends.
func (s *Store) sleep(ctx context.Context, attempt int) {
	d := s.backoff << min(attempt, 6)
	if d <= 0 {
		return
	}
	t := time.NewTimer(rand.N(d) + d/4)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
