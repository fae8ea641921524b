package service

import (
	"container/list"
	"context"
	"sync"

	"github.com/galley-run/galley/pkg/store"
)

// The inbox cache keeps, per worker, the inbox items this process has read,
// so that a harness's poll lists only the items appended since: without it
// every poll and every doorbell wake re-read and re-decoded the whole inbox.
//
// It is sound across processes because an inbox is append-only: items get
// gap-free sequences, become visible in sequence order and never change,
// and no inbox is ever deleted (store.Inboxes can only append; storetest
// checks the sequence). A cache is therefore always
// an exact prefix of the stored inbox; one that is behind (another process
// appended, another Lambda container answered) only lists more. What does
// change, the worker record the reply rules read, is read afresh on every
// call and never cached. (Under dynamostore's optional retention an item
// that expired stays in a warm cache while a cold one no longer lists it;
// retention is meant to be far beyond any worker's life.)

const (
	defaultInboxWorkers = 1024
	defaultInboxBytes   = 32 << 20 // an eighth of a 256 MiB Lambda
)

// WithInboxCache bounds the inbox cache to the inboxes of workers workers
// and about bytes bytes of items; workers <= 0 turns it off, so that every
// poll lists the worker's whole inbox.
func WithInboxCache(workers int, bytes int64) Option {
	return func(v *Service) { v.inboxes = newInboxCache(workers, bytes) }
}

type inboxCache struct {
	maxWorkers int
	maxBytes   int64

	mu      sync.Mutex
	entries map[string]*list.Element // of *inboxEntry
	lru     list.List                // front: most recently used
	bytes   int64                    // of the entries in the cache
}

// inboxEntry is what one worker's inbox holds up to seq last. items and
// replies only grow, and an item is never changed once in them, so a
// prefix taken under the lock stays valid to read without it.
type inboxEntry struct {
	handle string
	last   int64
	// items are the inbox without the messages whose key an earlier item
	// has: a retried message may append twice, and only the first counts.
	// Every reply copy is kept (the reply rules decide among them).
	items []store.InboxItem
	// replies indexes the replies in items: only they decide anything
	// about the items after them.
	replies []int
	keys    map[string]bool
	bytes   int64
	cached  bool // in the cache's map, its bytes counted there
}

// inboxView is a worker's inbox as one call sees it.
type inboxView struct {
	items   []store.InboxItem
	replies []int
}

func newInboxCache(workers int, bytes int64) *inboxCache {
	return &inboxCache{maxWorkers: workers, maxBytes: bytes, entries: map[string]*list.Element{}}
}

// read answers the worker's inbox as st holds it now, listing only the
// items appended after those the cache holds.
func (c *inboxCache) read(ctx context.Context, st store.Inboxes, handle string) (inboxView, error) {
	c.mu.Lock()
	var e *inboxEntry
	if el, ok := c.entries[handle]; ok {
		e = el.Value.(*inboxEntry)
	} else {
		e = &inboxEntry{handle: handle, keys: map[string]bool{}}
		if c.maxWorkers > 0 {
			e.cached = true
			c.entries[handle] = c.lru.PushFront(e)
		}
	}
	after := e.last
	c.mu.Unlock()

	// The store is read without the lock: calls for other workers go on,
	// and two calls for this one merely list the same items twice.
	items, err := st.ListInbox(ctx, handle, after, 0)
	if err != nil {
		return inboxView{}, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	grown := e.merge(items)
	if e.cached {
		c.bytes += grown
		c.lru.MoveToFront(c.entries[handle])
		c.evict()
	}
	return inboxView{items: e.items[:len(e.items):len(e.items)], replies: e.replies[:len(e.replies):len(e.replies)]}, nil
}

// merge appends the listed items past e.last and answers the bytes they
// added.
func (e *inboxEntry) merge(items []store.InboxItem) int64 {
	var grown int64
	for _, it := range items {
		if it.Seq <= e.last {
			continue // a concurrent call merged it already
		}
		e.last = it.Seq
		// Every copy of a reply stays: the worker record names the one
		// that delivers it (a retry may append a fresh copy after a reader
		// skipped the first). Only a message's second copy is left out.
		if it.Key != "" && it.Kind != "reply" {
			if e.keys[it.Key] {
				continue
			}
			e.keys[it.Key] = true
			grown += int64(len(it.Key)) + 48
		}
		if it.Kind == "reply" {
			e.replies = append(e.replies, len(e.items))
		}
		e.items = append(e.items, it)
		grown += int64(len(it.Key)+len(it.Kind)+len(it.Question)+len(it.Body)) + 112
	}
	e.bytes += grown
	return grown
}

// evict drops the least recently used entries until the cache is within
// its bounds; an entry alone beyond the byte bound is dropped too, and its
// worker read in full on every call, as without the cache.
func (c *inboxCache) evict() {
	// One inbox beyond the byte bound goes alone, not with every other.
	if front := c.lru.Front(); front != nil && front.Value.(*inboxEntry).bytes > c.maxBytes {
		c.remove(front)
	}
	for c.lru.Len() > 0 && (c.lru.Len() > c.maxWorkers || c.bytes > c.maxBytes) {
		c.remove(c.lru.Back())
	}
}

// drop forgets a worker: one that settled or was released reads its inbox
// at most a few times more.
func (c *inboxCache) drop(handle string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[handle]; ok {
		c.remove(el)
	}
}

func (c *inboxCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*inboxEntry)
	delete(c.entries, e.handle)
	c.bytes -= e.bytes
	e.cached = false
}

// len answers how many workers the cache holds and their bytes (tests).
func (c *inboxCache) len() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.bytes
}
