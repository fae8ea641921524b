package gateway

import (
	"maps"
	"sync"
	"time"
)

// What the gateway and its pools count, so that a cost model can be built
// from what galley really does: API Gateway bills each request, Lambda each
// invocation and its duration rounded up to the millisecond.

// requestCounter counts the requests each route admitted.
type requestCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requestCounter) add(route string) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[route]++
	c.mu.Unlock()
}

// Requests reports how many requests each route (by route key, "POST
// /v1/effects") has taken since the gateway started: every request a
// route matched and its throttle admitted, whatever the function answered.
// API Gateway bills those; a request no route matches (404) or one its
// throttle refused (429) is not counted.
func (g *Gateway) Requests() map[string]int {
	g.counted.mu.Lock()
	defer g.counted.mu.Unlock()
	return maps.Clone(g.counted.n)
}

// PoolStats are what a pool has run since it was made.
type PoolStats struct {
	// Invocations counts the invocations that reached an emulator,
	// failed ones included (Lambda bills them); Errors those that failed.
	Invocations, Errors int
	// Duration is the emulators' busy time, and BilledMillis the sum of
	// each invocation's duration rounded up to the millisecond, as Lambda
	// bills it (a cold start's initialization included, as Lambda bills
	// it since 2025).
	Duration     time.Duration
	BilledMillis int64
	// InFlight counts the invocations asked for and not yet finished (one
	// waiting for a free emulator included); MaxInFlight is its highest
	// value since the pool was made or ResetPeak.
	InFlight, MaxInFlight int
}

type poolStats struct {
	mu sync.Mutex
	s  PoolStats
}

func (p *poolStats) begin() {
	p.mu.Lock()
	p.s.InFlight++
	p.s.MaxInFlight = max(p.s.MaxInFlight, p.s.InFlight)
	p.mu.Unlock()
}

// end ends one invocation; ran says whether it reached an emulator, and d
// how long that ran.
func (p *poolStats) end(ran bool, d time.Duration, failed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s.InFlight--
	if !ran {
		return
	}
	p.s.Invocations++
	if failed {
		p.s.Errors++
	}
	p.s.Duration += d
	p.s.BilledMillis += int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Stats reports what the pool has run.
func (p *Pool) Stats() PoolStats {
	p.stats.mu.Lock()
	defer p.stats.mu.Unlock()
	return p.stats.s
}

// ResetPeak starts MaxInFlight again from the invocations in flight now:
// a test's or a measurement's reset point.
func (p *Pool) ResetPeak() {
	p.stats.mu.Lock()
	p.stats.s.MaxInFlight = p.stats.s.InFlight
	p.stats.mu.Unlock()
}
