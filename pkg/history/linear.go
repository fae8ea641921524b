package history

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The mailbox as a sequential model, for porcupine: a ledger of rows in
// the order they were appended, a count of consumed rows, at most one
// sealed batch (a range of the ledger under an id), the ids ever answered,
// and the run's reader with the coordinators that read before the first
// adoption (seen) and those an adoption replaced (superseded).
//
// Some calls act at two points: acknowledge consumes, then reads the next
// batch in a second store call; await marks its coordinator seen on its
// first read and answers from its last. Each becomes two model operations
// over the same interval, ordered by a token the first puts in the state
// and the second takes out. A call that got no answer (or an error) may
// have taken effect or not: the model allows both, and an op without a
// response may take effect at any time after its call.

// MaxBatch is the most rows galley seals in one batch.
const MaxBatch = 64

type linKind int

const (
	linPost linKind = iota
	linNext
	linTouch // await's first read
	linConsume
	linRead // the answer of an acknowledge or an await
	linAdopt
)

type linIn struct {
	kind        linKind
	coordinator string
	key         string // post: the row's key; consume: the batch id
	after       string // post: the worker's previous row, which must be in the ledger
	token       string
}

type linOut struct {
	unknown bool
	status  string // mail* (post: "")
	batch   string
	keys    []string
}

type linState struct {
	ledger     []string
	acked      int
	sealed     bool
	batch      string // "" while sealed by a call whose answer was lost
	from, to   int
	used       string // set of batch ids answered
	reader     string
	seen       string // set
	superseded string // set
	tokens     string // set
}

// Sets are "\x00a\x00b\x00", sorted, so equal sets are equal strings.
func setHas(set, x string) bool { return strings.Contains(set, "\x00"+x+"\x00") }

func setAdd(set, x string) string {
	if setHas(set, x) {
		return set
	}
	items := setItems(set)
	items = append(items, x)
	slices.Sort(items)
	return "\x00" + strings.Join(items, "\x00") + "\x00"
}

func setDel(set, x string) string {
	if !setHas(set, x) {
		return set
	}
	items := slices.DeleteFunc(setItems(set), func(s string) bool { return s == x })
	if len(items) == 0 {
		return ""
	}
	return "\x00" + strings.Join(items, "\x00") + "\x00"
}

func setItems(set string) []string {
	if set == "" {
		return nil
	}
	return strings.Split(strings.Trim(set, "\x00"), "\x00")
}

func (s linState) fenced(c string) bool { return s.reader != "" && s.reader != c }

func (s linState) noteSeen(c string) linState {
	if s.reader == "" {
		s.seen = setAdd(s.seen, c)
	}
	return s
}

// read is a next at this point: the states it can lead to with the
// answer it gives. strict fixes how many rows a new batch holds.
func (s linState) read(c string, strict bool) []readResult {
	if s.fenced(c) {
		return []readResult{{s, linOut{status: mailFenced}}}
	}
	s = s.noteSeen(c)
	if s.sealed {
		return []readResult{{s, linOut{status: mailDelivery, batch: s.batch, keys: s.ledger[s.from:s.to]}}}
	}
	pending := len(s.ledger) - s.acked
	if pending == 0 && strict {
		return []readResult{{s, linOut{status: mailEmpty}}}
	}
	var out []readResult
	if pending == 0 {
		// Rows the model does not know (heartbeats) may be pending.
		out = append(out, readResult{s, linOut{status: mailEmpty}})
	}
	lo, hi := min(pending, MaxBatch), min(pending, MaxBatch)
	if !strict {
		lo = 0
	}
	for n := hi; n >= lo; n-- {
		t := s
		t.sealed, t.batch, t.from, t.to = true, "", s.acked, s.acked+n
		out = append(out, readResult{t, linOut{status: mailDelivery, keys: s.ledger[s.acked : s.acked+n]}})
	}
	return out
}

type readResult struct {
	s   linState
	out linOut
}

