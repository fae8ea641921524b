// Package cfntemplate reads a synthesized CloudFormation template (what
// `cdk synth` writes) and resolves its intrinsic functions the way
// CloudFormation does at deploy time, against physical names and
// attributes that the caller's deployment supplies. The aws-local stack
// (package awslocal) "deploys" a template with it onto local stand-ins, so
// that every value the stack sets — function environments, routes, task
// definitions, policies — comes from the template and none is restated in
// Go.
//
// Supported: Ref (resources, parameters with a default or a value, and the
// pseudo parameters), Fn::GetAtt, Fn::Join, Fn::Sub (both forms),
// Fn::Select, Fn::Split, Fn::If with the template's Conditions (Fn::Equals,
// Fn::Not, Fn::And, Fn::Or, Condition), Fn::FindInMap, Fn::GetAZs,
// Fn::Base64 and AWS::NoValue. Fn::ImportValue, Fn::Transform,
// Fn::Cidr and Fn::Length are refused with an error naming the place they
// stand: a local stack cannot import another stack's outputs.
package cfntemplate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
)

// Template is a parsed template. Values keep the JSON decoding's shapes
// (map[string]any, []any, string, float64, bool, nil).
type Template struct {
	Description string
	Parameters  map[string]Parameter
	Mappings    map[string]any
	Conditions  map[string]any
	Resources   map[string]Resource
	Outputs     map[string]any
}

// Parameter is one template parameter.
type Parameter struct {
	Type    string
	Default any
}

// Resource is one resource entry.
type Resource struct {
	Type       string
	Properties map[string]any
	DependsOn  []string
	Metadata   map[string]any
	Condition  string
}

// Load reads and parses the template at path.
func Load(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	t, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", path, err)
	}
	return t, nil
}

// Parse parses a template's JSON.
func Parse(b []byte) (*Template, error) {
	var raw struct {
		Description string                     `json:"Description"`
		Parameters  map[string]Parameter       `json:"Parameters"`
		Mappings    map[string]any             `json:"Mappings"`
		Conditions  map[string]any             `json:"Conditions"`
		Resources   map[string]json.RawMessage `json:"Resources"`
		Outputs     map[string]any             `json:"Outputs"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("not a JSON template: %w", err)
	}
	if len(raw.Resources) == 0 {
		return nil, fmt.Errorf("the template has no Resources")
	}
	t := &Template{Description: raw.Description, Parameters: raw.Parameters, Mappings: raw.Mappings,
		Conditions: raw.Conditions, Outputs: raw.Outputs, Resources: map[string]Resource{}}
	for id, rb := range raw.Resources {
		var r struct {
			Type       string         `json:"Type"`
			Properties map[string]any `json:"Properties"`
			DependsOn  any            `json:"DependsOn"`
			Metadata   map[string]any `json:"Metadata"`
			Condition  string         `json:"Condition"`
		}
		if err := json.Unmarshal(rb, &r); err != nil {
			return nil, fmt.Errorf("resource %s: %w", id, err)
		}
		if r.Type == "" {
			return nil, fmt.Errorf("resource %s has no Type", id)
		}
		res := Resource{Type: r.Type, Properties: r.Properties, Metadata: r.Metadata, Condition: r.Condition}
		switch d := r.DependsOn.(type) {
		case string:
			res.DependsOn = []string{d}
		case []any:
			for _, x := range d {
				if s, ok := x.(string); ok {
					res.DependsOn = append(res.DependsOn, s)
				}
			}
		}
		if res.Properties == nil {
			res.Properties = map[string]any{}
		}
		t.Resources[id] = res
	}
	return t, nil
}

// OfType lists the logical ids of the resources of type typ, sorted.
func (t *Template) OfType(typ string) []string {
	var ids []string
	for id, r := range t.Resources {
		if r.Type == typ {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Order lists every resource's logical id so that each comes after the
// resources it refers to (Ref, Fn::GetAtt, Fn::Sub) or depends on, as
// CloudFormation creates them; ties are broken by name so the order is
// stable. A cycle is an error naming its members.
func (t *Template) Order() ([]string, error) {
	deps := map[string][]string{}
	for id, r := range t.Resources {
		set := map[string]bool{}
		collectRefs(r.Properties, set)
		for _, d := range r.DependsOn {
			set[d] = true
		}
		for d := range set {
			if _, ok := t.Resources[d]; ok && d != id {
				deps[id] = append(deps[id], d)
			}
		}
		sort.Strings(deps[id])
	}
	ids := make([]string, 0, len(t.Resources))
	for id := range t.Resources {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	const (
		unseen = iota
		visiting
		done
	)
	state := map[string]int{}
	var out []string
	var visit func(id string, path []string) error
	visit = func(id string, path []string) error {
		switch state[id] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("circular dependency: %s", strings.Join(append(path, id), " -> "))
		}
		state[id] = visiting
		for _, d := range deps[id] {
			if err := visit(d, append(path, id)); err != nil {
				return err
			}
		}
		state[id] = done
		out = append(out, id)
		return nil
	}
	for _, id := range ids {
		if err := visit(id, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// collectRefs adds every logical id v refers to.
func collectRefs(v any, set map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			if r, ok := x["Ref"].(string); ok {
				set[r] = true
				return
			}
			if g, ok := x["Fn::GetAtt"]; ok {
				switch a := g.(type) {
				case []any:
					if len(a) > 0 {
						if s, ok := a[0].(string); ok {
							set[s] = true
						}
					}
				case string:
					set[strings.SplitN(a, ".", 2)[0]] = true
				}
				return
			}
			if s, ok := x["Fn::Sub"]; ok {
				str := s
				if a, ok := s.([]any); ok && len(a) > 0 {
					str = a[0]
					if len(a) > 1 {
						collectRefs(a[1], set)
					}
				}
				if str, ok := str.(string); ok {
					for _, name := range subVars(str) {
						set[strings.SplitN(name, ".", 2)[0]] = true
					}
				}
				return
			}
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			collectRefs(x[k], set)
		}
	case []any:
		for _, e := range x {
			collectRefs(e, set)
		}
	}
}

// subVars lists the ${...} names of a Fn::Sub string (not ${!literal}).
func subVars(s string) []string {
	var out []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			return out
		}
		j := strings.Index(s[i:], "}")
		if j < 0 {
			return out
		}
		name := s[i+2 : i+j]
		if !strings.HasPrefix(name, "!") {
			out = append(out, strings.TrimSpace(name))
		}
		s = s[i+j+1:]
	}
}
