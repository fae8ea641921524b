package protocol

import (
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// The Decode functions classify every failure by the answer it deserves:
//
//   - galleyerr.Malformed: the body is not JSON, or a value of the envelope
//     has the wrong JSON type. The API may answer 400.
//   - galleyerr.Invalid: well-formed JSON that breaks a rule: an unknown or
//     missing field, a broken limit. For an effect the API answers 200
//     not-applied "rejected", the only answer the client reads as a definite
//     refusal.
//
// Wrong types are reported before broken rules, whatever their order in the
// body, so the kind never depends on key order. Keys match exactly (not
// case-insensitively as encoding/json does); a duplicate key is tolerated and
// its last value wins, as with encoding/json. A null counts as absent for a
// field the object allows. Messages name the field and the rule, never a
// value from the body.

// dec carries the kind of a type error and the first rule broken.
type dec struct {
	typeKind galleyerr.Kind
	err      error
	src      []byte // the input, for raw spans
}

func (d *dec) note(err error) {
	if d.err == nil {
		d.err = err
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *dec) typeErr(path, want string, got jkind) error {
	if path == "" {
		path = "body"
	}
	return galleyerr.E(d.typeKind, path+": must be "+want+", not "+jkindNames[got])
}

func missing(path, key string) error {
	return galleyerr.E(galleyerr.Invalid, join(path, key)+": missing")
}

// fieldName quotes a key for a message only when it cannot carry anything
// but a plain name.
func fieldName(m *jmember) string {
	if m.keyBad || len(m.key) > MaxIdentifierLen || !isGraphicString(m.key) {
		return "a field"
	}
	return strconv.Quote(m.key)
}

func unknownField(path string, m *jmember) error {
	where := ""
	if path != "" {
		where = " in " + path
	}
	return galleyerr.E(galleyerr.Invalid, "unknown field "+fieldName(m)+where)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// only notes an unknown field of v.
func (d *dec) only(v *jvalue, path string, allowed ...string) {
	for i := range v.kids {
		if m := &v.kids[i]; m.keyBad || !contains(allowed, m.key) {
			d.note(unknownField(path, m))
			return
		}
	}
}

// field returns the member key of o, or nil when it is absent or null.
func field(o *jvalue, key string) *jvalue {
	v, ok := o.get(key)
	if !ok || v.kind == jNull {
		return nil
	}
	return v
}

// str returns the string at key and whether it is present.
func (d *dec) str(o *jvalue, path, key string) (string, bool, error) {
	v := field(o, key)
	if v == nil {
		return "", false, nil
	}
	if v.kind != jString {
		return "", false, d.typeErr(join(path, key), "a string", v.kind)
	}
	if v.bad {
		d.note(invalidf(join(path, key), "must be valid UTF-8"))
	}
	return v.s, true, nil
}

// need returns the string at key, noting a missing one or one that fails ok.
func (d *dec) need(o *jvalue, path, key string, ok func(string) bool, msg string) (string, error) {
	s, present, err := d.str(o, path, key)
	switch {
	case err != nil:
		return "", err
	case !present:
		d.note(missing(path, key))
	case !ok(s):
		d.note(invalidf(join(path, key), msg))
	}
	return s, nil
}

// opt is need for an optional string: nil when absent.
func (d *dec) opt(o *jvalue, path, key string, ok func(string) bool, msg string) (*string, error) {
	s, present, err := d.str(o, path, key)
	if err != nil || !present {
		return nil, err
	}
	if !ok(s) {
		d.note(invalidf(join(path, key), msg))
	}
	return &s, nil
}

// integer returns the integer at key and whether it is present. A number
// with a fraction or exponent, or out of int64's range, is a type error, as
// encoding/json treats it.
func (d *dec) integer(o *jvalue, path, key string) (int64, bool, error) {
	v := field(o, key)
	if v == nil {
		return 0, false, nil
	}
	if v.kind != jNumber {
		return 0, false, d.typeErr(join(path, key), "an integer", v.kind)
	}
	n, err := strconv.ParseInt(v.s, 10, 64)
	if err != nil {
		return 0, false, galleyerr.E(d.typeKind, join(path, key)+": must be an integer")
	}
	return n, true, nil
}

// object returns the object at key, nil when absent or null.
func (d *dec) object(o *jvalue, path, key string) (*jvalue, error) {
	v := field(o, key)
	if v != nil && v.kind != jObject {
		return nil, d.typeErr(join(path, key), "an object", v.kind)
	}
	return v, nil
}

// resource reads the resource at key, nil when absent or null.
func (d *dec) resource(o *jvalue, path, key, kind string) (*Resource, error) {
	v := field(o, key)
	if v == nil {
		return nil, nil
	}
	r, err := d.resourceValue(v, join(path, key), kind)
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// resourceValue reads a resource: exactly {kind, backend, handle}. kind
// restricts the resource kind when not empty.
func (d *dec) resourceValue(v *jvalue, p, kind string) (Resource, error) {
	var r Resource
	if v.kind != jObject {
		return r, d.typeErr(p, "an object", v.kind)
	}
	d.only(v, p, "kind", "backend", "handle")
	var err error
	if r.Kind, err = d.need(v, p, "kind", IsResourceKind, "must be one of worker, worktree, terminal, branch, schedule"); err != nil {
		return r, err
	}
	if r.Backend, err = d.need(v, p, "backend", IsIdentifier, msgIdentifier); err != nil {
		return r, err
	}
	if r.Handle, err = d.need(v, p, "handle", IsReference, msgReference); err != nil {
		return r, err
	}
	if kind != "" && IsResourceKind(r.Kind) && r.Kind != kind {
		d.note(invalidf(p+".kind", "must be "+kind))
	}
	return r, nil
}

func (d *dec) needResource(o *jvalue, path, key, kind string) (Resource, error) {
	r, err := d.resource(o, path, key, kind)
	if err != nil {
		return Resource{}, err
	}
	if r == nil {
		d.note(missing(path, key))
		return Resource{}, nil
	}
	return *r, nil
}

// DecodeWorkerCall reads the body of workers/observe and workers/usage:
// exactly {"worker": <resource of kind worker>}.
func DecodeWorkerCall(body []byte) (WorkerCall, error) {
	root, err := parseJSON(body)
	if err != nil {
		return WorkerCall{}, err
	}
	d := dec{typeKind: galleyerr.Malformed}
	var c WorkerCall
	if root.kind != jObject {
		return c, d.typeErr("", "an object", root.kind)
	}
	d.only(&root, "", "worker")
	if c.Worker, err = d.needResource(&root, "", "worker", KindWorker); err != nil {
		return WorkerCall{}, err
	}
	if d.err != nil {
		return WorkerCall{}, d.err
	}
	return c, nil
}
