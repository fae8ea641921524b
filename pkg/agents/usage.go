package agents

import (
	"math"

	"github.com/galley-run/galley/pkg/protocol"
)

// usageCounter turns the running totals of a session's turn ends into the
// usage galley keeps. Both CLIs report totals for the whole session, and a
// resumed session continues from them (recorded in testdata); should a
// total ever drop, the CLI started a new count, and the earlier totals are
// carried so nothing reported is lost.
type usageCounter struct {
	family string
	model  string // the launch's model, or the one the CLI reports
	prices map[string]Price

	base, last totalsValue
	seen       bool
	// costUnknown: the CLI once marked its cost a guess; a total that
	// includes it is never reported.
	costUnknown bool
}

// totalsValue is totals with unknown as -1, for arithmetic.
type totalsValue struct {
	in, out, cr, cw int64
	cost            float64 // USD; -1 unknown
}

func newUsageCounter(family, model string, prices map[string]Price) *usageCounter {
	return &usageCounter{family: family, model: model, prices: prices}
}

func value(t *totals) totalsValue {
	v := totalsValue{in: -1, out: -1, cr: -1, cw: -1, cost: -1}
	get := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return -1
		}
		return *p
	}
	v.in, v.out, v.cr, v.cw = get(t.Input), get(t.Output), get(t.CacheRead), get(t.CacheWrite)
	if t.CostUSD != nil {
		v.cost = *t.CostUSD
	}
	return v
}

// add takes one turn end's totals and returns the report to send, or false
// when the totals hold nothing galley can use.
func (c *usageCounter) add(t *totals) (protocol.UsageReport, bool) {
	if t == nil {
		return protocol.UsageReport{}, false
	}
	if t.Model != "" {
		c.model = t.Model
	}
	v := value(t)
	c.costUnknown = c.costUnknown || t.CostUnknown
	if c.seen && dropped(c.last, v) {
		c.base = sum(c.base, c.last)
	}
	c.last, c.seen = v, true
	return c.report(sum(c.base, c.last))
}

func dropped(prev, next totalsValue) bool {
	lower := func(a, b int64) bool { return a >= 0 && b >= 0 && b < a }
	return lower(prev.in, next.in) || lower(prev.out, next.out) || lower(prev.cr, next.cr) ||
		lower(prev.cw, next.cw) || (prev.cost >= 0 && next.cost >= 0 && next.cost < prev.cost)
}

// sum adds two totals; unknown (-1) plus zero base stays unknown.
func sum(a, b totalsValue) totalsValue {
	add := func(x, y int64) int64 {
		switch {
		case x <= 0:
			return y
		case y < 0:
			return x
		}
		return x + y
	}
	addf := func(x, y float64) float64 {
		switch {
		case x <= 0:
			return y
		case y < 0:
			return x
		}
		return x + y
	}
	return totalsValue{add(a.in, b.in), add(a.out, b.out), add(a.cr, b.cr), add(a.cw, b.cw), addf(a.cost, b.cost)}
}

func (c *usageCounter) report(v totalsValue) (protocol.UsageReport, bool) {
	rep := protocol.UsageReport{Model: c.model}
	tok := &protocol.Tokens{}
	set := func(n int64) *int64 {
		if n < 0 {
			return nil
		}
		return &n
	}
	tok.Input, tok.Output, tok.CacheRead, tok.CacheWrite = set(v.in), set(v.out), set(v.cr), set(v.cw)
	if tok.Input != nil || tok.Output != nil || tok.CacheRead != nil || tok.CacheWrite != nil {
		rep.Tokens = tok
	}
	switch {
	case c.costUnknown:
		// The CLI said it does not know the price: no cost, not a guess.
	case v.cost >= 0:
		// The CLI states its cost: claude's total_cost_usd.
		rep.Cost = &protocol.Cost{Amount: microdollars(v.cost), Basis: "reported"}
	case rep.Tokens != nil:
		if amount, ok := computeCost(c.prices, c.model, v); ok {
			rep.Cost = &protocol.Cost{Amount: amount, Basis: "computed"}
		}
	}
	if rep.Tokens == nil && rep.Cost == nil {
		return rep, false
	}
	return rep, true
}

func microdollars(usd float64) int64 {
	if usd <= 0 || math.IsNaN(usd) || math.IsInf(usd, 0) {
		return 0
	}
	return int64(math.Round(usd * 1e6))
}

// computeCost prices the counts with the model's row of the price table.
// Every count the price depends on must be known; an unknown model or count
// leaves the cost out.
func computeCost(prices map[string]Price, model string, v totalsValue) (int64, bool) {
	p, ok := prices[model]
	if !ok || v.in < 0 || v.out < 0 {
		return 0, false
	}
	cr, cw := max(v.cr, 0), max(v.cw, 0)
	if v.cr > 0 && p.CachedInput < 0 {
		return 0, false
	}
	if v.cw > 0 && p.CacheWrite < 0 {
		return 0, false
	}
	// Prices are USD per million tokens, so a token costs price millionths
	// of a dollar per million: amount (µ$) = tokens × price / 1e6 × 1e6.
	usd := (float64(v.in)*p.Input + float64(v.out)*p.Output + float64(cr)*max(p.CachedInput, 0) +
		float64(cw)*max(p.CacheWrite, 0)) / 1e6
	return microdollars(usd), true
}
