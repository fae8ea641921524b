package dynamostore

import (
	"context"
	"sync"
)

// counterLocks lets one append per counter run at a time in this process.
// Appends from one process would otherwise fight for the same counter and
// waste a transaction per loss; across processes the conditions still
// decide, so this is only an economy. The holder also remembers the value it
// left, so the next append in this process skips the read. Idle entries
// are kept for that, up to maxIdleCounters; beyond, an idle entry is dropped
// when released.
type counterLocks struct {
	mu sync.Mutex
	m  map[string]*counterLock
}

const maxIdleCounters = 4096

type counterLock struct {
	sem   chan struct{}
	refs  int
	last  int64 // the counter's value after this process's last append
	known bool
}

func (c *counterLocks) lock(ctx context.Context, key string) (*counterLock, error) {
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]*counterLock)
	}
	l := c.m[key]
	if l == nil {
		l = &counterLock{sem: make(chan struct{}, 1)}
		c.m[key] = l
	}
	l.refs++
	c.mu.Unlock()
	select {
	case l.sem <- struct{}{}:
		return l, nil
	case <-ctx.Done():
		c.release(key, l)
		return nil, ctx.Err()
	}
}

func (c *counterLocks) unlock(key string, l *counterLock) {
	<-l.sem
	c.release(key, l)
}

func (c *counterLocks) release(key string, l *counterLock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l.refs--
	if l.refs == 0 && len(c.m) > maxIdleCounters {
		delete(c.m, key)
	}
}
