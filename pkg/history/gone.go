package history

import (
	"github.com/galley-run/galley/pkg/protocol"
)

// checkGone: no released worker ever changes state. A worker is known
// released once a release of it answered applied, or once an observe read
// it missing after a launch that created it answered applied (a worker
// that was made reads missing only once released). From then on every
// observe asked reads missing, and no inventory lists it: a retried launch
// that made it again, or started it again, shows here. (A settled worker
// that reads another state is "settled-changed".)
func checkGone(ix *index, r *Report) {
	launched := map[string]int64{} // worker -> the first return of an applied launch that created it
	gone := map[string]int64{}     // worker -> when it was known released
	goneBy := map[string]int{}     // the op that showed it
	mark := func(h string, at int64, id int) {
		if t, ok := gone[h]; !ok || at < t {
			gone[h], goneBy[h] = at, id
		}
	}
	for _, e := range ix.effects {
		if e.answer != ansApplied || !e.effectOK {
			continue
		}
		switch e.effect.Type {
		case protocol.OpLaunch:
			for _, c := range e.parsed.Created {
				if t, ok := launched[c.Handle]; c.Kind == protocol.KindWorker && (!ok || e.Return < t) {
					launched[c.Handle] = e.Return
				}
			}
		case protocol.OpRelease:
			if res := e.effect.Resource; res != nil && res.Kind == protocol.KindWorker {
				mark(res.Handle, e.Return, e.ID)
			}
		}
	}
	for h, obs := range ix.observes {
		for _, o := range obs {
			if t, ok := launched[h]; ok && o.ok && o.obs.State == protocol.StateMissing && t < o.Call {
				mark(h, o.Return, o.ID)
			}
		}
	}
	for _, h := range sortedKeys(gone) {
		at := gone[h]
		for _, o := range ix.observes[h] {
			if !o.ok || o.Call <= at {
				continue
			}
			r.Checked["released"]++
			if s := o.obs.State; s != protocol.StateMissing && s != protocol.StateUnknown {
				r.add("released-revived", []int{goneBy[h], o.ID}, "worker %q was released, later reads %s", h, s)
			}
		}
		for _, inv := range ix.inventory {
			if inv.Call <= at {
				continue
			}
			r.Checked["released"]++
			for _, row := range inv.rows {
				if row.Resource.Kind == protocol.KindWorker && row.Resource.Handle == h {
					r.add("released-revived", []int{goneBy[h], inv.ID}, "worker %q was released, later listed in the inventory", h)
				}
			}
		}
	}
}
