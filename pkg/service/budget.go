package service

import (
	"math"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// PostBudget is what one worker may post to its run's mailbox, per
// process serving the worker API: two token buckets, one counting rows and
// one counting bytes (subject and body). A post that finds either bucket
// short is refused RateLimited (429 to the harness, with Retry-After) and
// takes nothing from either. The buckets live in the process's memory, so
// across processes (Lambda instances on AWS) the budget multiplies by
// their number; the store-kept bounds on a worker's unconsumed rows
// (store.MaxPendingNoise, MaxPendingAttention) hold across processes.
type PostBudget struct {
	Rows      float64 // rows a second, sustained
	RowBurst  float64 // rows at once
	Bytes     float64 // bytes a second, sustained
	ByteBurst float64 // bytes at once
}

// DefaultPostBudget lets an honest harness post a heartbeat every 30 s, a
// status note now and then and a 64 KiB question at once, and holds a
// flooding one to a row a second and 64 KiB a second.
var DefaultPostBudget = PostBudget{Rows: 1, RowBurst: 20, Bytes: 64 << 10, ByteBurst: 512 << 10}

// maxBudgetWorkers bounds the buckets a process keeps; beyond it, the
// full ones (which say nothing a fresh one would not) are dropped first.
const maxBudgetWorkers = 4096

type bucket struct {
	rows, bytes float64
	at          time.Time
}

// budgets keeps each worker's buckets in this process.
type budgets struct {
	mu      sync.Mutex
	b       PostBudget
	workers map[string]*bucket
}

func newBudgets(b PostBudget) *budgets {
	return &budgets{b: b, workers: map[string]*bucket{}}
}

// take spends one row of n bytes of handle's budget at now, or refuses.
func (bs *budgets) take(handle string, n int, now time.Time) error {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	k := bs.refilled(handle, now)
	size := float64(n)
	if k.rows >= 1 && k.bytes >= min(size, bs.b.ByteBurst) {
		k.rows--
		k.bytes -= size // a post larger than the burst empties the bucket, and more
		return nil
	}
	wait := 0.0
	if k.rows < 1 {
		wait = (1 - k.rows) / bs.b.Rows
	}
	if need := min(size, bs.b.ByteBurst) - k.bytes; need > 0 {
		wait = max(wait, need/bs.b.Bytes)
	}
	return &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: max(1, int(math.Ceil(wait))),
		Msg: "the worker's posting budget is spent; post again later"}
}

func (bs *budgets) refilled(handle string, now time.Time) *bucket {
	k := bs.workers[handle]
	if k == nil {
		if len(bs.workers) >= maxBudgetWorkers {
			bs.evict(now)
		}
		k = &bucket{rows: bs.b.RowBurst, bytes: bs.b.ByteBurst, at: now}
		bs.workers[handle] = k
		return k
	}
	if dt := now.Sub(k.at).Seconds(); dt > 0 {
		k.rows = min(bs.b.RowBurst, k.rows+dt*bs.b.Rows)
		k.bytes = min(bs.b.ByteBurst, k.bytes+dt*bs.b.Bytes)
		k.at = now
	}
	return k
}

// evict drops the buckets that have refilled; if none has, every bucket
// goes (each worker then starts from a full budget: at most one burst more).
func (bs *budgets) evict(now time.Time) {
	for h, k := range bs.workers {
		if now.Sub(k.at).Seconds()*bs.b.Rows+k.rows >= bs.b.RowBurst &&
			now.Sub(k.at).Seconds()*bs.b.Bytes+k.bytes >= bs.b.ByteBurst {
			delete(bs.workers, h)
		}
	}
	if len(bs.workers) >= maxBudgetWorkers {
		clear(bs.workers)
	}
}

// forget drops a settled worker's buckets.
func (bs *budgets) forget(handle string) {
	bs.mu.Lock()
	delete(bs.workers, handle)
	bs.mu.Unlock()
}
