package protocol

import (
	"encoding/json"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// The decoders below classify every failure by the answer it deserves:
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

// DecodeEffectCall reads the body of POST /v1/effects or /v1/effects/lookup
// and validates its envelope: run and key are references, house, backend,
// credential and task identifiers, attempt at least 1, and the executor
// named. The effect itself stays raw (see DecodeWorkerEffect), so that an
// executor galley does not serve can be answered unsupported unread.
func DecodeEffectCall(body []byte) (EffectCall, error) {
	root, err := parseJSON(body)
	if err != nil {
		return EffectCall{}, err
	}
	d := dec{typeKind: galleyerr.Malformed, src: body}
	c, err := d.effectCall(&root)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return EffectCall{}, err
	}
	return c, nil
}

func (d *dec) effectCall(root *jvalue) (EffectCall, error) {
	var c EffectCall
	if root.kind != jObject {
		return c, d.typeErr("", "an object", root.kind)
	}
	d.only(root, "", "run", "request")
	var err error
	if c.Run, err = d.need(root, "", "run", IsReference, msgReference); err != nil {
		return c, err
	}
	req, err := d.object(root, "", "request")
	if err != nil {
		return c, err
	}
	if req == nil {
		d.note(missing("", "request"))
		return c, nil
	}
	const rp = "request"
	d.only(req, rp, "house", "backend", "credential", "task", "attempt", "key", "effect")
	r := &c.Request
	for _, f := range [...]struct {
		key string
		dst *string
	}{{"house", &r.House}, {"backend", &r.Backend}, {"credential", &r.Credential}, {"task", &r.Task}} {
		if *f.dst, err = d.need(req, rp, f.key, IsIdentifier, msgIdentifier); err != nil {
			return c, err
		}
	}
	attempt, present, err := d.integer(req, rp, "attempt")
	switch {
	case err != nil:
		return c, err
	case !present:
		d.note(missing(rp, "attempt"))
	case attempt < 1:
		d.note(invalidf(rp+".attempt", "must be at least 1"))
	}
	r.Attempt = attempt
	if r.Key, err = d.need(req, rp, "key", IsReference, msgReference); err != nil {
		return c, err
	}
	target, err := d.object(req, rp, "effect")
	if err != nil {
		return c, err
	}
	if target == nil {
		d.note(missing(rp, "effect"))
		return c, nil
	}
	const tp = "request.effect"
	d.only(target, tp, "executor", "effect")
	if r.Effect.Executor, err = d.need(target, tp, "executor", func(s string) bool { return s != "" }, "must not be empty"); err != nil {
		return c, err
	}
	// The effect may be any JSON value here; only its executor reads it.
	if v, ok := target.get("effect"); ok {
		r.Effect.Effect = append(json.RawMessage(nil), d.src[v.start:v.end]...)
	} else {
		d.note(missing(tp, "effect"))
	}
	return c, nil
}

// effectFields lists the fields each worker effect type allows besides
// "type".
var effectFields = map[string][]string{
	OpLaunch:  {"role", "workspace", "brief", "branch", "pinned", "agent"},
	OpMessage: {"worker", "body"},
	OpReply:   {"worker", "question", "body"},
	OpCancel:  {"worker"},
	OpRelease: {"resource"},
}

func isEffectField(key string) bool {
	for _, fs := range effectFields {
		if contains(fs, key) {
			return true
		}
	}
	return false
}

// effectPath is where a worker effect sits in the call, for messages.
const effectPath = "request.effect.effect"

// DecodeWorkerEffect reads the effect of the worker executor and checks
// that it carries exactly the fields its type allows, each within its
// limits. Its errors are Malformed only when raw is not JSON, Invalid
// otherwise (an unknown type included).
func DecodeWorkerEffect(raw json.RawMessage) (WorkerEffect, error) {
	root, err := parseJSON(raw)
	if err != nil {
		return WorkerEffect{}, err
	}
	d := dec{typeKind: galleyerr.Invalid}
	e, err := d.workerEffect(&root)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return WorkerEffect{}, err
	}
	return e, nil
}

func (d *dec) workerEffect(root *jvalue) (WorkerEffect, error) {
	var e WorkerEffect
	const p = effectPath
	if root.kind != jObject {
		return e, d.typeErr(p, "an object", root.kind)
	}
	typ, present, err := d.str(root, p, "type")
	if err != nil {
		return e, err
	}
	if !present {
		return e, missing(p, "type")
	}
	allowed, known := effectFields[typ]
	if !known {
		return e, invalidf(p+".type", "must be one of launch-worker, message-worker, reply-to-worker, cancel-worker, release-resource")
	}
	e.Type = typ
	for i := range root.kids {
		m := &root.kids[i]
		if !m.keyBad && (m.key == "type" || contains(allowed, m.key)) {
			continue
		}
		if !m.keyBad && isEffectField(m.key) {
			return e, galleyerr.E(galleyerr.Invalid, p+": field "+strconv.Quote(m.key)+" is not allowed in "+typ)
		}
		return e, unknownField(p, m)
	}
	switch typ {
	case OpLaunch:
		err = d.launch(root, &e)
	case OpMessage, OpReply:
		if e.Worker, err = d.requiredResource(root, p, "worker", KindWorker); err != nil {
			return e, err
		}
		if typ == OpReply {
			var q string
			if q, err = d.need(root, p, "question", IsReference, msgReference); err != nil {
				return e, err
			}
			e.Question = &q
		}
		var body string
		body, err = d.need(root, p, "body", IsText, msgText)
		e.Body = &body
	case OpCancel:
		e.Worker, err = d.requiredResource(root, p, "worker", KindWorker)
	case OpRelease:
		e.Resource, err = d.requiredResource(root, p, "resource", "")
	}
	return e, err
}

