// Package memstore is an in-memory store.Store for unit tests and
// single-process experiments: one mutex, plain maps, and deep copies in and
// out so that no caller can alias what is stored. It keeps nothing across a
// restart. It passes storetest.
package memstore

import (
	"context"
	"slices"
	"sync"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// Store is an in-memory store. The zero value is not usable; call New.
type Store struct {
	mu        sync.RWMutex
	closed    bool
	effects   map[string]versioned[store.Effect]
	resources map[resourceKey]versioned[store.Resource]
	order     []resourceKey // creation order
	mailboxes map[string]versioned[store.Mailbox]
	messages  map[string][]store.Message   // messages[run][seq-1]
	msgIDs    map[msgKey]int64             // a message's sequence by run and row id
	inboxes   map[string][]store.InboxItem // inboxes[worker][seq-1]
	counters  map[string]int64
	events    map[string]*eventLog
	nonces    expiring[struct{}]
	sessions  expiring[store.Session]
	tallies   expiring[int64]
}

type versioned[T any] struct {
	rec T
	v   store.Version
}

type resourceKey struct{ kind, handle string }

type msgKey struct{ run, id string }

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		effects:   map[string]versioned[store.Effect]{},
		resources: map[resourceKey]versioned[store.Resource]{},
		mailboxes: map[string]versioned[store.Mailbox]{},
		messages:  map[string][]store.Message{},
		msgIDs:    map[msgKey]int64{},
		inboxes:   map[string][]store.InboxItem{},
		counters:  map[string]int64{},
		events:    map[string]*eventLog{},
	}
}

// Close makes every later call fail with Unavailable, as a closed durable
// store would. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// check answers the error due before any work: a done context, a closed
// store, an empty key.
func (s *Store) check(ctx context.Context, op string, keys ...string) error {
	if err := ctx.Err(); err != nil {
		return galleyerr.E(galleyerr.Op(op), galleyerr.Unavailable, err)
	}
	if s.closed {
		return galleyerr.E(galleyerr.Op(op), galleyerr.Unavailable, "store closed")
	}
	for _, k := range keys {
		if k == "" {
			return galleyerr.E(galleyerr.Op(op), galleyerr.Invalid, "empty key")
		}
	}
	return nil
}

// cas checks a conditional write of a record currently at cur (present says
// whether it exists) against prev.
func cas(op string, present bool, cur, prev store.Version) error {
	switch {
	case !present && prev != store.NoVersion:
		return galleyerr.E(galleyerr.Op(op), galleyerr.Conflict, "record does not exist")
	case present && cur != prev:
		return galleyerr.E(galleyerr.Op(op), galleyerr.Conflict, "record changed")
	}
	return nil
}

func (s *Store) GetEffect(ctx context.Context, key string) (store.Effect, store.Version, error) {
	const op = "memstore.GetEffect"
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, op, key); err != nil {
		return store.Effect{}, store.NoVersion, err
	}
	r, ok := s.effects[key]
	if !ok {
		return store.Effect{}, store.NoVersion, galleyerr.E(galleyerr.Op(op), galleyerr.NotFound, "no such effect")
	}
	return clone(r.rec), r.v, nil
}

func (s *Store) PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error) {
	const op = "memstore.PutEffect"
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, op, e.Key); err != nil {
		return store.NoVersion, err
	}
	cur, ok := s.effects[e.Key]
	if err := cas(op, ok, cur.v, prev); err != nil {
		return store.NoVersion, err
	}
	s.effects[e.Key] = versioned[store.Effect]{clone(e), prev + 1}
	return prev + 1, nil
}

func (s *Store) GetResource(ctx context.Context, kind, handle string) (store.Resource, store.Version, error) {
	const op = "memstore.GetResource"
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, op, kind, handle); err != nil {
		return store.Resource{}, store.NoVersion, err
	}
	r, ok := s.resources[resourceKey{kind, handle}]
	if !ok {
		return store.Resource{}, store.NoVersion, galleyerr.E(galleyerr.Op(op), galleyerr.NotFound, "no such resource")
	}
	return clone(r.rec), r.v, nil
}

