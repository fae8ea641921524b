package modelproxy

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"

	"github.com/galley-run/galley/pkg/prices"
	"github.com/galley-run/galley/pkg/protocol"
)

// Tokens are counts in galley's categories: input excludes cache reads
// and cache writes.
type Tokens = prices.Tokens

// Budget is a worker's cap; a zero field sets no cap of its kind.
type Budget struct {
	// Tokens caps every token the provider counted: input, output, cache
	// reads and cache writes.
	Tokens int64
	// MicroUSD caps the computed cost, in millionths of a dollar. With it,
	// a call to a model without a price is refused.
	MicroUSD int64
}

// ModelTotals is one model's share of a worker's usage.
type ModelTotals struct {
	Calls  int64
	Tokens Tokens
	// Priced: every call of this model had a price; MicroUSD is then its
	// cost.
	Priced   bool
	MicroUSD int64
}

// Totals is a worker's usage so far, counted from the provider's answers.
type Totals struct {
	Family Family
	// Calls counts the model calls whose answer carried usage.
	Calls int64
	// Unmetered counts model calls answered 2xx without usage the proxy
	// could read (an answer cut before its usage, an encoding the proxy
	// does not read): their tokens are not in the totals.
	Unmetered int64
	// Refused counts calls refused at the cap.
	Refused int64
	Tokens  Tokens
	Models  map[string]ModelTotals
	// Priced: every model used has a price (true before the first call);
	// MicroUSD is then the computed cost.
	Priced   bool
	MicroUSD int64
}

// All is every token counted: input, output, cache reads, cache writes.
func (t Totals) All() int64 {
	return t.Tokens.Input + t.Tokens.Output + t.Tokens.CacheRead + t.Tokens.CacheWrite
}

// Report is the totals as galley's usage report (the harness sets
// Source and Agent): tokens summed over models, the model when there was
// one, the cost (basis computed) when every model was priced. OpenAI's
// answers state no cache writes (billed as input): cacheWrite is then
// left out.
func (t Totals) Report() protocol.UsageReport {
	var rep protocol.UsageReport
	if t.Calls == 0 {
		return rep
	}
	in, out, cr, cw := t.Tokens.Input, t.Tokens.Output, t.Tokens.CacheRead, t.Tokens.CacheWrite
	rep.Tokens = &protocol.Tokens{Input: &in, Output: &out, CacheRead: &cr, CacheWrite: &cw}
	if t.Family == OpenAI {
		rep.Tokens.CacheWrite = nil
	}
	if len(t.Models) == 1 {
		for m := range t.Models {
			rep.Model = m // "" when the answers named none
		}
	}
	if t.Priced {
		rep.Cost = &protocol.Cost{Amount: t.MicroUSD, Basis: protocol.BasisComputed}
	}
	return rep
}

// Refusal is the first call refused at the cap: what the agent was told
// and the totals then.
type Refusal struct {
	Message string
	Totals  Totals
}

// meter keeps a worker's totals and decides, before each model call,
// whether its budget allows it.
type meter struct {
	family Family
	prices map[string]prices.Price
	budget Budget

	onUsage func(Totals)
	onCap   func(Refusal)
	// hooks serializes the hooks, so that they see totals in the order
	// they were reached.
	hooks sync.Mutex

	mu        sync.Mutex
	totals    Totals
	nano      map[string]int64 // each model's cost in billionths of a dollar
	unpriced  map[string]bool
	capCalled bool
}

func newMeter(f Family, table map[string]prices.Price, b Budget, onUsage func(Totals), onCap func(Refusal), from *Totals) *meter {
	m := &meter{family: f, prices: table, budget: b, onUsage: onUsage, onCap: onCap,
		totals: Totals{Family: f, Models: map[string]ModelTotals{}, Priced: true},
		nano:   map[string]int64{}, unpriced: map[string]bool{}}
	if from != nil {
		// An earlier proxy's count: each model's cost goes on from its
		// rounded micro-dollars (at most half a micro-dollar a model lost
		// per resume), a model unpriced stays so.
		m.totals = *from
		m.totals.Family = f
		m.totals.Models = maps.Clone(from.Models)
		if m.totals.Models == nil {
			m.totals.Models = map[string]ModelTotals{}
		}
		for name, mt := range m.totals.Models {
			if mt.Priced {
				m.nano[name] = mt.MicroUSD * 1000
			} else {
				m.unpriced[name] = true
			}
		}
		m.totals.Priced = len(m.unpriced) == 0
		m.capCalled = from.Refused > 0
	}
	return m
}

// maxFromModels bounds the models a count to go on from may name (a
// worker uses a handful).
const maxFromModels = 64

