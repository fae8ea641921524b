package memstore

import (
	"context"

	"github.com/galley-run/galley/pkg/store"
)

// eventLog is one worker's retained events and the last sequence given.
type eventLog struct {
	events []store.Event
	last   int64
}

var _ store.EventLog = (*Store)(nil)

// AppendEvent implements store.EventLog.
func (s *Store) AppendEvent(ctx context.Context, worker string, e store.Event) (int64, error) {
	const op = "memstore.AppendEvent"
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, op, worker); err != nil {
		return 0, err
	}
	l := s.events[worker]
	if l == nil {
		l = &eventLog{}
		s.events[worker] = l
	}
	e = clone(e)
	e.Seq = l.last + 1
	if _, err := store.EncodeEvent(op, e); err != nil {
		return 0, err
	}
	l.last = e.Seq
	l.events = append(l.events, e)
	if n := len(l.events) - store.MaxEvents; n > 0 {
		l.events = append(l.events[:0:0], l.events[n:]...)
	}
	return e.Seq, nil
}

// LastEvent implements store.EventLog.
func (s *Store) LastEvent(ctx context.Context, worker string) (store.Event, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.LastEvent", worker); err != nil {
		return store.Event{}, false, err
	}
	l := s.events[worker]
	if l == nil || len(l.events) == 0 {
		return store.Event{}, false, nil
	}
	return clone(l.events[len(l.events)-1]), true, nil
}

// ListEvents implements store.EventLog.
func (s *Store) ListEvents(ctx context.Context, worker string, after int64, limit int) ([]store.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "memstore.ListEvents", worker); err != nil {
		return nil, err
	}
	var out []store.Event
	if l := s.events[worker]; l != nil {
		for _, e := range l.events {
			if e.Seq <= after {
				continue
			}
			if limit > 0 && len(out) == limit {
				break
			}
			out = append(out, clone(e))
		}
	}
	return out, nil
}
