package history

import (
	"github.com/galley-run/galley/pkg/protocol"
)

// checkWorkerDone: the mailbox's worker-done row for a worker agrees with
// observe. A worker has at most one worker-done row (one id, however often
// batches replay it), its outcome is the settled outcome any observe reads,
// and a worker-done post answered 200 reported that same outcome. A
// settled outcome and a delivered row are both final, so any pair that
// differs is a contradiction whatever the order of the calls.
func checkWorkerDone(ix *index, r *Report) {
	type row struct {
		outcome string
		op      int
	}
	rows := map[string]map[string]row{} // worker -> row id -> row
	for _, run := range ix.runs {
		for _, m := range ix.mail[run] {
			if m.answer != mailDelivery {
				continue
			}
			for _, msg := range m.messages {
				if msg.Kind != protocol.MsgWorkerDone || msg.Worker == nil {
					continue
				}
				h := msg.Worker.Handle
				if rows[h] == nil {
					rows[h] = map[string]row{}
				}
				if _, ok := rows[h][msg.ID]; !ok {
					rows[h][msg.ID] = row{outcome: msg.Outcome, op: m.ID}
				}
			}
		}
	}
	posted := map[string][]*postOp{} // worker -> worker-done posts answered 200
	for _, run := range ix.runs {
		for _, p := range ix.posts[run] {
			if p.Answered() && p.row.Kind == protocol.MsgWorkerDone {
				posted[p.worker] = append(posted[p.worker], p)
			}
		}
	}
	for _, h := range sortedKeys(rows) {
		ids := sortedKeys(rows[h])
		r.Checked["worker-done"] += len(ids)
		if len(ids) > 1 {
			a, b := rows[h][ids[0]], rows[h][ids[1]]
			r.add("worker-done-differs", []int{a.op, b.op}, "worker %q has %d worker-done rows (%s %s, %s %s)",
				h, len(ids), ids[0], a.outcome, ids[1], b.outcome)
		}
	}
	for _, h := range sortedKeys(ix.observes) {
		for _, o := range ix.observes[h] {
			if !o.ok || o.obs.State != protocol.StateSettled {
				continue
			}
			for _, id := range sortedKeys(rows[h]) {
				r.Checked["worker-done"]++
				if w := rows[h][id]; w.outcome != o.obs.Outcome {
					r.add("worker-done-differs", []int{w.op, o.ID}, "worker %q: the mailbox's worker-done %s says %s, observe says settled %s",
						h, id, w.outcome, o.obs.Outcome)
				}
			}
			for _, p := range posted[h] {
				r.Checked["worker-done"]++
				if p.row.Outcome != o.obs.Outcome {
					r.add("worker-done-differs", []int{p.ID, o.ID}, "worker %q: its worker-done %s was accepted, observe says settled %s",
						h, p.row.Outcome, o.obs.Outcome)
				}
			}
		}
	}
}
