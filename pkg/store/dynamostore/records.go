package dynamostore

import (
	"context"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// get reads one item with a strongly consistent read. A missing or expired
// item is nil.
func (s *Store) get(ctx context.Context, op galleyerr.Op, key map[string]types.AttributeValue) (map[string]types.AttributeValue, store.Version, error) {
	item, err := s.getItem(ctx, key)
	if err != nil {
		return nil, 0, mapErr(op, err, false)
	}
	if item == nil || expired(item, s.now()) {
		return nil, store.NoVersion, nil
	}
	v, _ := getN(item, attrVersion)
	return item, store.Version(v), nil
}

func corrupt(op galleyerr.Op, err error) error {
	return galleyerr.E(op, galleyerr.Other, "a stored record does not decode", err)
}

// GetEffect reads an effect claim.
func (s *Store) GetEffect(ctx context.Context, key string) (store.Effect, store.Version, error) {
	const op = galleyerr.Op("dynamostore.GetEffect")
	item, v, err := s.get(ctx, op, effectKey(key))
	if err != nil {
		return store.Effect{}, 0, err
	}
	if item == nil {
		return store.Effect{}, store.NoVersion, galleyerr.E(op, galleyerr.NotFound, "no effect with that key")
	}
	e, err := decodeEffect(item)
	if err != nil {
		return store.Effect{}, 0, corrupt(op, err)
	}
	return e, v, nil
}

// PutEffect writes e if its stored version is prev.
func (s *Store) PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("dynamostore.PutEffect")
	f, err := effectFields(e)
	if err != nil {
		return 0, galleyerr.E(op, galleyerr.Other, err)
	}
	return s.putVersioned(ctx, op, effectKey(e.Key), f, prev)
}

// GetResource reads one resource.
func (s *Store) GetResource(ctx context.Context, kind, handle string) (store.Resource, store.Version, error) {
	const op = galleyerr.Op("dynamostore.GetResource")
	if err := checkKind(op, kind); err != nil {
		return store.Resource{}, 0, galleyerr.E(op, galleyerr.NotFound, err)
	}
	item, v, err := s.get(ctx, op, resourceKey(kind, handle))
	if err != nil {
		return store.Resource{}, 0, err
	}
	if item == nil {
		return store.Resource{}, store.NoVersion, galleyerr.E(op, galleyerr.NotFound, "no such resource")
	}
	var r store.Resource
	if err := decodeDoc(item, &r); err != nil {
		return store.Resource{}, 0, corrupt(op, err)
	}
	return r, v, nil
}

// PutResource creates r (prev NoVersion) or updates it. A creation takes the
// next creation ordinal in the same transaction, which is what
// ListResources orders by.
func (s *Store) PutResource(ctx context.Context, r store.Resource, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("dynamostore.PutResource")
	if err := checkKind(op, r.Kind); err != nil {
		return 0, err
	}
	key := resourceKey(r.Kind, r.Handle)
	if prev != store.NoVersion {
		f, err := docFields(typeResource, r)
		if err != nil {
			return 0, galleyerr.E(op, galleyerr.Other, err)
		}
		return s.putVersioned(ctx, op, key, f, prev)
	}
	w := newWriteID()
	_, _, err := s.allocate(ctx, seqWrite{
		op:      op,
		counter: keyOf(resourcesPK, counterSK),
		key:     func(int64) map[string]types.AttributeValue { return key },
		item: func(n int64) (map[string]types.AttributeValue, error) {
			f, err := docFields(typeResource, r)
			if err != nil {
				return nil, galleyerr.E(op, galleyerr.Other, err)
			}
			f.set[attrOrdinal] = num(n)
			f.set[attrVersion] = num(1)
			f.set[attrWriter] = str(w)
			return s.fullItem(op, key, f)
		},
		keyTaken: galleyerr.E(op, galleyerr.Conflict, "a resource of that kind and handle exists"),
	}, w)
	if err != nil {
		return 0, err
	}
	return 1, nil
}

