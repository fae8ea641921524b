package history

import (
	"bytes"
	"math"
	"sort"
)

// checkBatches: every answer naming a batch id carries the same batch
// (replays are identical), and once an acknowledgement has moved past a
// batch, no answer asked for afterwards names it again (ids are never
// reused).
func checkBatches(ix *index, r *Report) {
	for _, run := range ix.runs {
		first := map[string]*mailOp{}
		consumed := map[string]*mailOp{} // batch -> the earliest-returning ack past it
		for _, m := range ix.mail[run] {
			if m.answer == mailDelivery {
				r.Checked["replays"]++
				if f := first[m.batch]; f == nil {
					first[m.batch] = m
				} else if !bytes.Equal(f.raw, m.raw) {
					r.add("replay-differs", []int{f.ID, m.ID}, "run %q batch %q: %s, later %s", run, m.batch, f.raw, m.raw)
				}
			}
			if m.Route == Acknowledge && (m.answer == mailEmpty || (m.answer == mailDelivery && m.batch != m.delivery)) {
				if c := consumed[m.delivery]; c == nil || m.Return < c.Return {
					consumed[m.delivery] = m
				}
			}
		}
		for _, m := range ix.mail[run] {
			if m.answer != mailDelivery {
				continue
			}
			if c := consumed[m.batch]; c != nil && m.Call > c.Return {
				r.add("batch-reused", []int{c.ID, m.ID}, "run %q: batch %q answered again after an acknowledgement moved past it", run, m.batch)
			}
		}
	}
}

// batchOrder orders a run's delivered batches. A batch is sealed only after
// the one before it was acknowledged, and a coordinator acknowledges only a
// batch it was answered, so the earliest answer naming a batch returns
// before the earliest answer naming the next one: ordering by that instant
// is the sealing order.
func batchOrder(ms []*mailOp) []*mailOp {
	firstReturn := map[string]*mailOp{}
	for _, m := range ms {
		if m.answer != mailDelivery {
			continue
		}
		if f := firstReturn[m.batch]; f == nil || m.Return < f.Return {
			firstReturn[m.batch] = m
		}
	}
	out := make([]*mailOp, 0, len(firstReturn))
	for _, m := range firstReturn {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Return < out[j].Return })
	return out
}

// checkDelivery: every row a worker posted (answered 200) is delivered in
// some batch once a read asked for after the post answers empty; and each
// worker's rows arrive in the order it posted them.
func checkDelivery(ix *index, r *Report) {
	for _, run := range ix.runs {
		ms := ix.mail[run]
		// position of each delivered row, by id and by content
		pos := map[string]int{}
		byContent := map[string]int{}
		n := 0
		for _, b := range batchOrder(ms) {
			for _, m := range b.messages {
				if _, dup := pos[m.ID]; dup {
					continue
				}
				pos[m.ID] = n
				if _, dup := byContent[rowKey(m)]; !dup {
					byContent[rowKey(m)] = n
				}
				n++
			}
		}
		// The latest call of a read that answered empty: everything posted
		// before it must have been delivered.
		drained := int64(math.MinInt64)
		for _, m := range ms {
			if m.answer == mailEmpty && m.Call > drained {
				drained = m.Call
			}
		}
		last := map[string]int{}   // worker -> position of its previous delivered post
		lastOp := map[string]int{} // worker -> that post's op
		for _, p := range ix.posts[run] {
			if !p.Answered() {
				continue
			}
			at, ok := pos[p.id]
			if p.id == "" || !ok {
				at, ok = byContent[p.key()]
			}
			if !ok {
				if p.Return < drained {
					r.Checked["posts"]++
					r.add("message-lost", []int{p.ID}, "run %q: %s row %q of worker %q posted but never delivered before an empty answer",
						run, p.row.Kind, p.row.Body, p.worker)
				}
				continue
			}
			r.Checked["posts"]++
			if prev, seen := last[p.worker]; seen && at < prev {
				r.add("order", []int{lastOp[p.worker], p.ID}, "run %q: worker %q rows delivered out of the order posted", run, p.worker)
			}
			last[p.worker], lastOp[p.worker] = at, p.ID
		}
	}
}

// checkFencing: once an adoption by c has answered, a coordinator whose
// non-fenced answer returned before the adoption was asked for (the reader
// then, or one that read before the first adoption) is superseded, and
// every call it makes afterwards answers fenced, adoption included. A
// coordinator that never read before (new) may adopt, and reads without
// fencing only once its own adoption may have taken effect after c's.
func checkFencing(ix *index, r *Report) {
	for _, run := range ix.runs {
		ms := ix.mail[run]
		byCoord := map[string][]*mailOp{}
		for _, m := range ms {
			byCoord[m.coordinator] = append(byCoord[m.coordinator], m)
		}
		// A brand-new coordinator's first call being a fenced adoption.
		for c, own := range byCoord {
			if f := own[0]; f.Route == Adopt && f.answer == mailFenced {
				r.add("new-adopter-fenced", []int{f.ID}, "run %q: coordinator %q adopted for the first time and was fenced", run, c)
			}
		}
		for _, a := range ms {
			if a.Route != Adopt || a.answer != mailAdopted {
				continue
			}
			for c, own := range byCoord {
				if c == a.coordinator {
					continue
				}
				superseded := false
				for _, o := range own {
					if o.Return < a.Call && o.answer != mailFenced && o.answer != mailFailed {
						superseded = true
						break
					}
				}
				for _, x := range own {
					if x.Call <= a.Return || x.answer == mailFenced || x.answer == mailFailed {
						continue
					}
					r.Checked["fencing"]++
					switch {
					case superseded && x.Route == Adopt:
						r.add("adopted-back", []int{a.ID, x.ID}, "run %q: %q adopted back after %q adopted", run, c, a.coordinator)
					case superseded:
						r.add("fenced-not-enforced", []int{a.ID, x.ID}, "run %q: %q answered %s after %q adopted", run, c, x.answer, a.coordinator)
					case x.Route != Adopt && !adoptedSince(own, a, x):
						r.add("fenced-not-enforced", []int{a.ID, x.ID}, "run %q: %q read without adopting after %q adopted", run, c, a.coordinator)
					}
				}
			}
		}
	}
}

// adoptedSince reports whether one of own's adoptions may have taken effect
// after a and before x answered.
func adoptedSince(own []*mailOp, a, x *mailOp) bool {
	for _, b := range own {
		if b.Route == Adopt && b.answer == mailAdopted && b.Call < x.Return && b.Return > a.Call {
			return true
		}
	}
	return false
}