func (s *Store) PutResource(ctx context.Context, r store.Resource, prev store.Version) (store.Version, error) {
	const op = "memstore.PutResource"
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, op, r.Kind, r.Handle); err != nil {
		return store.NoVersion, err
	}
	k := resourceKey{r.Kind, r.Handle}
	cur, ok := s.resources[k]
	if err := cas(op, ok, cur.v, prev); err != nil {
		return store.NoVersion, err
	}
	if !ok {
		s.order = append(s.order, k)
	}
	s.resources[k] = versioned[store.Resource]{clone(r), prev + 1}
	return prev + 1, nil
}

func (s *Store) ListResources(ctx context.Context) ([]store.Resource, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.ListResources"); err != nil {
		return nil, err
	}
	out := make([]store.Resource, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, clone(s.resources[k].rec))
	}
	return out, nil
}

func (s *Store) GetMailbox(ctx context.Context, run string) (store.Mailbox, store.Version, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.GetMailbox", run); err != nil {
		return store.Mailbox{}, store.NoVersion, err
	}
	r, ok := s.mailboxes[run]
	if !ok {
		return store.Mailbox{Run: run}, store.NoVersion, nil
	}
	return clone(r.rec), r.v, nil
}

func (s *Store) PutMailbox(ctx context.Context, m store.Mailbox, prev store.Version) (store.Version, error) {
	const op = "memstore.PutMailbox"
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, op, m.Run); err != nil {
		return store.NoVersion, err
	}
	cur, ok := s.mailboxes[m.Run]
	if err := cas(op, ok, cur.v, prev); err != nil {
		return store.NoVersion, err
	}
	s.mailboxes[m.Run] = versioned[store.Mailbox]{clone(m), prev + 1}
	return prev + 1, nil
}

// AppendMessage appends m unless a message with its id is in the run
// already (see store.Mailboxes).
func (s *Store) AppendMessage(ctx context.Context, run string, m store.Message) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.AppendMessage", run); err != nil {
		return 0, false, err
	}
	k := msgKey{run, m.Row.ID}
	if seq, ok := s.msgIDs[k]; ok && k.id != "" {
		return seq, true, nil
	}
	m = clone(m)
	m.Seq = int64(len(s.messages[run]) + 1)
	s.messages[run] = append(s.messages[run], m)
	if k.id != "" {
		s.msgIDs[k] = m.Seq
	}
	return m.Seq, false, nil
}

func (s *Store) ListMessages(ctx context.Context, run string, after int64, limit int) ([]store.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.ListMessages", run); err != nil {
		return nil, err
	}
	return tail(s.messages[run], after, limit), nil
}

func (s *Store) AppendInbox(ctx context.Context, worker string, item store.InboxItem) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.AppendInbox", worker); err != nil {
		return 0, err
	}
	item = clone(item)
	item.Seq = int64(len(s.inboxes[worker]) + 1)
	s.inboxes[worker] = append(s.inboxes[worker], item)
	return item.Seq, nil
}

func (s *Store) NextCount(ctx context.Context, name string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.NextCount", name); err != nil {
		return 0, err
	}
	s.counters[name]++
	return s.counters[name], nil
}

func (s *Store) ListInbox(ctx context.Context, worker string, after int64, limit int) ([]store.InboxItem, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.ListInbox", worker); err != nil {
		return nil, err
	}
	return tail(s.inboxes[worker], after, limit), nil
}

// tail copies up to limit (all if limit <= 0) items of a ledger whose item
// i has sequence i+1, starting after sequence after.
func tail[T any](ledger []T, after int64, limit int) []T {
	after = max(after, 0)
	if after >= int64(len(ledger)) {
		return nil
	}
	rest := ledger[after:]
	if limit > 0 && len(rest) > limit {
		rest = rest[:limit]
	}
	out := slices.Clone(rest)
	for i := range out {
		out[i] = clone(out[i])
	}
	return out
}
