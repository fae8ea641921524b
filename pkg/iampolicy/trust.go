package iampolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// TrustPolicy is a role's trust policy (its AssumeRolePolicyDocument): the
// resource-based policy that says who may assume the role. Its statements
// name principals instead of resources.
type TrustPolicy struct {
	Version    string
	ID         string
	Statements []TrustStatement
}

// TrustStatement is one statement of a trust policy: exactly one of
// Principals and NotPrincipals is set, by principal type ("AWS",
// "Service", "Federated", "CanonicalUser"). Principal "*" is read as
// {"AWS": ["*"]}, as IAM reads it; an AWS account id as its root,
// arn:aws:iam::<account>:root. The embedded Statement has no resource.
type TrustStatement struct {
	Statement
	Principals    map[string][]string
	NotPrincipals map[string][]string
}

// Caller names who asks, by principal type, the way a trust policy's
// Principal element can name it. A role session is
// {"AWS": {role ARN, session ARN, "arn:aws:iam::<account>:root"}}.
type Caller map[string][]string

// ParseTrust parses a trust policy given as JSON.
func ParseTrust(doc []byte) (TrustPolicy, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return TrustPolicy{}, fmt.Errorf("iampolicy: trust policy is not JSON: %w", err)
	}
	if d.More() {
		return TrustPolicy{}, errors.New("iampolicy: trust policy: trailing data after the JSON value")
	}
	return TrustFromDocument(v)
}

// TrustFromDocument builds a TrustPolicy from a document already decoded
// from JSON, as FromDocument does for identity-based policies. Partial
// wildcards in a principal ("arn:aws:iam::*:role/x") are refused, as IAM
// refuses them; only "*" alone names everyone.
func TrustFromDocument(doc any) (TrustPolicy, error) {
	m, ok := doc.(map[string]any)
	if !ok {
		return TrustPolicy{}, fmt.Errorf("iampolicy: trust policy is %s, not an object", kindOf(doc))
	}
	// The document's frame is an identity policy's; reuse its checks on a
	// copy without statements, then read the statements here.
	frame := map[string]any{}
	for k, v := range m {
		if k != "Statement" {
			frame[k] = v
		}
	}
	frame["Statement"] = map[string]any{"Effect": "Allow", "Action": "*", "Resource": "*"}
	base, err := FromDocument(frame)
	if err != nil {
		return TrustPolicy{}, err
	}
	t := TrustPolicy{Version: base.Version, ID: base.ID}
	var stmts []any
	switch s := m["Statement"].(type) {
	case []any:
		stmts = s
	case map[string]any:
		stmts = []any{s}
	case nil:
		return TrustPolicy{}, errors.New("iampolicy: trust policy has no Statement")
	default:
		return TrustPolicy{}, fmt.Errorf("iampolicy: trust policy: Statement is %s, not an object or a list", kindOf(s))
	}
	if len(stmts) == 0 {
		return TrustPolicy{}, errors.New("iampolicy: trust policy: Statement is empty")
	}
	for i, s := range stmts {
		st, err := parseTrustStatement(s, t.Version == "2012-10-17")
		if err != nil {
			return TrustPolicy{}, fmt.Errorf("iampolicy: trust policy statement %d: %w", i, err)
		}
		t.Statements = append(t.Statements, st)
	}
	return t, nil
}

func parseTrustStatement(v any, variables bool) (TrustStatement, error) {
	st, err := parseStatement(v, variables, true)
	if err != nil {
		return TrustStatement{}, err
	}
	m := v.(map[string]any)
	ts := TrustStatement{Statement: st}
	p, okP := m["Principal"]
	np, okN := m["NotPrincipal"]
	switch {
	case okP && okN:
		return TrustStatement{}, errors.New("has both Principal and NotPrincipal")
	case okP:
		ts.Principals, err = principals(p)
	case okN:
		ts.NotPrincipals, err = principals(np)
	default:
		return TrustStatement{}, errors.New("has neither Principal nor NotPrincipal: a trust policy must name who may assume the role")
	}
	return ts, err
}

// principals reads a Principal element: "*" or {type: value or list}.
func principals(v any) (map[string][]string, error) {
	if s, ok := v.(string); ok {
		if s != "*" {
			return nil, fmt.Errorf("Principal %q is not \"*\" or an object of principal types", s)
		}
		return map[string][]string{"AWS": {"*"}}, nil
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, fmt.Errorf("Principal is %s, not \"*\" or an object of principal types", kindOf(v))
	}
	out := map[string][]string{}
	for _, typ := range sortedKeys(m) {
		switch typ {
		case "AWS", "Service", "Federated", "CanonicalUser":
		default:
			return nil, fmt.Errorf("principal type %q is not AWS, Service, Federated or CanonicalUser", typ)
		}
		vals, err := strings1(m[typ], "Principal "+typ)
		if err != nil {
			return nil, err
		}
		for _, s := range vals {
			if s != "*" && strings.ContainsAny(s, "*?") {
				return nil, fmt.Errorf("invalid principal %q: a principal is \"*\" or names one principal, without wildcards", s)
			}
			if typ == "AWS" && len(s) == 12 && strings.Trim(s, "0123456789") == "" {
				s = "arn:aws:iam::" + s + ":root" // IAM stores an account id as its root
			}
			if typ == "AWS" && s != "*" && !strings.HasPrefix(s, "arn:") {
				return nil, fmt.Errorf("invalid principal %q: an AWS principal is \"*\", an account id or an ARN", s)
			}
			out[typ] = append(out[typ], s)
		}
		sort.Strings(out[typ])
	}
	return out, nil
}

// names reports whether the principal set names the caller: "*" in AWS
// names everyone; otherwise a caller identifier must equal a listed one.
func names(set map[string][]string, c Caller) bool {
	for typ, vals := range set {
		for _, v := range vals {
			if typ == "AWS" && v == "*" {
				return true
			}
			for _, id := range c[typ] {
				if id == v {
					return true
				}
			}
		}
	}
	return false
}

// Evaluate decides whether the trust policy lets caller perform
// req.Action (sts:AssumeRole, sts:TagSession, ...) on the role, with the
// request's condition keys: an explicit Deny naming the caller wins, else
// an Allow naming it allows, else the request is implicitly denied.
// req.Resource is not consulted: a trust policy's resource is its role.
func (t TrustPolicy) Evaluate(c Caller, req Request) Decision {
	allow := Decision{Policy: -1, Statement: -1}
	for si, st := range t.Statements {
		if st.Principals != nil && !names(st.Principals, c) {
			continue
		}
		if st.NotPrincipals != nil && names(st.NotPrincipals, c) {
			continue
		}
		r := req
		r.Resource = "*"
		if !st.applies(r) {
			continue
		}
		if st.Effect == Deny {
			return Decision{Explicit: true, Sid: st.Sid, Policy: 0, Statement: si}
		}
		if !allow.Allowed {
			allow = Decision{Allowed: true, Sid: st.Sid, Policy: 0, Statement: si}
		}
	}
	return allow
}
