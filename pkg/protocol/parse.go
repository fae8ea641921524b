package protocol

import (
	"math"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// The Parse functions read answers the way the kitchn client does, and at
// least as strictly, so that a conformance suite built on them proves galley
// answers what the client reads. An error means the client would find the
// answer unreadable: for an effect, the outcome is then uncertain. Errors are
// Malformed (not JSON, or a wrong JSON type) or Invalid (a broken rule).

func parseWith(body []byte, f func(d *dec, root *jvalue) error) error {
	root, err := parseJSON(body)
	if err != nil {
		return err
	}
	d := dec{typeKind: galleyerr.Malformed}
	if root.kind != jObject {
		return d.typeErr("", "an object", root.kind)
	}
	if err := f(&d, &root); err != nil {
		return err
	}
	return d.err
}

// status reads the required "status" field.
func (d *dec) status(root *jvalue) (string, error) {
	s, present, err := d.str(root, "", "status")
	if err == nil && !present {
		d.note(missing("", "status"))
	}
	return s, err
}

// array returns the array at key, nil when absent or null.
func (d *dec) array(o *jvalue, path, key string) (*jvalue, error) {
	v := field(o, key)
	if v != nil && v.kind != jArray {
		return nil, d.typeErr(join(path, key), "an array", v.kind)
	}
	return v, nil
}

func (d *dec) resources(o *jvalue, path, key string) ([]Resource, error) {
	arr, err := d.array(o, path, key)
	if err != nil {
		return nil, err
	}
	if arr == nil {
		d.note(missing(path, key))
		return nil, nil
	}
	p := join(path, key)
	list := make([]Resource, 0, len(arr.kids))
	for i := range arr.kids {
		el := &arr.kids[i].val
		r, err := d.resourceValue(el, p+"["+strconv.Itoa(i)+"]", "")
		if err != nil {
			return nil, err
		}
		list = append(list, r)
	}
	return list, nil
}

// ParseEffectOutcome reads the 200 answer of POST /v1/effects as the client
// does: applied with a strictly valid receipt whose resources are all in
// backend, or not-applied with one of the five reasons, an optional integer
// retryAfterSeconds (rate-limited only) and an optional real capability
// (unsupported only).
func ParseEffectOutcome(body []byte, backend string) (EffectOutcome, error) {
	var o EffectOutcome
	err := parseWith(body, func(d *dec, root *jvalue) error {
		var err error
		if o.Status, err = d.status(root); err != nil {
			return err
		}
		switch o.Status {
		case StatusApplied:
			d.only(root, "", "status", "receipt")
			o.Receipt, err = d.receipt(root, backend)
			return err
		case StatusNotApplied:
			d.only(root, "", "status", "reason", "retryAfterSeconds", "capability")
			if o.Reason, err = d.need(root, "", "reason", IsReason, "must be rejected, rate-limited, unsupported, cross-house or foreign-backend"); err != nil {
				return err
			}
			n, present, err := d.integer(root, "", "retryAfterSeconds")
			switch {
			case err != nil:
				return err
			case !present:
			case o.Reason != ReasonRateLimited:
				d.note(invalidf("retryAfterSeconds", "only on rate-limited"))
			case n < 0 || n > math.MaxInt32:
				d.note(invalidf("retryAfterSeconds", "must be 0 to 2147483647"))
			default:
				o.RetryAfterSeconds = int(n)
			}
			c, err := d.opt(root, "", "capability", IsCapability, "must be a real capability name")
			if err != nil {
				return err
			}
			if c != nil {
				if o.Reason != ReasonUnsupported {
					d.note(invalidf("capability", "only on unsupported"))
				}
				o.Capability = *c
			}
			return nil
		}
		d.note(invalidf("status", "must be applied or not-applied"))
		return nil
	})
	if err != nil {
		return EffectOutcome{}, err
	}
	return o, nil
}

// ParseLookupAnswer reads the answer of POST /v1/effects/lookup: applied
// with a receipt in backend, absent, or unknown.
func ParseLookupAnswer(body []byte, backend string) (LookupAnswer, error) {
	var a LookupAnswer
	err := parseWith(body, func(d *dec, root *jvalue) error {
		var err error
		if a.Status, err = d.status(root); err != nil {
			return err
		}
		switch a.Status {
		case StatusApplied:
			d.only(root, "", "status", "receipt")
			a.Receipt, err = d.receipt(root, backend)
			return err
		case StatusAbsent, StatusUnknown:
			d.only(root, "", "status")
			return nil
		}
		d.note(invalidf("status", "must be applied, absent or unknown"))
		return nil
	})
	if err != nil {
		return LookupAnswer{}, err
	}
	return a, nil
}

// ParseObservation reads the answer of workers/observe. A state string the
// protocol does not list reads as unknown, never as readiness; settled
// needs an outcome, and no other state may carry one.
func ParseObservation(body []byte) (Observation, error) {
	var o Observation
	err := parseWith(body, func(d *dec, root *jvalue) error {
		d.only(root, "", "state", "outcome")
		state, present, err := d.str(root, "", "state")
		if err != nil {
			return err
		}
		if !present {
			d.note(missing("", "state"))
		}
		o.State = state
		if !IsState(state) {
			o.State = StateUnknown
		}
		outcome, err := d.opt(root, "", "outcome", IsOutcome, "must be succeeded, failed or cancelled")
		switch {
		case err != nil:
			return err
		case o.State == StateSettled && outcome == nil:
			d.note(missing("", "outcome"))
		case o.State != StateSettled && outcome != nil:
			d.note(invalidf("outcome", "only when settled"))
		case outcome != nil:
			o.Outcome = *outcome
		}
		return nil
	})
	if err != nil {
		return Observation{}, err
	}
	return o, nil
}

// ParseInventory reads GET /v1/inventory: at most 1024 rows of exactly
// {"resource","owner","liveness"}, owner a reference or null. A liveness the
// protocol does not list reads as unverifiable.
func ParseInventory(body []byte) (Inventory, error) {
	var inv Inventory
	err := parseWith(body, func(d *dec, root *jvalue) error {
		d.only(root, "", "resources")
		arr, err := d.array(root, "", "resources")
		if err != nil {
			return err
		}
		if arr == nil {
			d.note(missing("", "resources"))
			return nil
		}
		if len(arr.kids) > MaxInventoryRows {
			d.note(invalidf("resources", "more than 1024 rows"))
		}
		inv.Resources = make([]InventoryRow, 0, len(arr.kids))
		for i := range arr.kids {
			row := &arr.kids[i].val
			p := "resources[" + strconv.Itoa(i) + "]"
			if row.kind != jObject {
				return d.typeErr(p, "an object", row.kind)
			}
			d.only(row, p, "resource", "owner", "liveness")
			var r InventoryRow
			if r.Resource, err = d.needResource(row, p, "resource", ""); err != nil {
				return err
			}
			if _, ok := row.get("owner"); !ok {
				d.note(missing(p, "owner"))
			}
			if r.Owner, err = d.opt(row, p, "owner", IsReference, msgReference); err != nil {
				return err
			}
			if r.Liveness, err = d.need(row, p, "liveness", func(string) bool { return true }, ""); err != nil {
				return err
			}
			if !isLiveness(r.Liveness) {
				r.Liveness = LivenessUnverifiable
			}
			inv.Resources = append(inv.Resources, r)
		}
		return nil
	})
	if err != nil {
		return Inventory{}, err
	}
	return inv, nil
}
