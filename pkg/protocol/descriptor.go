package protocol

import (
	"slices"
	"strconv"
)

// EncodeDescriptor encodes the descriptor with its capabilities in sorted
// order. Every support value must be supported or partial: any other makes
// the whole descriptor unreadable.
func EncodeDescriptor(d Descriptor) ([]byte, error) {
	if err := validDescriptor(d); err != nil {
		return nil, internal("descriptor", err)
	}
	b := appendString([]byte(`{"backend":`), d.Backend)
	b = appendString(append(b, `,"house":`...), d.House)
	b = append(b, `,"capabilities":{`...)
	names := make([]string, 0, len(d.Capabilities))
	for name := range d.Capabilities {
		names = append(names, name)
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, name), ':')
		b = appendString(b, d.Capabilities[name])
	}
	b = append(b, '}')
	if ws := d.WorkerSelection; ws != nil {
		b = append(b, `,"workerSelection":{"families":[`...)
		for i, f := range ws.Families {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, f)
		}
		b = strconv.AppendBool(append(b, `],"model":`...), ws.Model)
		b = append(appendString(append(b, `,"effort":`...), ws.Effort), '}')
	}
	return append(b, '}'), nil
}

func isEffortMode(s string) bool {
	return s == EffortUnsupported || s == EffortWithModel || s == EffortAlways
}

func validDescriptor(d Descriptor) error {
	switch {
	case !IsIdentifier(d.Backend):
		return invalidf("backend", msgIdentifier)
	case !IsIdentifier(d.House):
		return invalidf("house", msgIdentifier)
	}
	for name, support := range d.Capabilities {
		if !isTextN(name, MaxReferenceLen) {
			return invalidf("capabilities", "names must be short text")
		}
		if support != SupportSupported && support != SupportPartial {
			return invalidf("capabilities", "every value must be supported or partial")
		}
	}
	if ws := d.WorkerSelection; ws != nil {
		for _, f := range ws.Families {
			if !isTextN(f, MaxReferenceLen) {
				return invalidf("workerSelection.families", "must be short texts")
			}
		}
		if !isEffortMode(ws.Effort) {
			return invalidf("workerSelection.effort", "must be unsupported, with-model or always")
		}
	}
	return nil
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
