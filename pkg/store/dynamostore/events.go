package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// A worker's event log is the items of partition V#<worker>, sort key
// e#<seq> (zero-padded), each put by a conditional write on its absence:
// the next sequence is the latest item's plus one, so two writers of one
// worker (two Lambda instances) cannot both take one number, and the loser
// reads the latest and takes the next. No counter item and no transaction:
// an event costs one write unit. Every event carries a TTL (expires,
// WithEventRetention), and the appender drops the events below the bound,
// oldest first, so those retained are always one unbroken run.

const typeEvent = "event"

// DefaultEventRetention is how long an event lives (its TTL).
const DefaultEventRetention = 30 * 24 * time.Hour

// WithEventRetention sets the TTL of worker events (default
// DefaultEventRetention).
func WithEventRetention(d time.Duration) Option { return func(s *Store) { s.eventRetention = d } }

func eventsPK(worker string) string { return "V#" + worker }
func eventSK(seq int64) string      { return fmt.Sprintf("e#%0*d", seqDigits, seq) }

// eventCursors remembers each worker's latest event number this process
// saw, so that an append usually costs its put alone. A stale number only
// costs a failed condition and a read.
type eventCursors struct {
	mu   sync.Mutex
	last map[string]int64
}

func (c *eventCursors) get(worker string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.last[worker]
	return n, ok
}

func (c *eventCursors) set(worker string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || len(c.last) > 4096 {
		c.last = map[string]int64{}
	}
	c.last[worker] = max(c.last[worker], n)
}

var _ store.EventLog = (*Store)(nil)

// AppendEvent implements store.EventLog.
func (s *Store) AppendEvent(ctx context.Context, worker string, e store.Event) (int64, error) {
	const op = galleyerr.Op("dynamostore.AppendEvent")
	if worker == "" {
		return 0, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	pk := eventsPK(worker)
	w := newWriteID()
	ret := s.eventRetention
	if ret <= 0 {
		ret = DefaultEventRetention
	}
	exp := s.now().Add(ret).Unix()
	last, known := s.eventLast.get(worker)
	if !known {
		var err error
		if last, err = s.lastEvent(ctx, op, pk); err != nil {
			return 0, err
		}
	}
	for range maxSeqAttempts {
		e.Seq = last + 1
		body, err := store.EncodeEvent(op, e)
		if err != nil {
			return 0, err
		}
		put, err := s.putEvent(ctx, op, pk, e.Seq, string(body), w, exp)
		if err != nil {
			return 0, err
		}
		if put {
			s.eventLast.set(worker, e.Seq)
			s.trimEvents(ctx, pk, e.Seq)
			return e.Seq, nil
		}
		// Another writer has this number: take the one after the latest.
		latest, err := s.lastEvent(ctx, op, pk)
		if err != nil {
			return 0, err
		}
		last = max(latest, e.Seq)
	}
	return 0, galleyerr.E(op, galleyerr.Unavailable, "too much contention on the worker's event log")
}

// putEvent puts event seq if no item has its key, and answers whether it
// did. A put resent after a lost answer that then finds the key taken was
// applied if the item carries this write's id.
func (s *Store) putEvent(ctx context.Context, op galleyerr.Op, pk string, seq int64, doc, w string, exp int64) (bool, error) {
	key := keyOf(pk, eventSK(seq))
	e := newExpr()
	f := fields{set: map[string]types.AttributeValue{attrType: str(typeEvent), attrDoc: str(doc), attrWriter: str(w), attrExpires: num(exp)}}
	in := &dynamodb.UpdateItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 key,
		UpdateExpression:                    aws.String(e.update(f)),
		ConditionExpression:                 aws.String("attribute_not_exists(" + e.name(attrPK) + ")"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	uncertain := false
	for attempt := 0; ; attempt++ {
		_, err := s.db.UpdateItem(ctx, in)
		if err == nil {
			return true, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			if !uncertain {
				return false, nil
			}
			// The condition fails only on a live item, which ALL_OLD returns.
			return getS(ccf.Item, attrWriter) == w, nil
		}
		if classify(err) == unknown {
			uncertain = true
		}
		if attempt >= s.ambiguousRetries || ctx.Err() != nil {
			return false, mapErr(op, err, uncertain)
		}
		s.sleep(ctx, attempt)
	}
}

// lastEvent answers the worker's latest event number (0 when it has none),
// expired items included: a number is never given twice.
func (s *Store) lastEvent(ctx context.Context, op galleyerr.Op, pk string) (int64, error) {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		ConsistentRead:         aws.Bool(true),
		ScanIndexForward:       aws.Bool(false),
		Limit:                  aws.Int32(1),
		ProjectionExpression:   aws.String(e.name(attrSK)),
		KeyConditionExpression: aws.String(e.name(attrPK) + " = " + e.value(str(pk)) + " AND " + e.name(attrSK) + " BETWEEN " + e.value(str(eventSK(0))) + " AND " + e.value(str("e$"))),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return 0, mapErr(op, err, false)
	}
	if len(out.Items) == 0 {
		return 0, nil
	}
	return parseEventSK(op, getS(out.Items[0], attrSK))
}

func parseEventSK(op galleyerr.Op, sk string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(sk, "e#"), 10, 64)
	if err != nil || !strings.HasPrefix(sk, "e#") {
		return 0, corrupt(op, fmt.Errorf("event sort key %q", sk))
	}
	return n, nil
}