// matchRead keeps the states whose answer is the observed one, binding a
// new batch's id.
func matchRead(rs []readResult, got linOut) []any {
	var next []any
	for _, r := range rs {
		if got.unknown {
			next = append(next, r.s)
			continue
		}
		if r.out.status != got.status {
			continue
		}
		if got.status != mailDelivery {
			next = append(next, r.s)
			continue
		}
		if !slices.Equal(r.out.keys, got.keys) {
			continue
		}
		s := r.s
		switch {
		case s.batch == got.batch:
		case s.batch == "" && !setHas(s.used, got.batch):
			s.batch = got.batch
		default:
			continue
		}
		s.used = setAdd(s.used, got.batch)
		next = append(next, s)
	}
	return next
}

func (s linState) adopt(c string) (linState, string) {
	if s.reader == c {
		return s, mailAdopted
	}
	if setHas(s.superseded, c) {
		return s, mailFenced
	}
	if s.reader != "" {
		s.superseded = setAdd(s.superseded, s.reader)
	}
	for _, x := range setItems(s.seen) {
		if x != c {
			s.superseded = setAdd(s.superseded, x)
		}
	}
	s.seen, s.reader = "", c
	return s, mailAdopted
}

func linStep(strict bool) func(state, input, output any) []any {
	return func(state, input, output any) []any {
		s, in, out := state.(linState), input.(linIn), output.(linOut)
		switch in.kind {
		case linPost:
			if in.after != "" && !slices.Contains(s.ledger, in.after) {
				if out.unknown {
					return []any{s}
				}
				return nil
			}
			t := s
			t.ledger = append(slices.Clip(s.ledger), in.key)
			if out.unknown {
				return []any{s, t}
			}
			return []any{t}
		case linNext:
			rs := s.read(in.coordinator, strict)
			if out.unknown {
				rs = append(rs, readResult{s: s})
			}
			return matchRead(rs, out)
		case linTouch:
			t := s
			t.tokens = setAdd(t.tokens, in.token)
			u := t.noteSeen(in.coordinator)
			if out.unknown {
				return []any{t, u}
			}
			return []any{u}
		case linConsume:
			t := s
			t.tokens = setAdd(t.tokens, in.token)
			u := t
			if !u.fenced(in.coordinator) {
				if u.sealed && u.batch != "" && u.batch == in.key {
					u.acked, u.sealed, u.batch, u.from, u.to = u.to, false, "", 0, 0
				}
				u = u.noteSeen(in.coordinator)
			}
			if out.unknown {
				return []any{t, u}
			}
			return []any{u}
		case linRead:
			if !setHas(s.tokens, in.token) {
				return nil
			}
			s.tokens = setDel(s.tokens, in.token)
			rs := s.read(in.coordinator, strict)
			if out.unknown {
				rs = append(rs, readResult{s: s})
			}
			return matchRead(rs, out)
		case linAdopt:
			t, ans := s.adopt(in.coordinator)
			switch {
			case out.unknown:
				return []any{s, t}
			case ans == out.status:
				return []any{t}
			}
			return nil
		}
		return nil
	}
}

func linEqual(a, b any) bool {
	x, y := a.(linState), b.(linState)
	return x.acked == y.acked && x.sealed == y.sealed && x.batch == y.batch && x.from == y.from && x.to == y.to &&
		x.used == y.used && x.reader == y.reader && x.seen == y.seen && x.superseded == y.superseded &&
		x.tokens == y.tokens && slices.Equal(x.ledger, y.ledger)
}

func linHash(a any) uint64 {
	x := a.(linState)
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%v|%s|%d|%d|%s|%s|%s|%s|%s|%d", x.acked, x.sealed, x.batch, x.from, x.to, x.used, x.reader,
		x.seen, x.superseded, x.tokens, len(x.ledger))
	for _, k := range x.ledger {
		h.Write([]byte(k))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

func describe(in, out any) string {
	i, o := in.(linIn), out.(linOut)
	names := map[linKind]string{linPost: "post", linNext: "next", linTouch: "touch", linConsume: "ack", linRead: "read", linAdopt: "adopt"}
	res := o.status
	if o.unknown {
		res = "?"
	}
	if o.status == mailDelivery {
		res = fmt.Sprintf("%s %s %d rows", o.status, o.batch, len(o.keys))
	}
	arg := i.key
	if len(arg) > 24 {
		arg = arg[len(arg)-24:]
	}
	return fmt.Sprintf("%s(%s %q) -> %s", names[i.kind], i.coordinator, arg, res)
}

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
