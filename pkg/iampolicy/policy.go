package iampolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Effect of a statement.
type Effect string

const (
	Allow Effect = "Allow"
	Deny  Effect = "Deny"
)

// Policy is one parsed policy document.
type Policy struct {
	Version    string
	ID         string
	Statements []Statement
}

// Statement is one statement of a policy. Exactly one of Actions and
// NotActions, and one of Resources and NotResources, is set.
type Statement struct {
	Sid          string
	Effect       Effect
	Actions      []string
	NotActions   []string
	Resources    []string
	NotResources []string
	Conditions   []Condition
}

// Condition is one key under one operator of a statement's Condition
// block, e.g. {"StringEquals": {"ecs:cluster": [...]}} gives one Condition
// per key.
type Condition struct {
	Operator string // as written: "ForAnyValue:StringLikeIfExists"
	Key      string
	Values   []string

	op       baseOp
	ifExists bool
	set      setQualifier
	nums     []float64 // Values parsed, for numeric operators
}

// Parse parses a policy document given as JSON.
func Parse(doc []byte) (Policy, error) {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return Policy{}, fmt.Errorf("iampolicy: policy document is not JSON: %w", err)
	}
	if d.More() {
		return Policy{}, errors.New("iampolicy: policy document: trailing data after the JSON value")
	}
	return FromDocument(v)
}

// FromDocument builds a Policy from a document already decoded from JSON
// (map[string]any, []any, string, bool, float64 or json.Number values), as
// a CloudFormation template loader holds it once intrinsic functions are
// resolved. A value that is still an intrinsic function (an object where a
// string belongs) is an error.
func FromDocument(doc any) (Policy, error) {
	m, ok := doc.(map[string]any)
	if !ok {
		return Policy{}, fmt.Errorf("iampolicy: policy document is %s, not an object", kindOf(doc))
	}
	var p Policy
	for k := range m {
		switch k {
		case "Version", "Id", "Statement":
		default:
			return Policy{}, fmt.Errorf("iampolicy: policy document: unknown element %q", k)
		}
	}
	if v, ok := m["Version"]; ok {
		s, ok := v.(string)
		if !ok || (s != "2012-10-17" && s != "2008-10-17") {
			return Policy{}, fmt.Errorf("iampolicy: policy document: Version %v is not 2012-10-17 or 2008-10-17", v)
		}
		p.Version = s
	}
	if v, ok := m["Id"]; ok {
		s, ok := v.(string)
		if !ok {
			return Policy{}, errors.New("iampolicy: policy document: Id is not a string")
		}
		p.ID = s
	}
	raw, ok := m["Statement"]
	if !ok {
		return Policy{}, errors.New("iampolicy: policy document has no Statement")
	}
	var stmts []any
	switch s := raw.(type) {
	case []any:
		stmts = s
	case map[string]any:
		stmts = []any{s}
	default:
		return Policy{}, fmt.Errorf("iampolicy: Statement is %s, not an object or a list", kindOf(raw))
	}
	if len(stmts) == 0 {
		return Policy{}, errors.New("iampolicy: Statement is empty")
	}
	for i, s := range stmts {
		st, err := parseStatement(s, p.Version == "2012-10-17", false)
		if err != nil {
			return Policy{}, fmt.Errorf("iampolicy: statement %d: %w", i, err)
		}
		p.Statements = append(p.Statements, st)
	}
	return p, nil
}

