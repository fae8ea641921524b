package protocol

import (
	"encoding/json"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

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
