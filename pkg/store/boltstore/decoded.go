package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// decodedCap bounds the decoded-resource cache. A worker record decodes to
// about 2 KiB with its stored bytes, so the cache stays under ~32 MiB.
const decodedCap = 16384

// decodedResources keeps, per resource key, the stored bytes last decoded
// and what they decoded to, because resources are read (every observe, every
// inventory) far more often than they change and decoding JSON dominated
// those reads. An entry answers only a read whose stored bytes (version and
// body) are equal to its own, so it can never answer stale data, whatever
// happens to versions (a record deleted and re-created, a file restored);
// a bytes.Equal is cheap next to a decode. Writes need not touch it.
//
// Read transactions run in parallel, and two of them may see different
// snapshots; each answers the bytes of its own snapshot, and the later
// decode of the two simply replaces the entry.
type decodedResources struct {
	mu  sync.RWMutex
	max int
	m   map[string]decodedResource
}

// decodedResource is immutable once in the map: answers are clones of res.
type decodedResource struct {
	raw []byte // a copy: bolt's bytes are valid only inside the transaction
	res store.Resource
}

func newDecodedResources(max int) *decodedResources {
	return &decodedResources{max: max, m: make(map[string]decodedResource)}
}

// get answers the resource stored as val under key, a deep copy the caller
// may change. It must be called inside the transaction val came from.
func (c *decodedResources) get(op galleyerr.Op, key, val []byte) (store.Resource, store.Version, error) {
	if len(val) < 8 {
		return store.Resource{}, store.NoVersion, galleyerr.E(op, "corrupt record: short value")
	}
	v := store.Version(binary.BigEndian.Uint64(val))
	c.mu.RLock()
	e, ok := c.m[string(key)]
	c.mu.RUnlock()
	if ok && bytes.Equal(e.raw, val) {
		return e.res.Clone(), v, nil
	}
	var r store.Resource
	if err := json.Unmarshal(val[8:], &r); err != nil {
		return store.Resource{}, store.NoVersion, galleyerr.E(op, "corrupt record", err)
	}
	c.put(key, val, r)
	return r.Clone(), v, nil
}

// put keeps r as the decoding of val. At the cap it first drops one entry
// chosen by Go's randomized map iteration: random eviction costs no
// bookkeeping on the read path (an LRU would write on every hit, under the
// exclusive lock), and when there are more resources than the cap, a
// listing that cycles over all of them still hits part of them, where
// clearing the whole map would leave it hitting none.
func (c *decodedResources) put(key, val []byte, r store.Resource) {
	e := decodedResource{raw: bytes.Clone(val), res: r}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[string(key)]; !ok && len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[string(key)] = e
}
