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

// receipt reads a receipt strictly: exactly reference, created and
// touched, all present, at most 16 resources, every one in backend.
func (d *dec) receipt(o *jvalue, backend string) (*Receipt, error) {
	v, err := d.object(o, "", "receipt")
	if err != nil {
		return nil, err
	}
	if v == nil {
		d.note(missing("", "receipt"))
		return nil, nil
	}
	const p = "receipt"
	d.only(v, p, "reference", "created", "touched")
	r := &Receipt{}
	if r.Reference, err = d.need(v, p, "reference", IsReference, msgReference); err != nil {
		return nil, err
	}
	if r.Created, err = d.resources(v, p, "created"); err != nil {
		return nil, err
	}
	if r.Touched, err = d.resources(v, p, "touched"); err != nil {
		return nil, err
	}
	if d.err == nil {
		d.note(r.Validate(backend))
	}
	return r, nil
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

// ParseUsageAnswer reads workers/usage: {"status":"none"} or a reported
// usage whose report ValidUsageReport accepts.
func ParseUsageAnswer(body []byte) (UsageAnswer, error) {
	var u UsageAnswer
	err := parseWith(body, func(d *dec, root *jvalue) error {
		var err error
		if u.Status, err = d.status(root); err != nil {
			return err
		}
		switch u.Status {
		case UsageNone:
			d.only(root, "", "status")
			return nil
		case UsageReported:
			d.only(root, "", "status", "report")
			u.Report, err = d.usageReport(root)
			return err
		}
		d.note(invalidf("status", "must be none or reported"))
		return nil
	})
	if err != nil {
		return UsageAnswer{}, err
	}
	return u, nil
}

func (d *dec) usageReport(root *jvalue) (*UsageReport, error) {
	v, err := d.object(root, "", "report")
	if err != nil {
		return nil, err
	}
	if v == nil {
		d.note(missing("", "report"))
		return nil, nil
	}
	const p = "report"
	d.only(v, p, "source", "agent", "model", "tokens", "cost")
	r := &UsageReport{}
	anyStr := func(string) bool { return true }
	if r.Source, err = d.need(v, p, "source", anyStr, ""); err != nil {
		return nil, err
	}
	for _, f := range [...]struct {
		key string
		dst *string
	}{{"agent", &r.Agent}, {"model", &r.Model}} {
		s, err := d.opt(v, p, f.key, func(s string) bool { return s != "" }, "must not be empty")
		if err != nil {
			return nil, err
		}
		if s != nil {
			*f.dst = *s
		}
	}
	tokens, err := d.object(v, p, "tokens")
	if err != nil {
		return nil, err
	}
	if tokens != nil {
		const tp = p + ".tokens"
		d.only(tokens, tp, "input", "output", "cacheRead", "cacheWrite")
		r.Tokens = &Tokens{}
		for _, f := range [...]struct {
			key string
			dst **int64
		}{{"input", &r.Tokens.Input}, {"output", &r.Tokens.Output}, {"cacheRead", &r.Tokens.CacheRead}, {"cacheWrite", &r.Tokens.CacheWrite}} {
			n, present, err := d.integer(tokens, tp, f.key)
			if err != nil {
				return nil, err
			}
			if present {
				*f.dst = &n
			}
		}
	}
	cost, err := d.object(v, p, "cost")
	if err != nil {
		return nil, err
	}
	if cost != nil {
		const cp = p + ".cost"
		d.only(cost, cp, "amount", "basis")
		r.Cost = &Cost{}
		n, present, err := d.integer(cost, cp, "amount")
		if err != nil {
			return nil, err
		}
		if !present {
			d.note(missing(cp, "amount"))
		}
		r.Cost.Amount = n
		if r.Cost.Basis, err = d.need(cost, cp, "basis", anyStr, ""); err != nil {
			return nil, err
		}
	}
	if d.err == nil {
		d.note(ValidUsageReport(*r))
	}
	return r, nil
}

// ParseMailboxAnswer reads a mailbox answer: empty, fenced, or a delivery
// with id, messages and unreadable, each message with an id, a kind and the
// worker. A kind the protocol does not list is kept (the client treats it as
// needing attention).
func ParseMailboxAnswer(body []byte) (MailboxAnswer, error) {
	var a MailboxAnswer
	err := parseWith(body, func(d *dec, root *jvalue) error {
		var err error
		if a.Status, err = d.status(root); err != nil {
			return err
		}
		switch a.Status {
		case MailEmpty, MailFenced:
			d.only(root, "", "status")
			return nil
		case MailDelivery:
			d.only(root, "", "status", "delivery")
			a.Delivery, err = d.delivery(root)
			return err
		}
		d.note(invalidf("status", "must be empty, fenced or delivery"))
		return nil
	})
	if err != nil {
		return MailboxAnswer{}, err
	}
	return a, nil
}

func (d *dec) delivery(root *jvalue) (*Delivery, error) {
	v, err := d.object(root, "", "delivery")
	if err != nil {
		return nil, err
	}
	if v == nil {
		d.note(missing("", "delivery"))
		return nil, nil
	}
	const p = "delivery"
	d.only(v, p, "id", "messages", "unreadable")
	del := &Delivery{}
	if del.ID, err = d.need(v, p, "id", IsReference, msgReference); err != nil {
		return nil, err
	}
	n, present, err := d.integer(v, p, "unreadable")
	switch {
	case err != nil:
		return nil, err
	case !present:
		d.note(missing(p, "unreadable"))
	case n < 0 || n > math.MaxInt32:
		d.note(invalidf(p+".unreadable", "must be 0 to 2147483647"))
	default:
		del.Unreadable = int(n)
	}
	arr, err := d.array(v, p, "messages")
	if err != nil {
		return nil, err
	}
	if arr == nil {
		d.note(missing(p, "messages"))
		return del, nil
	}
	del.Messages = make([]MailMessage, 0, len(arr.kids))
	for i := range arr.kids {
		row := &arr.kids[i].val
		mp := p + ".messages[" + strconv.Itoa(i) + "]"
		if row.kind != jObject {
			return nil, d.typeErr(mp, "an object", row.kind)
		}
		d.only(row, mp, "id", "kind", "worker", "outcome", "subject", "body")
		var m MailMessage
		if m.ID, err = d.need(row, mp, "id", IsReference, msgReference); err != nil {
			return nil, err
		}
		if m.Kind, err = d.need(row, mp, "kind", func(s string) bool { return isTextN(s, MaxReferenceLen) }, "must be a short text"); err != nil {
			return nil, err
		}
		if m.Worker, err = d.resource(row, mp, "worker", KindWorker); err != nil {
			return nil, err
		}
		if m.Worker == nil {
			d.note(missing(mp, "worker"))
		}
		for _, f := range [...]struct {
			key string
			dst *string
			ok  func(string) bool
			msg string
		}{
			{"outcome", &m.Outcome, IsOutcome, "must be succeeded, failed or cancelled"},
			{"subject", &m.Subject, IsText, msgText},
			{"body", &m.Body, IsText, msgText},
		} {
			s, err := d.opt(row, mp, f.key, f.ok, f.msg)
			if err != nil {
				return nil, err
			}
			if s != nil {
				*f.dst = *s
			}
		}
		if d.err == nil {
			d.note(validMessage(mp, m, false))
		}
		del.Messages = append(del.Messages, m)
	}
	return del, nil
}

// ParseAdoptAnswer reads runs/adopt: exactly {} (adopted) or exactly
// {"status":"fenced"}. Anything else, even {"status":"adopted"}, is a failed
// call.
func ParseAdoptAnswer(body []byte) (fenced bool, err error) {
	err = parseWith(body, func(d *dec, root *jvalue) error {
		if len(root.kids) == 0 {
			return nil
		}
		d.only(root, "", "status")
		s, err := d.need(root, "", "status", func(s string) bool { return s == MailFenced }, "must be fenced, or the answer {}")
		fenced = s == MailFenced
		return err
	})
	if err != nil {
		return false, err
	}
	return fenced, nil
}

// ParseDescriptor reads GET /v1/descriptor: backend and house identifiers,
// every capability supported or partial (any other value makes the whole
// descriptor unreadable), and an optional workerSelection of exactly
// families, model and effort.
func ParseDescriptor(body []byte) (Descriptor, error) {
	var desc Descriptor
	err := parseWith(body, func(d *dec, root *jvalue) error {
		d.only(root, "", "backend", "house", "capabilities", "workerSelection")
		var err error
		if desc.Backend, err = d.need(root, "", "backend", IsIdentifier, msgIdentifier); err != nil {
			return err
		}
		if desc.House, err = d.need(root, "", "house", IsIdentifier, msgIdentifier); err != nil {
			return err
		}
		caps, err := d.object(root, "", "capabilities")
		if err != nil {
			return err
		}
		if caps == nil {
			d.note(missing("", "capabilities"))
		} else {
			desc.Capabilities = make(map[string]string, len(caps.kids))
			for i := range caps.kids {
				m := &caps.kids[i]
				if m.val.kind != jString {
					return d.typeErr("capabilities", "an object of strings", m.val.kind)
				}
				if m.keyBad || !isTextN(m.key, MaxReferenceLen) {
					d.note(invalidf("capabilities", "names must be short text"))
				}
				if m.val.s != SupportSupported && m.val.s != SupportPartial {
					d.note(invalidf("capabilities", "every value must be supported or partial"))
				}
				desc.Capabilities[m.key] = m.val.s
			}
		}
		ws, err := d.object(root, "", "workerSelection")
		if err != nil || ws == nil {
			return err
		}
		const wp = "workerSelection"
		d.only(ws, wp, "families", "model", "effort")
		desc.WorkerSelection = &WorkerSelection{}
		fams, err := d.array(ws, wp, "families")
		if err != nil {
			return err
		}
		if fams == nil {
			d.note(missing(wp, "families"))
		} else {
			desc.WorkerSelection.Families = make([]string, 0, len(fams.kids))
			for i := range fams.kids {
				f := &fams.kids[i].val
				if f.kind != jString {
					return d.typeErr(wp+".families", "an array of strings", f.kind)
				}
				if f.bad || !isTextN(f.s, MaxReferenceLen) {
					d.note(invalidf(wp+".families", "must be short texts"))
				}
				desc.WorkerSelection.Families = append(desc.WorkerSelection.Families, f.s)
			}
		}
		model := field(ws, "model")
		switch {
		case model == nil:
			d.note(missing(wp, "model"))
		case model.kind != jBool:
			return d.typeErr(wp+".model", "a boolean", model.kind)
		default:
			desc.WorkerSelection.Model = model.b
		}
		desc.WorkerSelection.Effort, err = d.need(ws, wp, "effort", isEffortMode, "must be unsupported, with-model or always")
		return err
	})
	if err != nil {
		return Descriptor{}, err
	}
	return desc, nil
}
