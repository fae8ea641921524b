package history

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
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
