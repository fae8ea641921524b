package history

import (
	"sort"

	"github.com/galley-run/galley/pkg/protocol"
)

// checkWorkers: an observe asked for after a cancel answered applied reads
// settled; an observe asked for after one that read settled reads the same
// settled outcome (or missing once a release was asked for); a handle no
// receipt or inventory ever named never reads settled.
func checkWorkers(ix *index, r *Report) {
	cancels := map[string][]*effectOp{}
	for _, e := range ix.effects {
		if !e.lookup && e.answer == ansApplied && e.effectOK && e.effect.Type == protocol.OpCancel && e.effect.Worker != nil {
			cancels[e.effect.Worker.Handle] = append(cancels[e.effect.Worker.Handle], e)
		}
	}
	releaseAt := map[string]int64{} // worker handle -> first release call
	for r, times := range ix.releases {
		if r.Kind == protocol.KindWorker && len(times) > 0 {
			if t, ok := releaseAt[r.Handle]; !ok || times[0] < t {
				releaseAt[r.Handle] = times[0]
			}
		}
	}
	for _, h := range sortedKeys(ix.observes) {
		obs := ix.observes[h]
		releasedBy := func(t int64) bool {
			at, ok := releaseAt[h]
			return ok && at < t
		}
		for _, o := range obs {
			if !o.ok {
				continue
			}
			settled := o.obs.State == protocol.StateSettled
			if settled && !ix.created[h] {
				r.add("phantom-settled", []int{o.ID}, "worker %q was never launched but reads settled", h)
			}
			for _, c := range cancels[h] {
				if o.Call > c.Return && !settled && !(o.obs.State == protocol.StateMissing && releasedBy(o.Return)) {
					r.Checked["cancels"]++
					r.add("cancel-not-settled", []int{c.ID, o.ID}, "worker %q reads %s after its cancel answered applied", h, o.obs.State)
				} else if o.Call > c.Return {
					r.Checked["cancels"]++
				}
			}
		}
		// settled never changes: compare each observe with the earliest
		// settled answer that returned before it was asked.
		var first *observeOp
		for _, o := range obs {
			if !o.ok {
				continue
			}
			if first != nil && o.Call > first.Return {
				r.Checked["settled"]++
				switch {
				case o.obs.State == protocol.StateSettled && o.obs.Outcome == first.obs.Outcome:
				case o.obs.State == protocol.StateMissing && releasedBy(o.Return):
				default:
					r.add("settled-changed", []int{first.ID, o.ID}, "worker %q read settled %s, later %s %s",
						h, first.obs.Outcome, o.obs.State, o.obs.Outcome)
				}
			}
			if o.obs.State == protocol.StateSettled && (first == nil || o.Return < first.Return) {
				first = o
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
