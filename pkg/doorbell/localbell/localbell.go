// Package localbell is the in-process doorbell of the local server: it wakes
// waiters of one process on a topic (a run's mailbox, a worker's inbox). It
// implements service.Doorbell; doorbelltest checks it.
//
// A Listener registers at Listen, before the caller checks the store, so a
// ring between that check and Wait is not missed. Rings coalesce: any number
// of rings while nobody waits leave one pending wake. A topic with no
// listener holds no memory, so unbounded topic names (one per run) do not
// leak once their listeners close.
package localbell

import (
	"context"
	"sync"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Bell is an in-process doorbell. The zero value is not usable; call New.
type Bell struct {
	mu     sync.Mutex
	topics map[string]map[*listener]struct{}
}

// New returns an empty Bell.
func New() *Bell {
	return &Bell{topics: make(map[string]map[*listener]struct{})}
}

var _ service.Doorbell = (*Bell)(nil)

// Ring wakes every listener of topic. It never blocks and never fails; a
// ring with no listener is dropped, which the store's truth makes harmless.
func (b *Bell) Ring(ctx context.Context, topic string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.topics[topic] {
		select {
		case l.wake <- struct{}{}:
		default: // a wake is already pending: rings coalesce
		}
	}
	return nil
}

// Listen registers a listener on topic at once.
func (b *Bell) Listen(ctx context.Context, topic string) (service.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, galleyerr.E(galleyerr.Op("localbell.listen"), galleyerr.Unavailable, err)
	}
	l := &listener{bell: b, topic: topic, wake: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	set := b.topics[topic]
	if set == nil {
		set = make(map[*listener]struct{})
		b.topics[topic] = set
	}
	set[l] = struct{}{}
	return l, nil
}

// Topics reports how many topics have listeners; tests use it to show that
// closed listeners leave nothing behind.
func (b *Bell) Topics() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.topics)
}

type listener struct {
	bell  *Bell
	topic string
	wake  chan struct{} // capacity 1: at most one pending wake
	once  sync.Once
	done  chan struct{}
}

// Wait returns nil on a ring since Listen or the previous Wait, ctx's error
// at its deadline, or an error once the listener is closed.
func (l *listener) Wait(ctx context.Context) error {
	select {
	case <-l.wake:
		return nil
	default:
	}
	select {
	case <-l.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return galleyerr.E(galleyerr.Op("localbell.wait"), galleyerr.Other, "listener closed")
	}
}

// Close unregisters the listener and drops its topic when it was the last.
func (l *listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		b := l.bell
		b.mu.Lock()
		defer b.mu.Unlock()
		set := b.topics[l.topic]
		delete(set, l)
		if len(set) == 0 {
			delete(b.topics, l.topic)
		}
	})
	return nil
}
