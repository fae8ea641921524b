package memstore

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// expiring is a map whose entries expire: a nonce, a session, a tally.
// Expired entries are dropped whenever the map has doubled since the last
// sweep, so it holds about the entries of one lifetime.
type expiring[V any] struct {
	m     map[string]expiringEntry[V]
	swept int // len(m) after the last sweep
}

type expiringEntry[V any] struct {
	v       V
	expires time.Time
}

// get answers the live entry of key.
func (e *expiring[V]) get(key string, now time.Time) (V, bool) {
	en, ok := e.m[key]
	if !ok || !now.Before(en.expires) {
		var zero V
		return zero, false
	}
	return en.v, true
}

func (e *expiring[V]) put(key string, v V, expires, now time.Time) {
	if e.m == nil {
		e.m = map[string]expiringEntry[V]{}
	}
	if len(e.m) >= 2*e.swept+64 {
		for k, en := range e.m {
			if !now.Before(en.expires) {
				delete(e.m, k)
			}
		}
		e.swept = len(e.m)
	}
	e.m[key] = expiringEntry[V]{v, expires}
}

// UseNonce keeps nonces in an expiring map.
func (s *Store) UseNonce(ctx context.Context, key string, expires time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.UseNonce", key); err != nil {
		return false, err
	}
	now := time.Now()
	if _, ok := s.nonces.get(key, now); ok {
		return false, nil
	}
	s.nonces.put(key, struct{}{}, expires, now)
	return true, nil
}

func (s *Store) PutSession(ctx context.Context, se store.Session) error {
	const op = "memstore.PutSession"
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, op, se.IDHash); err != nil {
		return err
	}
	if se.Expires.IsZero() {
		return galleyerr.E(galleyerr.Op(op), galleyerr.Invalid, "a session must expire")
	}
	now := time.Now()
	if _, ok := s.sessions.get(se.IDHash, now); ok {
		return galleyerr.E(galleyerr.Op(op), galleyerr.Conflict, "a session lives under that id")
	}
	s.sessions.put(se.IDHash, clone(se), se.Expires, now)
	return nil
}

func (s *Store) GetSession(ctx context.Context, idHash string) (store.Session, error) {
	const op = "memstore.GetSession"
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, op, idHash); err != nil {
		return store.Session{}, err
	}
	se, ok := s.sessions.get(idHash, time.Now())
	if !ok {
		return store.Session{}, galleyerr.E(galleyerr.Op(op), galleyerr.NotFound, "no such session")
	}
	return clone(se), nil
}

func (s *Store) DeleteSession(ctx context.Context, idHash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.DeleteSession", idHash); err != nil {
		return err
	}
	delete(s.sessions.m, idHash)
	return nil
}

// AddTally keeps tallies in an expiring map; an expired one starts over.
func (s *Store) AddTally(ctx context.Context, key string, expires time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "memstore.AddTally", key); err != nil {
		return 0, err
	}
	now := time.Now()
	n, ok := s.tallies.get(key, now)
	if ok {
		expires = s.tallies.m[key].expires
	}
	s.tallies.put(key, n+1, expires, now)
	return n + 1, nil
}