func (d *dec) requiredResource(o *jvalue, path, key, kind string) (*Resource, error) {
	r, err := d.needResource(o, path, key, kind)
	return &r, err
}

func (d *dec) launch(o *jvalue, e *WorkerEffect) error {
	const p = effectPath
	var err error
	if e.Role, err = d.need(o, p, "role", IsRole, msgRole); err != nil {
		return err
	}
	ws, err := d.object(o, p, "workspace")
	if err != nil {
		return err
	}
	if ws == nil {
		d.note(missing(p, "workspace"))
	} else if e.Workspace, err = d.workspace(ws); err != nil {
		return err
	}
	brief, err := d.need(o, p, "brief", IsText, msgText)
	if err != nil {
		return err
	}
	e.Brief = &brief
	if e.Branch, err = d.opt(o, p, "branch", IsBranchName, msgBranch); err != nil {
		return err
	}
	pinned, err := d.object(o, p, "pinned")
	if err != nil {
		return err
	}
	if pinned != nil {
		const pp = p + ".pinned"
		d.only(pinned, pp, "head", "report_path")
		e.Pinned = &Pinned{}
		if e.Pinned.Head, err = d.need(pinned, pp, "head", IsCommitID, msgCommit); err != nil {
			return err
		}
		if e.Pinned.ReportPath, err = d.need(pinned, pp, "report_path", IsReportPath, msgReportPath); err != nil {
			return err
		}
	}
	agent, err := d.object(o, p, "agent")
	if err != nil {
		return err
	}
	if agent != nil {
		const ap = p + ".agent"
		d.only(agent, ap, "agent", "model", "effort")
		e.Agent = &AgentSelection{}
		if e.Agent.Agent, err = d.need(agent, ap, "agent", IsAgentFamily, msgAgent); err != nil {
			return err
		}
		// An empty model or effort is refused rather than read as absent, so
		// that a selection is never silently widened.
		model, err := d.opt(agent, ap, "model", IsModel, msgModel)
		if err != nil {
			return err
		}
		if model != nil {
			e.Agent.Model = *model
		}
		effort, err := d.opt(agent, ap, "effort", IsEffort, msgEffort)
		if err != nil {
			return err
		}
		if effort != nil {
			e.Agent.Effort = *effort
		}
	}
	return nil
}

func (d *dec) workspace(ws *jvalue) (*Workspace, error) {
	const wp = effectPath + ".workspace"
	w := &Workspace{}
	var err error
	if w.Type, err = d.need(ws, wp, "type", func(s string) bool {
		return s == WorkspaceIsolated || s == WorkspaceExisting
	}, "must be isolated or existing"); err != nil {
		return nil, err
	}
	switch w.Type {
	case WorkspaceIsolated:
		d.only(ws, wp, "type")
	case WorkspaceExisting:
		d.only(ws, wp, "type", "resource")
		if w.Resource, err = d.requiredResource(ws, wp, "resource", KindWorktree); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Mailbox operations, the last path segment of each mailbox route.
const (
	MailboxNext        = "next"
	MailboxAcknowledge = "acknowledge"
	MailboxAwait       = "await"
	MailboxAdopt       = "adopt"
)

// DecodeMailboxCall reads the body of a mailbox call for op (next,
// acknowledge, await or adopt): run and coordinator always, delivery only
// for acknowledge, waitMs (0 to 900000) only for await.
func DecodeMailboxCall(body []byte, op string) (MailboxCall, error) {
	var extra string
	switch op {
	case MailboxNext, MailboxAdopt:
	case MailboxAcknowledge:
		extra = "delivery"
	case MailboxAwait:
		extra = "waitMs"
	default:
		return MailboxCall{}, galleyerr.E(galleyerr.Other, "protocol: unknown mailbox operation "+strconv.Quote(op))
	}
	root, err := parseJSON(body)
	if err != nil {
		return MailboxCall{}, err
	}
	d := dec{typeKind: galleyerr.Malformed}
	c, err := d.mailboxCall(&root, op, extra)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return MailboxCall{}, err
	}
	return c, nil
}

func (d *dec) mailboxCall(root *jvalue, op, extra string) (MailboxCall, error) {
	var c MailboxCall
	if root.kind != jObject {
		return c, d.typeErr("", "an object", root.kind)
	}
	for i := range root.kids {
		m := &root.kids[i]
		switch {
		case m.keyBad:
		case m.key == "run" || m.key == "coordinator" || m.key == extra:
			continue
		case m.key == "delivery" || m.key == "waitMs":
			d.note(galleyerr.E(galleyerr.Invalid, "field "+strconv.Quote(m.key)+" is not allowed in "+op))
			continue
		}
		d.note(unknownField("", m))
	}
	var err error
	if c.Run, err = d.need(root, "", "run", IsReference, msgReference); err != nil {
		return c, err
	}
	if c.Coordinator, err = d.need(root, "", "coordinator", IsReference, msgReference); err != nil {
		return c, err
	}
	switch extra {
	case "delivery":
		if c.Delivery, err = d.need(root, "", "delivery", IsReference, msgReference); err != nil {
			return c, err
		}
	case "waitMs":
		ms, present, err := d.integer(root, "", "waitMs")
		switch {
		case err != nil:
			return c, err
		case !present:
			d.note(missing("", "waitMs"))
		case ms < 0 || ms > MaxWaitMs:
			d.note(invalidf("waitMs", "must be 0 to 900000"))
		}
		c.WaitMs = &ms
	}
	return c, nil
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
