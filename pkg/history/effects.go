package history

import (
	"bytes"

	"github.com/galley-run/galley/pkg/protocol"
)

// checkReceipts: every applied answer of a key (effect or lookup) carries
// the same receipt bytes and the same request fingerprint; a receipt
// creates at most one worker and one branch, and no other key's receipt
// creates the same one.
func checkReceipts(ix *index, r *Report) {
	workerOwner := map[string]*effectOp{}
	branchOwner := map[string]*effectOp{}
	for _, key := range sortedKeys(ix.byKey) {
		var first *effectOp
		for _, e := range ix.byKey[key] {
			if e.answer != ansApplied {
				continue
			}
			r.Checked["receipts"]++
			if first == nil {
				first = e
				continue
			}
			if !bytes.Equal(e.receipt, first.receipt) {
				r.add("receipt-changed", []int{first.ID, e.ID}, "key %q: receipt %s, later %s", key, first.receipt, e.receipt)
			}
			if e.fingerprint != first.fingerprint {
				r.add("key-reused-applied", []int{first.ID, e.ID}, "key %q answered applied for two different requests", key)
			}
		}
		if first == nil {
			continue
		}
		workers, branches := 0, 0
		for _, res := range first.parsed.Created {
			var owners map[string]*effectOp
			switch res.Kind {
			case protocol.KindWorker:
				workers++
				owners = workerOwner
			case protocol.KindBranch:
				branches++
				owners = branchOwner
			default:
				continue
			}
			if o := owners[res.Handle]; o != nil && o.key != key && !released(ix, res, o, first) {
				inv := "duplicate-worker"
				if res.Kind == protocol.KindBranch {
					inv = "duplicate-branch"
				}
				r.add(inv, []int{o.ID, first.ID}, "%s %q created by keys %q and %q", res.Kind, res.Handle, o.key, key)
			}
			owners[res.Handle] = first
		}
		if workers > 1 {
			r.add("duplicate-worker", []int{first.ID}, "key %q created %d workers", key, workers)
		}
		if branches > 1 {
			r.add("duplicate-branch", []int{first.ID}, "key %q created %d branches", key, branches)
		}
	}
}

// released reports whether res, created by a, was released by an effect
// that was called before b's answer, so b may legitimately create it anew.
func released(ix *index, res protocol.Resource, a, b *effectOp) bool {
	for _, t := range ix.releases[res] {
		if t > a.Call && t < b.Return {
			return true
		}
	}
	return false
}

// checkPromises: an absent lookup or a not-applied answer for a request is
// broken by an applied answer for the same key and request that arrived
// (or was answered applied) before the promise was asked for.
func checkPromises(ix *index, r *Report) {
	for _, key := range sortedKeys(ix.byKey) {
		es := ix.byKey[key]
		for _, p := range es {
			inv := ""
			switch {
			case p.lookup && p.answer == ansAbsent:
				inv = "absent-broken"
			case !p.lookup && p.answer == ansNotApplied:
				inv = "not-applied-broken"
			default:
				continue
			}
			r.Checked["promises"]++
			for _, a := range es {
				if a.answer != ansApplied || a.fingerprint != p.fingerprint {
					continue
				}
				// An applied effect copy that arrived before the promise was
				// asked, or any applied answer given before it.
				before := a.Return < p.Call
				if !a.lookup {
					before = a.arrivedBy() < p.Call
				}
				if before {
					r.add(inv, []int{a.ID, p.ID}, "key %q: answered %s at %d, but a copy that arrived by %d applied",
						key, p.answer, p.Call, a.arrivedBy())
				}
			}
		}
	}
}

// checkInventory: no key owns two workers or two branches; every resource
// an applied launch created is listed by every later inventory until it is
// released (nothing acknowledged is lost, across restarts too).
func checkInventory(ix *index, r *Report) {
	for _, inv := range ix.inventory {
		r.Checked["inventories"]++
		workers := map[string]string{}
		branches := map[string]string{}
		listed := map[protocol.Resource]string{}
		for _, row := range inv.rows {
			owner := ""
			if row.Owner != nil {
				owner = *row.Owner
			}
			listed[row.Resource] = owner
			if owner == "" {
				continue
			}
			var seen map[string]string
			switch row.Resource.Kind {
			case protocol.KindWorker:
				seen = workers
			case protocol.KindBranch:
				seen = branches
			default:
				continue
			}
			if h, dup := seen[owner]; dup {
				name := "duplicate-worker"
				if row.Resource.Kind == protocol.KindBranch {
					name = "duplicate-branch"
				}
				r.add(name, []int{inv.ID}, "key %q owns %s %q and %q", owner, row.Resource.Kind, h, row.Resource.Handle)
			}
			seen[owner] = row.Resource.Handle
		}
		if len(inv.rows) >= 1024 {
			continue // the inventory is cut to the newest rows: absence proves nothing
		}
		for _, e := range ix.effects {
			if e.Call > inv.Call {
				break
			}
			if e.answer != ansApplied || e.Return > inv.Call {
				continue
			}
			for _, res := range e.parsed.Created {
				if releaseCalled(ix, res, inv.Return) {
					continue
				}
				r.Checked["kept-resources"]++
				owner, ok := listed[res]
				if !ok {
					r.add("applied-lost", []int{e.ID, inv.ID}, "%s %q created by key %q is not in the inventory", res.Kind, res.Handle, e.key)
				} else if owner != e.key {
					r.add("applied-lost", []int{e.ID, inv.ID}, "%s %q created by key %q is listed with owner %q", res.Kind, res.Handle, e.key, owner)
				}
			}
		}
	}
}

// releaseCalled reports whether a release of res was called before t.
func releaseCalled(ix *index, res protocol.Resource, t int64) bool {
	rs := ix.releases[res]
	return len(rs) > 0 && rs[0] < t
}