// trimEvents drops the worker's events numbered latest-MaxEvents and
// below, oldest first, stopping at the first failure, so what remains is
// always an unbroken run; whatever one append leaves, the next finds (the
// query looks at the whole range below the bound). Best effort: a failure
// here costs storage until the TTL, never the append.
func (s *Store) trimEvents(ctx context.Context, pk string, latest int64) {
	if latest <= store.MaxEvents {
		return
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		ConsistentRead:         aws.Bool(true),
		Limit:                  aws.Int32(16),
		ProjectionExpression:   aws.String(e.name(attrPK) + ", " + e.name(attrSK)),
		KeyConditionExpression: aws.String(e.name(attrPK) + " = " + e.value(str(pk)) + " AND " + e.name(attrSK) + " BETWEEN " + e.value(str(eventSK(0))) + " AND " + e.value(str(eventSK(latest-store.MaxEvents)))),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return
	}
	for _, item := range out.Items {
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table),
			Key: map[string]types.AttributeValue{attrPK: item[attrPK], attrSK: item[attrSK]}})
		if err != nil {
			return
		}
	}
}

// LastEvent implements store.EventLog: one query, newest first, that
// skips an expired item.
func (s *Store) LastEvent(ctx context.Context, worker string) (store.Event, bool, error) {
	const op = galleyerr.Op("dynamostore.LastEvent")
	if worker == "" {
		return store.Event{}, false, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		ConsistentRead:         aws.Bool(true),
		ScanIndexForward:       aws.Bool(false),
		Limit:                  aws.Int32(1),
		KeyConditionExpression: aws.String(e.name(attrPK) + " = " + e.value(str(eventsPK(worker))) + " AND " + e.name(attrSK) + " BETWEEN " + e.value(str(eventSK(0))) + " AND " + e.value(str("e$"))),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	out, err := s.db.Query(ctx, in)
	if err != nil {
		return store.Event{}, false, mapErr(op, err, false)
	}
	if len(out.Items) == 0 || expired(out.Items[0], s.now()) {
		return store.Event{}, false, nil
	}
	var ev store.Event
	if err := decodeDoc(out.Items[0], &ev); err != nil {
		return store.Event{}, false, corrupt(op, err)
	}
	return ev, true, nil
}

// ListEvents implements store.EventLog.
func (s *Store) ListEvents(ctx context.Context, worker string, after int64, limit int) ([]store.Event, error) {
	const op = galleyerr.Op("dynamostore.ListEvents")
	if worker == "" {
		return nil, galleyerr.E(op, galleyerr.Invalid, "empty key")
	}
	var out []store.Event
	err := s.query(ctx, op, eventsPK(worker), eventSK(max(after, 0)+1), "e$", limit, func(item map[string]types.AttributeValue) error {
		var ev store.Event
		if err := decodeDoc(item, &ev); err != nil {
			return corrupt(op, err)
		}
		out = append(out, ev)
		return nil
	})
	return out, err
}