// parseStatement parses one statement of an identity-based policy or, with
// trust, of a role's trust policy, which names principals (read by
// parseTrustStatement) and no resource (the role is the resource).
func parseStatement(v any, variables, trust bool) (Statement, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Statement{}, fmt.Errorf("is %s, not an object", kindOf(v))
	}
	var st Statement
	for k := range m {
		switch k {
		case "Sid", "Effect", "Action", "NotAction", "Condition":
		case "Resource", "NotResource":
			if trust {
				return Statement{}, fmt.Errorf("has prohibited field %s: a trust policy's resource is its role", k)
			}
		case "Principal", "NotPrincipal":
			if !trust {
				return Statement{}, fmt.Errorf("%s is not supported: an identity-based policy names no principal", k)
			}
		default:
			return Statement{}, fmt.Errorf("unknown element %q", k)
		}
	}
	if v, ok := m["Sid"]; ok {
		s, ok := v.(string)
		if !ok {
			return Statement{}, errors.New("Sid is not a string")
		}
		st.Sid = s
	}
	switch e := m["Effect"]; e {
	case "Allow":
		st.Effect = Allow
	case "Deny":
		st.Effect = Deny
	default:
		return Statement{}, fmt.Errorf("Effect %v is not Allow or Deny", e)
	}
	var err error
	if st.Actions, st.NotActions, err = pair(m, "Action", "NotAction"); err != nil {
		return Statement{}, err
	}
	for _, a := range append(append([]string(nil), st.Actions...), st.NotActions...) {
		if a != "*" && !strings.Contains(a, ":") {
			return Statement{}, fmt.Errorf("action %q is not \"*\" or service:action", a)
		}
	}
	if trust {
		st.Resources = []string{"*"}
	} else if st.Resources, st.NotResources, err = pair(m, "Resource", "NotResource"); err != nil {
		return Statement{}, err
	}
	if variables {
		for _, r := range append(append([]string(nil), st.Resources...), st.NotResources...) {
			if strings.Contains(r, "${") {
				return Statement{}, fmt.Errorf("resource %q: policy variables are not supported", r)
			}
		}
	}
	if c, ok := m["Condition"]; ok {
		if st.Conditions, err = parseConditions(c, variables); err != nil {
			return Statement{}, err
		}
	}
	return st, nil
}

// pair reads exactly one of two elements, each a string or a list of
// strings.
func pair(m map[string]any, name, notName string) (pos, neg []string, err error) {
	v, okPos := m[name]
	nv, okNeg := m[notName]
	switch {
	case okPos && okNeg:
		return nil, nil, fmt.Errorf("has both %s and %s", name, notName)
	case okPos:
		pos, err = strings1(v, name)
	case okNeg:
		neg, err = strings1(nv, notName)
	default:
		return nil, nil, fmt.Errorf("has neither %s nor %s", name, notName)
	}
	return pos, neg, err
}

func strings1(v any, name string) ([]string, error) {
	var out []string
	switch s := v.(type) {
	case string:
		out = []string{s}
	case []string:
		out = s
	case []any:
		for _, e := range s {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%s holds %s, not a string", name, kindOf(e))
			}
			out = append(out, str)
		}
	default:
		return nil, fmt.Errorf("%s is %s, not a string or a list of strings", name, kindOf(v))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s is empty", name)
	}
	return out, nil
}

// baseOp is a condition operator without its prefix and suffix.
type baseOp int

const (
	opStringEquals baseOp = iota + 1
	opStringNotEquals
	opStringEqualsIgnoreCase
	opStringNotEqualsIgnoreCase
	opStringLike
	opStringNotLike
	opArnEquals
	opArnLike
	opArnNotEquals
	opArnNotLike
	opBool
	opNull
	opNumericEquals
	opNumericNotEquals
	opNumericLessThan
	opNumericLessThanEquals
	opNumericGreaterThan
	opNumericGreaterThanEquals
)

var baseOps = map[string]baseOp{
	"StringEquals":              opStringEquals,
	"StringNotEquals":           opStringNotEquals,
	"StringEqualsIgnoreCase":    opStringEqualsIgnoreCase,
	"StringNotEqualsIgnoreCase": opStringNotEqualsIgnoreCase,
	"StringLike":                opStringLike,
	"StringNotLike":             opStringNotLike,
	"ArnEquals":                 opArnEquals,
	"ArnLike":                   opArnLike,
	"ArnNotEquals":              opArnNotEquals,
	"ArnNotLike":                opArnNotLike,
	"Bool":                      opBool,
	"Null":                      opNull,
	"NumericEquals":             opNumericEquals,
	"NumericNotEquals":          opNumericNotEquals,
	"NumericLessThan":           opNumericLessThan,
	"NumericLessThanEquals":     opNumericLessThanEquals,
	"NumericGreaterThan":        opNumericGreaterThan,
	"NumericGreaterThanEquals":  opNumericGreaterThanEquals,
}