// valid checks a count to go on from (CountingFrom): of the proxy's
// family, no count negative, a bounded number of models.
func (t Totals) valid(f Family) error {
	neg := func(ts Tokens) bool { return ts.Input < 0 || ts.Output < 0 || ts.CacheRead < 0 || ts.CacheWrite < 0 }
	switch {
	case t.Family != "" && t.Family != f:
		return fmt.Errorf("modelproxy: a count of family %q cannot go on in a %q proxy", t.Family, f)
	case t.Calls < 0 || t.Unmetered < 0 || t.Refused < 0 || t.MicroUSD < 0 || neg(t.Tokens):
		return errors.New("modelproxy: a count to go on from is not negative")
	case len(t.Models) > maxFromModels:
		return fmt.Errorf("modelproxy: a count to go on from names more than %d models", maxFromModels)
	}
	for _, mt := range t.Models {
		if mt.Calls < 0 || mt.MicroUSD < 0 || neg(mt.Tokens) {
			return errors.New("modelproxy: a count to go on from is not negative")
		}
	}
	return nil
}

// snapshot copies the totals; m.mu is held.
func (m *meter) snapshot() Totals {
	t := m.totals
	t.Models = maps.Clone(m.totals.Models)
	return t
}

func (m *meter) Totals() Totals {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshot()
}

// admit decides whether a model call may go (model is the request's, or
// "" when the proxy could not read it): "" when it may, else the message
// to refuse it with. The first refusal calls onCap.
func (m *meter) admit(model string) string {
	if m.budget == (Budget{}) {
		return ""
	}
	m.hooks.Lock()
	defer m.hooks.Unlock()
	m.mu.Lock()
	why := m.overWhy(model)
	if why == "" {
		m.mu.Unlock()
		return ""
	}
	m.totals.Refused++
	first := !m.capCalled
	m.capCalled = true
	t := m.snapshot()
	m.mu.Unlock()
	if first && m.onCap != nil {
		m.onCap(Refusal{Message: why, Totals: t})
	}
	return why
}

const askCoordinator = "; ask the coordinator"

// overWhy says why the budget refuses a call, or ""; m.mu is held.
func (m *meter) overWhy(model string) string {
	b, t := m.budget, m.totals
	if b.Tokens > 0 && t.All() >= b.Tokens {
		return fmt.Sprintf("galley: this worker has used its model budget (%d of %d tokens)%s", t.All(), b.Tokens, askCoordinator)
	}
	if b.MicroUSD <= 0 {
		return ""
	}
	if len(m.unpriced) > 0 {
		return fmt.Sprintf("galley: this worker's model budget is in dollars (%s), and galley has no price for %s, which it used: its cost is unknown%s",
			usd(b.MicroUSD), strings.Join(sortedKeys(m.unpriced), ", "), askCoordinator)
	}
	if model != "" {
		if _, ok := prices.Lookup(m.prices, model); !ok {
			return fmt.Sprintf("galley: this worker's model budget is in dollars (%s), and galley has no price for model %s%s",
				usd(b.MicroUSD), model, askCoordinator)
		}
	}
	if t.MicroUSD >= b.MicroUSD {
		return fmt.Sprintf("galley: this worker has used its model budget (%s of %s)%s", usd(t.MicroUSD), usd(b.MicroUSD), askCoordinator)
	}
	return ""
}

func usd(micro int64) string { return fmt.Sprintf("$%d.%06d", micro/1e6, micro%1e6) }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k == "" {
			k = "an unnamed model"
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// count adds one call's usage, then calls onUsage with the new totals.
func (m *meter) count(model string, tok Tokens) {
	m.hooks.Lock()
	defer m.hooks.Unlock()
	m.mu.Lock()
	mt, seen := m.totals.Models[model]
	if !seen {
		mt.Priced = true
	}
	mt.Calls++
	mt.Tokens = add(mt.Tokens, tok)
	if p, ok := prices.Lookup(m.prices, model); ok && mt.Priced {
		if n, ok := p.RequestNanoUSD(tok); ok {
			m.nano[model] += n
			mt.MicroUSD = (m.nano[model] + 500) / 1000
		} else {
			mt.Priced = false
		}
	} else {
		mt.Priced = false
	}
	if !mt.Priced {
		m.unpriced[model] = true
		mt.MicroUSD = 0
	}
	m.totals.Models[model] = mt
	m.totals.Calls++
	m.totals.Tokens = add(m.totals.Tokens, tok)
	m.totals.Priced = len(m.unpriced) == 0
	var nano int64
	for _, n := range m.nano {
		nano += n
	}
	m.totals.MicroUSD = 0
	if m.totals.Priced {
		m.totals.MicroUSD = (nano + 500) / 1000
	}
	t := m.snapshot()
	m.mu.Unlock()
	if m.onUsage != nil {
		m.onUsage(t)
	}
}

func (m *meter) unmetered() {
	m.mu.Lock()
	m.totals.Unmetered++
	m.mu.Unlock()
}

func add(a, b Tokens) Tokens {
	return Tokens{Input: a.Input + b.Input, Output: a.Output + b.Output,
		CacheRead: a.CacheRead + b.CacheRead, CacheWrite: a.CacheWrite + b.CacheWrite}
}
