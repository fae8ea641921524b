package protocol

import "strconv"

// ValidUsageReport checks a usage report the client accepts: a reference
// source; agent, when known, claude or codex; a model name; token counts and
// a cost amount that are not negative; a cost basis of reported or computed;
// and something besides the source. Its errors are Invalid.
func ValidUsageReport(r UsageReport) error {
	if !IsReference(r.Source) {
		return invalidf("report.source", msgReference)
	}
	if r.Agent != "" && !IsAgentFamily(r.Agent) {
		return invalidf("report.agent", "must be claude or codex, or left out")
	}
	if r.Model != "" && !IsModel(r.Model) {
		return invalidf("report.model", msgModel)
	}
	if t := r.Tokens; t != nil {
		counts := [...]struct {
			name string
			n    *int64
		}{{"input", t.Input}, {"output", t.Output}, {"cacheRead", t.CacheRead}, {"cacheWrite", t.CacheWrite}}
		counted := false
		for _, c := range counts {
			if c.n != nil {
				counted = true
				if *c.n < 0 {
					return invalidf("report.tokens."+c.name, "must not be negative")
				}
			}
		}
		if !counted {
			return invalidf("report.tokens", "must hold a count, or be left out")
		}
	}
	if c := r.Cost; c != nil {
		if c.Amount < 0 {
			return invalidf("report.cost.amount", "must not be negative")
		}
		if c.Basis != BasisReported && c.Basis != BasisComputed {
			return invalidf("report.cost.basis", "must be reported or computed")
		}
	}
	if r.Agent == "" && r.Model == "" && r.Tokens == nil && r.Cost == nil {
		return invalidf("report", "holds nothing but its source")
	}
	return nil
}

func appendCount(b []byte, first bool, name string, n *int64) ([]byte, bool) {
	if n == nil {
		return b, first
	}
	if !first {
		b = append(b, ',')
	}
	b = appendString(b, name)
	b = append(b, ':')
	return strconv.AppendInt(b, *n, 10), false
}

// EncodeUsageAnswer encodes {"status":"none"} or a reported usage, leaving
// out what is unknown.
func EncodeUsageAnswer(u UsageAnswer) ([]byte, error) {
	switch u.Status {
	case UsageNone:
		if u.Report != nil {
			return nil, internal("usage answer", invalidf("report", "only when reported"))
		}
		return []byte(`{"status":"none"}`), nil
	case UsageReported:
	default:
		return nil, internal("usage answer", invalidf("status", "must be none or reported"))
	}
	if u.Report == nil {
		return nil, internal("usage answer", invalidf("report", "missing"))
	}
	r := *u.Report
	if err := ValidUsageReport(r); err != nil {
		return nil, internal("usage answer", err)
	}
	b := append([]byte(`{"status":"reported","report":{"source":`), appendString(nil, r.Source)...)
	if r.Agent != "" {
		b = appendString(append(b, `,"agent":`...), r.Agent)
	}
	if r.Model != "" {
		b = appendString(append(b, `,"model":`...), r.Model)
	}
	if t := r.Tokens; t != nil {
		b = append(b, `,"tokens":{`...)
		first := true
		b, first = appendCount(b, first, "input", t.Input)
		b, first = appendCount(b, first, "output", t.Output)
		b, first = appendCount(b, first, "cacheRead", t.CacheRead)
		b, _ = appendCount(b, first, "cacheWrite", t.CacheWrite)
		b = append(b, '}')
	}
	if c := r.Cost; c != nil {
		b = strconv.AppendInt(append(b, `,"cost":{"amount":`...), c.Amount, 10)
		b = append(appendString(append(b, `,"basis":`...), c.Basis), '}')
	}
	return append(b, "}}"...), nil
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