// negated operators hold when no value matches the positive one.
func (o baseOp) negated() bool {
	switch o {
	case opStringNotEquals, opStringNotEqualsIgnoreCase, opStringNotLike, opArnNotEquals, opArnNotLike, opNumericNotEquals:
		return true
	}
	return false
}

func (o baseOp) numeric() bool { return o >= opNumericEquals }

type setQualifier int

const (
	single setQualifier = iota
	forAnyValue
	forAllValues
)

func parseOperator(name string) (op baseOp, set setQualifier, ifExists bool, err error) {
	rest := name
	switch {
	case strings.HasPrefix(rest, "ForAnyValue:"):
		set, rest = forAnyValue, strings.TrimPrefix(rest, "ForAnyValue:")
	case strings.HasPrefix(rest, "ForAllValues:"):
		set, rest = forAllValues, strings.TrimPrefix(rest, "ForAllValues:")
	}
	if r, ok := strings.CutSuffix(rest, "IfExists"); ok {
		ifExists, rest = true, r
	}
	op, ok := baseOps[rest]
	if !ok {
		return 0, 0, false, fmt.Errorf("condition operator %q is not supported", name)
	}
	if op == opNull && (ifExists || set != single) {
		return 0, 0, false, fmt.Errorf("condition operator %q is not supported", name)
	}
	return op, set, ifExists, nil
}

func parseConditions(v any, variables bool) ([]Condition, error) {
	block, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("Condition is %s, not an object", kindOf(v))
	}
	var out []Condition
	for _, opName := range sortedKeys(block) {
		op, set, ifExists, err := parseOperator(opName)
		if err != nil {
			return nil, err
		}
		keys, ok := block[opName].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("Condition %s is %s, not an object", opName, kindOf(block[opName]))
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("Condition %s names no key", opName)
		}
		for _, key := range sortedKeys(keys) {
			vals, err := conditionValues(keys[key])
			if err != nil {
				return nil, fmt.Errorf("Condition %s %s: %w", opName, key, err)
			}
			c := Condition{Operator: opName, Key: key, Values: vals, op: op, set: set, ifExists: ifExists}
			for _, s := range vals {
				if variables && strings.Contains(s, "${") {
					return nil, fmt.Errorf("Condition %s %s: policy variables are not supported", opName, key)
				}
				switch {
				case op.numeric():
					f, err := strconv.ParseFloat(s, 64)
					if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
						return nil, fmt.Errorf("Condition %s %s: %q is not a number", opName, key, s)
					}
					c.nums = append(c.nums, f)
				case op == opBool || op == opNull:
					if !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") {
						return nil, fmt.Errorf("Condition %s %s: %q is not true or false", opName, key, s)
					}
				}
			}
			if variables && strings.Contains(key, "${") {
				return nil, fmt.Errorf("Condition %s %q: policy variables are not supported", opName, key)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// conditionValues reads a condition's value: a string, a boolean, a
// number, or a list of those.
func conditionValues(v any) ([]string, error) {
	one := func(e any) (string, error) {
		switch x := e.(type) {
		case string:
			return x, nil
		case bool:
			return strconv.FormatBool(x), nil
		case json.Number:
			return x.String(), nil
		case float64:
			return strconv.FormatFloat(x, 'f', -1, 64), nil
		case int:
			return strconv.Itoa(x), nil
		}
		return "", fmt.Errorf("value is %s, not a string, a boolean or a number", kindOf(e))
	}
	var list []any
	switch x := v.(type) {
	case []any:
		list = x
	case []string:
		for _, s := range x {
			list = append(list, s)
		}
	default:
		list = []any{v}
	}
	if len(list) == 0 {
		return nil, errors.New("no value")
	}
	out := make([]string, 0, len(list))
	for _, e := range list {
		s, err := one(e)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, json.Number, int:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}