// fullItem is f's attributes with the key, for a Put.
func (s *Store) fullItem(op galleyerr.Op, key map[string]types.AttributeValue, f fields) (map[string]types.AttributeValue, error) {
	if err := checkSize(op, f, key); err != nil {
		return nil, err
	}
	item := make(map[string]types.AttributeValue, len(f.set)+len(key))
	for k, v := range f.set {
		item[k] = v
	}
	for k, v := range key {
		item[k] = v
	}
	return item, nil
}

// ListResources lists every resource in creation order.
func (s *Store) ListResources(ctx context.Context) ([]store.Resource, error) {
	const op = galleyerr.Op("dynamostore.ListResources")
	type ordered struct {
		o int64
		r store.Resource
	}
	var all []ordered
	err := s.query(ctx, op, resourcesPK, "R#", "R$", 0, func(item map[string]types.AttributeValue) error {
		var r store.Resource
		if err := decodeDoc(item, &r); err != nil {
			return corrupt(op, err)
		}
		o, _ := getN(item, attrOrdinal)
		all = append(all, ordered{o, r})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].o < all[j].o })
	out := make([]store.Resource, len(all))
	for i := range all {
		out[i] = all[i].r
	}
	return out, nil
}

// GetMailbox reads a run's mailbox head, or a zero head with NoVersion.
func (s *Store) GetMailbox(ctx context.Context, run string) (store.Mailbox, store.Version, error) {
	const op = galleyerr.Op("dynamostore.GetMailbox")
	item, v, err := s.get(ctx, op, headKey(run))
	if err != nil {
		return store.Mailbox{}, 0, err
	}
	if item == nil {
		return store.Mailbox{Run: run}, store.NoVersion, nil
	}
	var m store.Mailbox
	if err := decodeDoc(item, &m); err != nil {
		return store.Mailbox{}, 0, corrupt(op, err)
	}
	return m, v, nil
}

// PutMailbox writes a run's head if its stored version is prev. The head is
// its own item, apart from the sequence counter, so appends never move it.
func (s *Store) PutMailbox(ctx context.Context, m store.Mailbox, prev store.Version) (store.Version, error) {
	const op = galleyerr.Op("dynamostore.PutMailbox")
	f, err := docFields(typeHead, m)
	if err != nil {
		return 0, galleyerr.E(op, galleyerr.Other, err)
	}
	return s.putVersioned(ctx, op, headKey(m.Run), f, prev)
}

// AppendMessage stores m as the run's next message and returns its
// sequence, unless a message with m's id is in the run already: then it
// appends nothing and answers that message's sequence (see
// store.Mailboxes). The id's item (pk M#<run>, sk x#<id>) names the
// sequence it took; it is put, if absent or expired, in the append's
// transaction, and expires with the message.
func (s *Store) AppendMessage(ctx context.Context, run string, m store.Message) (int64, bool, error) {
	const op = galleyerr.Op("dynamostore.AppendMessage")
	pk := runPK(run)
	var once map[string]types.AttributeValue
	if m.Row.ID != "" {
		once = keyOf(pk, messageIDSK(m.Row.ID))
	}
	return s.appendSeq(ctx, op, pk, typeMessage, messageSK, once, func(n int64) any {
		m.Seq = n
		return m
	})
}

// AppendInbox stores item as the worker's next inbox item and returns its
// sequence.
func (s *Store) AppendInbox(ctx context.Context, worker string, it store.InboxItem) (int64, error) {
	const op = galleyerr.Op("dynamostore.AppendInbox")
	n, _, err := s.appendSeq(ctx, op, inboxPK(worker), typeInbox, inboxItemSK, nil, func(n int64) any {
		it.Seq = n
		return it
	})
	return n, err
}

