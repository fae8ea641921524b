package protocol

import "strconv"

func (r Receipt) validate(path string) error {
	if !IsReference(r.Reference) {
		return invalidf(path+".reference", msgReference)
	}
	if n := len(r.Created) + len(r.Touched); n > MaxReceiptResources {
		return invalidf(path, "names "+strconv.Itoa(n)+" resources, more than 16")
	}
	for i, res := range r.Created {
		if err := res.validate(path + ".created[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	for i, res := range r.Touched {
		if err := res.validate(path + ".touched[" + strconv.Itoa(i) + "]"); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks that r is a receipt the client reads: a reference, at
// most 16 resources, each well-formed and in backend.
func (r Receipt) Validate(backend string) error {
	if err := r.validate("receipt"); err != nil {
		return err
	}
	for i, res := range r.Created {
		if res.Backend != backend {
			return invalidf("receipt.created["+strconv.Itoa(i)+"].backend", "must be the service's backend")
		}
	}
	for i, res := range r.Touched {
		if res.Backend != backend {
			return invalidf("receipt.touched["+strconv.Itoa(i)+"].backend", "must be the service's backend")
		}
	}
	return nil
}

// ValidateFor checks the rules the client adds for e's receipt: a launch
// creates exactly one worker and, with a branch, exactly one branch resource,
// in created, whose handle is that branch; a release of anything but a
// branch names no branch.
func (r Receipt) ValidateFor(e WorkerEffect) error {
	count := func(list []Resource, kind string) int {
		n := 0
		for _, res := range list {
			if res.Kind == kind {
				n++
			}
		}
		return n
	}
	switch e.Type {
	case OpLaunch:
		if count(r.Created, KindWorker) != 1 {
			return invalidf("receipt.created", "must hold exactly one worker")
		}
		if e.Branch != nil {
			if count(r.Created, KindBranch) != 1 || count(r.Touched, KindBranch) != 0 {
				return invalidf("receipt", "must name exactly one branch, in created")
			}
			for _, res := range r.Created {
				if res.Kind == KindBranch && res.Handle != *e.Branch {
					return invalidf("receipt.created", "branch handle must be the requested branch")
				}
			}
		}
	case OpRelease:
		if e.Resource != nil && e.Resource.Kind != KindBranch &&
			count(r.Created, KindBranch)+count(r.Touched, KindBranch) != 0 {
			return invalidf("receipt", "a release must not name a branch")
		}
	}
	return nil
}

func appendResource(b []byte, r Resource) []byte {
	b = append(b, `{"kind":`...)
	b = appendString(b, r.Kind)
	b = append(b, `,"backend":`...)
	b = appendString(b, r.Backend)
	b = append(b, `,"handle":`...)
	b = appendString(b, r.Handle)
	return append(b, '}')
}

func appendResources(b []byte, rs []Resource) []byte {
	b = append(b, '[')
	for i, r := range rs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendResource(b, r)
	}
	return append(b, ']')
}

func appendReceipt(b []byte, r Receipt) []byte {
	b = append(b, `{"reference":`...)
	b = appendString(b, r.Reference)
	b = append(b, `,"created":`...)
	b = appendResources(b, r.Created)
	b = append(b, `,"touched":`...)
	b = appendResources(b, r.Touched)
	return append(b, '}')
}

// EncodeReceipt encodes r as {"reference","created","touched"}, with nil
// lists as []. It refuses more than 16 resources or a malformed one.
func EncodeReceipt(r Receipt) ([]byte, error) {
	if err := r.validate("receipt"); err != nil {
		return nil, internal("receipt", err)
	}
	return appendReceipt(nil, r), nil
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

// CreatedHandle answers the handle of the first resource of kind the
// effect created ("" if none): a launch's worker and worktree.
func (r Receipt) CreatedHandle(kind string) string {
	for _, c := range r.Created {
		if c.Kind == kind {
			return c.Handle
		}
	}
	return ""
}
