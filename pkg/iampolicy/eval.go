package iampolicy

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Request is one authorization question: may the caller perform Action on
// Resource, given the request's condition keys?
type Request struct {
	Action   string // "dynamodb:PutItem"
	Resource string // an ARN, or "*" for actions that name no resource
	// Context holds the request's condition keys and their values, e.g.
	// "aws:SecureTransport": {"true"}, "ecs:cluster": {clusterARN}. A key
	// that is absent is not in the request.
	Context map[string][]string
}

// Decision is Evaluate's answer.
type Decision struct {
	Allowed bool
	// Explicit is true when an explicit Deny decided; false for an allow
	// or an implicit deny (no statement allowed).
	Explicit bool
	// Sid of the statement that decided (the denying one, or the first
	// allowing one); empty for an implicit deny or a statement without
	// Sid. Policy and Statement index it; both are -1 for an implicit deny.
	Sid       string
	Policy    int
	Statement int
}

// Evaluate decides req against the identity-based policies of one
// principal: an explicit Deny wins, else any Allow allows, else the
// request is implicitly denied.
func Evaluate(policies []Policy, req Request) Decision {
	allow := Decision{Policy: -1, Statement: -1}
	for pi, p := range policies {
		for si, st := range p.Statements {
			if !st.applies(req) {
				continue
			}
			if st.Effect == Deny {
				return Decision{Explicit: true, Sid: st.Sid, Policy: pi, Statement: si}
			}
			if !allow.Allowed {
				allow = Decision{Allowed: true, Sid: st.Sid, Policy: pi, Statement: si}
			}
		}
	}
	return allow
}

func (st Statement) applies(req Request) bool {
	if st.Actions != nil && !anyMatch(st.Actions, req.Action, true) {
		return false
	}
	if st.NotActions != nil && anyMatch(st.NotActions, req.Action, true) {
		return false
	}
	if st.Resources != nil && !anyMatch(st.Resources, req.Resource, false) {
		return false
	}
	if st.NotResources != nil && anyMatch(st.NotResources, req.Resource, false) {
		return false
	}
	for _, c := range st.Conditions {
		if !c.holds(req.Context) {
			return false
		}
	}
	return true
}

func anyMatch(patterns []string, s string, foldCase bool) bool {
	for _, p := range patterns {
		if foldCase {
			if Match(strings.ToLower(p), strings.ToLower(s)) {
				return true
			}
		} else if Match(p, s) {
			return true
		}
	}
	return false
}

// lookup finds a condition key; key names are case-insensitive.
func lookup(ctx map[string][]string, key string) ([]string, bool) {
	if v, ok := ctx[key]; ok {
		return v, true
	}
	for k, v := range ctx {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return nil, false
}

func (c Condition) holds(ctx map[string][]string) bool {
	vals, present := lookup(ctx, c.Key)
	present = present && len(vals) > 0
	if c.op == opNull {
		for _, v := range c.Values {
			if strings.EqualFold(v, "true") != present {
				return true
			}
		}
		return false
	}
	if !present {
		// AWS: a missing key matches nothing, so a positive operator is
		// false and a negated one (StringNotEquals, ArnNotLike, ...) true;
		// ForAllValues over an empty set is vacuously true, ForAnyValue
		// false; IfExists holds.
		return c.ifExists || c.set == forAllValues || (c.op.negated() && c.set != forAnyValue)
	}
	// matchesAny: does one request value match one of the policy values
	// under the positive form of the operator?
	matchesAny := func(rv string) bool {
		for i, pv := range c.Values {
			if c.positive(rv, pv, i) {
				return true
			}
		}
		return false
	}
	// ok: does one request value satisfy the operator itself?
	ok := func(rv string) bool { return matchesAny(rv) != c.op.negated() }
	switch c.set {
	case forAllValues:
		for _, rv := range vals {
			if !ok(rv) {
				return false
			}
		}
		return true
	case forAnyValue:
		for _, rv := range vals {
			if ok(rv) {
				return true
			}
		}
		return false
	}
	// Without a set qualifier: a positive operator holds if any request
	// value matches; a negated one if none does.
	for _, rv := range vals {
		if matchesAny(rv) {
			return !c.op.negated()
		}
	}
	return c.op.negated()
}

// positive compares a request value with the i-th policy value under the
// positive form of c's operator.
func (c Condition) positive(rv, pv string, i int) bool {
	switch c.op {
	case opStringEquals, opStringNotEquals:
		return rv == pv
	case opStringEqualsIgnoreCase, opStringNotEqualsIgnoreCase:
		return strings.EqualFold(rv, pv)
	case opStringLike, opStringNotLike:
		return Match(pv, rv)
	case opArnEquals, opArnLike, opArnNotEquals, opArnNotLike:
		return arnLike(pv, rv)
	case opBool:
		return strings.EqualFold(rv, pv)
	}
	f, err := strconv.ParseFloat(rv, 64)
	if err != nil {
		return false
	}
	n := c.nums[i]
	switch c.op {
	case opNumericEquals, opNumericNotEquals:
		return f == n
	case opNumericLessThan:
		return f < n
	case opNumericLessThanEquals:
		return f <= n
	case opNumericGreaterThan:
		return f > n
	case opNumericGreaterThanEquals:
		return f >= n
	}
	return false
}

// arnLike compares an ARN with an ARN pattern part by part (arn,
// partition, service, region, account, resource), with wildcards in each
// part, as the Arn* condition operators do. A value that is not an ARN of
// six parts matches nothing.
func arnLike(pattern, arn string) bool {
	pp := strings.SplitN(pattern, ":", 6)
	ap := strings.SplitN(arn, ":", 6)
	if len(pp) != 6 || len(ap) != 6 {
		return false
	}
	for i := range pp {
		if !Match(pp[i], ap[i]) {
			return false
		}
	}
	return true
}

// Match reports whether s matches pattern, where * matches any run of
// characters (including none, "/" and ":") and ? any single character.
// It is case-sensitive.
func Match(pattern, s string) bool {
	// Iterative matching with one backtrack point: linear in practice.
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			if pattern[p] == '?' {
				// ? is one character, not one byte.
				_, size := utf8.DecodeRuneInString(s[i:])
				i += size
			} else {
				i++
			}
			p++
		case star >= 0:
			p = star + 1
			_, size := utf8.DecodeRuneInString(s[mark:])
			mark += size
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