// appendSeq appends the item withSeq makes to ledger pk. With onceKey set,
// the item at onceKey decides whether it was appended before (see
// seqWrite.once).
func (s *Store) appendSeq(ctx context.Context, op galleyerr.Op, pk, typ string, sk func(int64) string,
	onceKey map[string]types.AttributeValue, withSeq func(int64) any) (int64, bool, error) {
	w := newWriteID()
	now := s.now()
	var exp int64
	if s.retention > 0 {
		exp = now.Add(s.retention).Unix()
	}
	sw := seqWrite{
		op:      op,
		counter: keyOf(pk, counterSK),
		key:     func(n int64) map[string]types.AttributeValue { return keyOf(pk, sk(n)) },
		item: func(n int64) (map[string]types.AttributeValue, error) {
			f, err := docFields(typ, withSeq(n))
			if err != nil {
				return nil, galleyerr.E(op, galleyerr.Other, err)
			}
			f.set[attrWriter] = str(w)
			if exp > 0 {
				f.set[attrExpires] = num(exp)
			}
			return s.fullItem(op, keyOf(pk, sk(n)), f)
		},
	}
	if onceKey != nil {
		sw.once = &onceWrite{
			key: onceKey,
			item: func(n int64) map[string]types.AttributeValue {
				item := map[string]types.AttributeValue{attrType: str(typeMsgID), attrSeq: num(n), attrWriter: str(w)}
				if exp > 0 {
					item[attrExpires] = num(exp)
				}
				for k, v := range onceKey {
					item[k] = v
				}
				return item
			},
			// Fixed for the whole call, so that a resent transaction is
			// identical to the first try.
			now: now.Unix(),
		}
	}
	return s.allocate(ctx, sw, w)
}

// ListMessages returns up to limit (all when limit <= 0) messages of run
// after sequence after, in order.
func (s *Store) ListMessages(ctx context.Context, run string, after int64, limit int) ([]store.Message, error) {
	const op = galleyerr.Op("dynamostore.ListMessages")
	var out []store.Message
	err := s.query(ctx, op, runPK(run), messageSK(max(after, 0)+1), "m$", limit, func(item map[string]types.AttributeValue) error {
		var m store.Message
		if err := decodeDoc(item, &m); err != nil {
			return corrupt(op, err)
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

// ListInbox returns the worker's inbox items after sequence after, in order.
func (s *Store) ListInbox(ctx context.Context, worker string, after int64, limit int) ([]store.InboxItem, error) {
	const op = galleyerr.Op("dynamostore.ListInbox")
	var out []store.InboxItem
	err := s.query(ctx, op, inboxPK(worker), inboxItemSK(max(after, 0)+1), "i$", limit, func(item map[string]types.AttributeValue) error {
		var it store.InboxItem
		if err := decodeDoc(item, &it); err != nil {
			return corrupt(op, err)
		}
		out = append(out, it)
		return nil
	})
	return out, err
}

// query reads the items of partition pk with from <= sk < to, in sort key
// order, strongly consistent, page after page, skipping expired items, until
// limit items (all when limit <= 0) went to fn.
func (s *Store) query(ctx context.Context, op galleyerr.Op, pk, from, to string, limit int, fn func(map[string]types.AttributeValue) error) error {
	e := newExpr()
	in := &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		ConsistentRead:         aws.Bool(true),
		KeyConditionExpression: aws.String(e.name(attrPK) + " = " + e.value(str(pk)) + " AND " + e.name(attrSK) + " BETWEEN " + e.value(str(from)) + " AND " + e.value(str(to))),
	}
	in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.namesOrNil(), e.valuesOrNil()
	n := 0
	now := s.now()
	for {
		if limit > 0 {
			in.Limit = aws.Int32(int32(min(limit-n, 1000)))
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return mapErr(op, err, false)
		}
		for _, item := range out.Items {
			if getS(item, attrSK) == to || expired(item, now) {
				continue
			}
			if err := fn(item); err != nil {
				return err
			}
			n++
			if limit > 0 && n >= limit {
				return nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}
