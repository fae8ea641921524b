package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// fingerprintTag versions the canonical encoding: a change to it must change
// the tag, so that stored fingerprints are never compared across encodings.
const fingerprintTag = "galley.effect-call.v1\n"

// Fingerprint is the hex SHA-256 of c's canonical encoding (see
// EncodeEffectCall): two bodies that differ only in whitespace, key order,
// duplicate keys or string escapes have one fingerprint; any change of a
// field changes it. It fails when c's worker effect does not decode.
func Fingerprint(c EffectCall) (string, error) {
	b, err := EncodeEffectCall(c)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(fingerprintTag))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// EncodeEffectCall encodes c canonically: compact, fields in the protocol's
// order, the effect of the worker executor re-encoded from its decoded form
// (see EncodeWorkerEffect) and any other executor's effect with sorted keys.
// DecodeEffectCall reads the result back to c.
func EncodeEffectCall(c EffectCall) ([]byte, error) {
	r := c.Request
	b := make([]byte, 0, 256+len(r.Effect.Effect))
	b = appendString(append(b, `{"run":`...), c.Run)
	b = appendString(append(b, `,"request":{"house":`...), r.House)
	b = appendString(append(b, `,"backend":`...), r.Backend)
	b = appendString(append(b, `,"credential":`...), r.Credential)
	b = appendString(append(b, `,"task":`...), r.Task)
	b = strconv.AppendInt(append(b, `,"attempt":`...), r.Attempt, 10)
	b = appendString(append(b, `,"key":`...), r.Key)
	b = appendString(append(b, `,"effect":{"executor":`...), r.Effect.Executor)
	b = append(b, `,"effect":`...)
	switch {
	case r.Effect.Executor == ExecutorWorker:
		e, err := DecodeWorkerEffect(r.Effect.Effect)
		if err != nil {
			return nil, err
		}
		b = appendWorkerEffect(b, &e)
	case len(r.Effect.Effect) == 0:
		b = append(b, "null"...)
	default:
		v, err := parseJSON(r.Effect.Effect)
		if err != nil {
			return nil, err
		}
		b = appendCanonical(b, &v)
	}
	return append(b, "}}}"...), nil
}

// EncodeWorkerEffect encodes e compactly, its fields in a fixed order and
// only those set. It validates nothing: encode decoded effects.
func EncodeWorkerEffect(e WorkerEffect) []byte { return appendWorkerEffect(nil, &e) }

func appendWorkerEffect(b []byte, e *WorkerEffect) []byte {
	b = appendString(append(b, `{"type":`...), e.Type)
	if e.Role != "" {
		b = appendString(append(b, `,"role":`...), e.Role)
	}
	if w := e.Workspace; w != nil {
		b = appendString(append(b, `,"workspace":{"type":`...), w.Type)
		if w.Resource != nil {
			b = appendResource(append(b, `,"resource":`...), *w.Resource)
		}
		b = append(b, '}')
	}
	if e.Brief != nil {
		b = appendString(append(b, `,"brief":`...), *e.Brief)
	}
	if e.Branch != nil {
		b = appendString(append(b, `,"branch":`...), *e.Branch)
	}
	if p := e.Pinned; p != nil {
		b = appendString(append(b, `,"pinned":{"head":`...), p.Head)
		b = appendString(append(b, `,"report_path":`...), p.ReportPath)
		b = append(b, '}')
	}
	if a := e.Agent; a != nil {
		b = appendString(append(b, `,"agent":{"agent":`...), a.Agent)
		if a.Model != "" {
			b = appendString(append(b, `,"model":`...), a.Model)
		}
		if a.Effort != "" {
			b = appendString(append(b, `,"effort":`...), a.Effort)
		}
		b = append(b, '}')
	}
	if e.Worker != nil {
		b = appendResource(append(b, `,"worker":`...), *e.Worker)
	}
	if e.Question != nil {
		b = appendString(append(b, `,"question":`...), *e.Question)
	}
	if e.Body != nil {
		b = appendString(append(b, `,"body":`...), *e.Body)
	}
	if e.Resource != nil {
		b = appendResource(append(b, `,"resource":`...), *e.Resource)
	}
	return append(b, '}')
}
