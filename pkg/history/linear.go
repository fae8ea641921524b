package history

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LinResult is the outcome of Linearizable.
type LinResult struct {
	OK      bool
	Unknown bool // the check ran out of time
	Ops     int  // model operations checked
	Runs    int
	Detail  string
	Bad     []int // the history ops of the first run that failed
}

// Linearizable checks every run's mailbox history (posts, next,
// acknowledge, await, adopt) against the sequential model with porcupine.
// A run whose answers carry rows no post in the history made (a harness's
// heartbeats) is checked with those rows left out, and a new batch may
// then hold any prefix of the pending rows. timeout bounds the whole
// check. With GALLEY_PORCUPINE_HTML set, a failing run's visualization is
// written to that path.
func Linearizable(ops []Op, timeout time.Duration) LinResult {
	ix := newIndex(ops)
	res := LinResult{OK: true}
	deadline := time.Now().Add(timeout)
	for _, run := range ix.runs {
		pops, strict, bad := linOps(ix, run)
		if bad != "" {
			res.Detail += fmt.Sprintf("run %q not checked: %s; ", run, bad)
			continue
		}
		if len(pops) == 0 {
			continue
		}
		res.Runs++
		res.Ops += len(pops)
		nm := &porcupine.NondeterministicModel{
			Init:              func() []any { return []any{linState{}} },
			Step:              linStep(strict),
			Equal:             linEqual,
			Hash:              linHash,
			DescribeOperation: describe,
			DescribeState: func(a any) string {
				x := a.(linState)
				return fmt.Sprintf("rows=%d acked=%d sealed=%v %s[%d:%d] reader=%q", len(x.ledger), x.acked, x.sealed, x.batch, x.from, x.to, x.reader)
			},
		}
		model := nm.ToModel()
		left := time.Until(deadline)
		if left <= 0 {
			res.Unknown = true
			return res
		}
		result, info := porcupine.CheckOperationsVerbose(model, pops, left)
		switch result {
		case porcupine.Unknown:
			res.Unknown = true
			return res
		case porcupine.Illegal:
			res.OK = false
			res.Detail += fmt.Sprintf("run %q: no linearization of %d operations; %s", run, len(pops), explain(model, pops, info))
			for _, p := range pops {
				res.Bad = append(res.Bad, p.Metadata.(int))
			}
			if path := os.Getenv("GALLEY_PORCUPINE_HTML"); path != "" {
				_ = porcupine.VisualizePath(model, info, path)
			}
			return res
		}
	}
	return res
}

// linOps turns one run's history into model operations.
func linOps(ix *index, run string) (out []porcupine.Operation, strict bool, bad string) {
	clients := map[string]int{}
	client := func(name string) int {
		if id, ok := clients[name]; ok {
			return id
		}
		clients[name] = len(clients)
		return clients[name]
	}
	// seenBy is, for each row delivered, the earliest return of an answer
	// that delivered it.
	seenBy := map[string]int64{}
	for _, m := range ix.mail[run] {
		if m.answer != mailDelivery {
			continue
		}
		for _, row := range m.messages {
			k := rowKey(row)
			if at, ok := seenBy[k]; !ok || m.Return < at {
				seenBy[k] = m.Return
			}
		}
	}
	known := map[string]bool{}
	prev := map[string]string{} // worker -> its previous row's key
	for _, p := range ix.posts[run] {
		k := p.key()
		if known[k] {
			return nil, false, "two posts with the same content"
		}
		known[k] = true
		ret := p.Return
		if !p.Answered() {
			// A post without an answer may take effect at any time up to
			// its return (Pending: the end) or never. Never is as good as
			// any other choice for a row no answer delivered: a row in
			// the ledger can only make more answers wrong (a later batch
			// would hold it). So such a post is left out, and one whose
			// row was delivered took effect before the first answer that
			// delivered it returned. Either way it no longer overlaps the
			// rest of the history, which made the search space explode.
			at, ok := seenBy[k]
			if !ok {
				continue
			}
			if at >= p.Call { // else the answer came first: a violation the check finds
				ret = min(ret, at)
			}
		}
		o := linOut{unknown: !p.Answered()}
		out = append(out, porcupine.Operation{ClientId: client("worker " + p.worker), Call: p.Call, Return: ret,
			Input: linIn{kind: linPost, key: k, after: prev[p.worker]}, Output: o, Metadata: p.ID})
		if p.Answered() {
			// A later row needs this one before it; a failed post may never
			// have been appended.
			prev[p.worker] = k
		}
	}
	strict = true
	outOf := func(m *mailOp) linOut {
		switch m.answer {
		case mailFailed:
			return linOut{unknown: true}
		case mailDelivery:
			keys := make([]string, 0, len(m.messages))
			for _, row := range m.messages {
				k := rowKey(row)
				if !known[k] {
					strict = false
					continue
				}
				keys = append(keys, k)
			}
			return linOut{status: mailDelivery, batch: m.batch, keys: keys}
		}
		return linOut{status: m.answer}
	}
	for _, m := range ix.mail[run] {
		id := client("coordinator " + m.coordinator)
		token := fmt.Sprint(m.ID)
		o := outOf(m)
		switch m.Route {
		case Next:
			out = append(out, porcupine.Operation{ClientId: id, Call: m.Call, Return: m.Return,
				Input: linIn{kind: linNext, coordinator: m.coordinator}, Output: o, Metadata: m.ID})
		case Await, Acknowledge:
			first := linIn{kind: linTouch, coordinator: m.coordinator, token: token}
			if m.Route == Acknowledge {
				first = linIn{kind: linConsume, coordinator: m.coordinator, key: m.delivery, token: token}
			}
			out = append(out,
				porcupine.Operation{ClientId: id, Call: m.Call, Return: m.Return, Input: first,
					Output: linOut{unknown: o.unknown}, Metadata: m.ID},
				porcupine.Operation{ClientId: id, Call: m.Call, Return: m.Return,
					Input: linIn{kind: linRead, coordinator: m.coordinator, token: token}, Output: o, Metadata: m.ID})
		case Adopt:
			out = append(out, porcupine.Operation{ClientId: id, Call: m.Call, Return: m.Return,
				Input: linIn{kind: linAdopt, coordinator: m.coordinator}, Output: o, Metadata: m.ID})
		}
	}
	return out, strict, ""
}

// explain names where the longest linearization porcupine found stops:
// how far it got, and the earliest-called operations it could not place
// next.
func explain(model porcupine.Model, pops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var best []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, l := range part {
			if len(l) > len(best) {
				best = l
			}
		}
	}
	placed := map[string]bool{}
	id := func(o porcupine.Operation) string { return fmt.Sprint(o.Metadata, o.Input.(linIn).kind) }
	for _, o := range best {
		placed[id(o)] = true
	}
	var left []porcupine.Operation
	for _, o := range pops {
		if !placed[id(o)] {
			left = append(left, o)
		}
	}
	slices.SortStableFunc(left, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var stuck []string
	for _, o := range left[:min(3, len(left))] {
		stuck = append(stuck, fmt.Sprintf("op %v %s", o.Metadata, model.DescribeOperation(o.Input, o.Output)))
	}
	return fmt.Sprintf("the longest linearization places %d; next unplaced: %s", len(best), strings.Join(stuck, "; "))
}
