package cfntemplate

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// NoValue is what AWS::NoValue resolves to: the property that holds it is
// removed from its object (or its list).
var noValue = &struct{ name string }{"AWS::NoValue"}

// Deployment answers what only a deployment knows: the physical id a
// resource's Ref gives, and its attributes. Both are asked only for
// resources the template has.
type Deployment interface {
	Ref(logicalID string) (string, error)
	GetAtt(logicalID, attribute string) (any, error)
}

// Resolver resolves intrinsic functions in a template's values.
type Resolver struct {
	T      *Template
	Deploy Deployment
	// Pseudo parameters.
	Region, AccountID, Partition, StackName, StackID, URLSuffix string
	// AZs answers Fn::GetAZs; default: <region>a and <region>b.
	AZs []string
	// Params gives parameters their values; absent ones take their
	// Default.
	Params map[string]string
}

// Error is a resolution error with the path of the value in the template
// (Resources.Fn.Properties.Environment.Variables.X).
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Resolve returns v with every intrinsic function replaced by its value.
// path names v in error messages.
func (r *Resolver) Resolve(path string, v any) (any, error) {
	out, err := r.resolve(path, v)
	if err != nil {
		return nil, err
	}
	if out == noValue {
		return nil, nil
	}
	return out, nil
}

// String resolves v and requires a string (numbers and booleans are
// written as CloudFormation writes them).
func (r *Resolver) String(path string, v any) (string, error) {
	out, err := r.Resolve(path, v)
	if err != nil {
		return "", err
	}
	s, ok := scalar(out)
	if !ok {
		return "", &Error{path, fmt.Errorf("want a string, have %T", out)}
	}
	return s, nil
}

// Property resolves the property at the dotted path below resource id's
// Properties ("Environment.Variables"); a missing property is nil.
func (r *Resolver) Property(id, prop string) (any, error) {
	res, ok := r.T.Resources[id]
	if !ok {
		return nil, fmt.Errorf("no resource %s", id)
	}
	var v any = res.Properties
	for _, part := range strings.Split(prop, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, nil
		}
		if v, ok = m[part]; !ok {
			return nil, nil
		}
	}
	return r.Resolve("Resources."+id+".Properties."+prop, v)
}

// Properties resolves all of resource id's properties.
func (r *Resolver) Properties(id string) (map[string]any, error) {
	res, ok := r.T.Resources[id]
	if !ok {
		return nil, fmt.Errorf("no resource %s", id)
	}
	v, err := r.Resolve("Resources."+id+".Properties", res.Properties)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case int:
		return strconv.Itoa(x), true
	}
	return "", false
}

func (r *Resolver) resolve(path string, v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			for k, arg := range x {
				if k == "Ref" || k == "Condition" && isCondRef(arg) || strings.HasPrefix(k, "Fn::") {
					out, err := r.intrinsic(path, k, arg)
					if err != nil {
						var e *Error
						if errors.As(err, &e) {
							return nil, err
						}
						return nil, &Error{path, fmt.Errorf("%s: %w", k, err)}
					}
					return out, nil
				}
			}
		}
		out := make(map[string]any, len(x))
		for _, k := range slices.Sorted(maps.Keys(x)) {
			e, err := r.resolve(path+"."+k, x[k])
			if err != nil {
				return nil, err
			}
			if e != noValue {
				out[k] = e
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for i, e := range x {
			e, err := r.resolve(path+"["+strconv.Itoa(i)+"]", e)
			if err != nil {
				return nil, err
			}
			if e != noValue {
				out = append(out, e)
			}
		}
		return out, nil
	}
	return v, nil
}

func isCondRef(v any) bool { _, ok := v.(string); return ok }

func (r *Resolver) intrinsic(path, fn string, arg any) (any, error) {
	switch fn {
	case "Ref":
		name, ok := arg.(string)
		if !ok {
			return nil, errors.New("want a name")
		}
		return r.ref(name)
	case "Fn::GetAtt":
		var id, attr string
		switch a := arg.(type) {
		case []any:
			if len(a) != 2 {
				return nil, errors.New("want [resource, attribute]")
			}
			id, _ = a[0].(string)
			at, err := r.resolve(path, a[1])
			if err != nil {
				return nil, err
			}
			attr, _ = at.(string)
		case string:
			id, attr, _ = strings.Cut(a, ".")
		}
		if id == "" || attr == "" {
			return nil, errors.New("want [resource, attribute]")
		}
		return r.getAtt(id, attr)
	case "Fn::Join":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, errors.New("want [delimiter, [values]]")
		}
		sep, ok := a[0].(string)
		if !ok {
			return nil, errors.New("the delimiter must be a string")
		}
		lv, err := r.resolve(path, a[1])
		if err != nil {
			return nil, err
		}
		list, ok := lv.([]any)
		if !ok {
			return nil, errors.New("want a list of values")
		}
		parts := make([]string, 0, len(list))
		for _, e := range list {
			s, ok := scalar(e)
			if !ok {
				return nil, fmt.Errorf("cannot join a %T", e)
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, sep), nil
	case "Fn::Sub":
		return r.sub(path, arg)
	case "Fn::Select":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, errors.New("want [index, list]")
		}
		iv, err := r.resolve(path, a[0])
		if err != nil {
			return nil, err
		}
		is, _ := scalar(iv)
		i, err := strconv.Atoi(is)
		if err != nil {
			return nil, fmt.Errorf("index %v is not a number", iv)
		}
		lv, err := r.resolve(path, a[1])
		if err != nil {
			return nil, err
		}
		list, ok := lv.([]any)
		if !ok {
			return nil, errors.New("want a list")
		}
		if i < 0 || i >= len(list) {
			return nil, fmt.Errorf("index %d outside a list of %d", i, len(list))
		}
		return list[i], nil
	case "Fn::Split":
		a, ok := arg.([]any)
		if !ok || len(a) != 2 {
			return nil, errors.New("want [delimiter, string]")
		}
		sep, _ := a[0].(string)
		sv, err := r.resolve(path, a[1])
		if err != nil {
			return nil, err
		}
		s, ok := scalar(sv)
		if !ok || sep == "" {
			return nil, errors.New("want a delimiter and a string")
		}
		var out []any
		for _, p := range strings.Split(s, sep) {
			out = append(out, p)
		}
		return out, nil
	case "Fn::If":
		a, ok := arg.([]any)
		if !ok || len(a) != 3 {
			return nil, errors.New("want [condition, then, else]")
		}
		name, _ := a[0].(string)
		c, err := r.condition(name)
		if err != nil {
			return nil, err
		}
		if c {
			return r.resolve(path, a[1])
		}
		return r.resolve(path, a[2])
	case "Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or", "Condition":
		return r.evalCond(path, map[string]any{fn: arg})
	case "Fn::FindInMap":
		a, ok := arg.([]any)
		if !ok || len(a) != 3 {
			return nil, errors.New("want [map, key, key]")
		}
		var keys [3]string
		for i := range a {
			v, err := r.resolve(path, a[i])
			if err != nil {
				return nil, err
			}
			if keys[i], ok = scalar(v); !ok {
				return nil, errors.New("keys must be strings")
			}
		}
		m, _ := r.T.Mappings[keys[0]].(map[string]any)
		top, _ := m[keys[1]].(map[string]any)
		v, ok := top[keys[2]]
		if !ok {
			return nil, fmt.Errorf("no mapping %s.%s.%s", keys[0], keys[1], keys[2])
		}
		return v, nil
	case "Fn::GetAZs":
		azs := r.AZs
		if len(azs) == 0 {
			azs = []string{r.Region + "a", r.Region + "b"}
		}
		out := make([]any, len(azs))
		for i, z := range azs {
			out[i] = z
		}
		return out, nil
	case "Fn::Base64":
		v, err := r.resolve(path, arg)
		if err != nil {
			return nil, err
		}
		s, ok := scalar(v)
		if !ok {
			return nil, errors.New("want a string")
		}
		return base64.StdEncoding.EncodeToString([]byte(s)), nil
	}
	return nil, fmt.Errorf("%s is not supported by the local stack", fn)
}

func (r *Resolver) ref(name string) (any, error) {
	switch name {
	case "AWS::Region":
		return r.Region, nil
	case "AWS::AccountId":
		return r.AccountID, nil
	case "AWS::Partition":
		return r.Partition, nil
	case "AWS::StackName":
		return r.StackName, nil
	case "AWS::StackId":
		return r.StackID, nil
	case "AWS::URLSuffix":
		return r.URLSuffix, nil
	case "AWS::NoValue":
		return noValue, nil
	case "AWS::NotificationARNs":
		return []any{}, nil
	}
	if p, ok := r.T.Parameters[name]; ok {
		if v, ok := r.Params[name]; ok {
			return v, nil
		}
		if p.Default != nil {
			return p.Default, nil
		}
		return nil, fmt.Errorf("parameter %s has no value", name)
	}
	if _, ok := r.T.Resources[name]; !ok {
		return nil, fmt.Errorf("no resource or parameter %s", name)
	}
	if r.Deploy == nil {
		return nil, fmt.Errorf("resource %s is not deployed", name)
	}
	return r.Deploy.Ref(name)
}

func (r *Resolver) getAtt(id, attr string) (any, error) {
	if _, ok := r.T.Resources[id]; !ok {
		return nil, fmt.Errorf("no resource %s", id)
	}
	if r.Deploy == nil {
		return nil, fmt.Errorf("resource %s is not deployed", id)
	}
	return r.Deploy.GetAtt(id, attr)
}

func (r *Resolver) sub(path string, arg any) (any, error) {
	str, vars := "", map[string]any{}
	switch a := arg.(type) {
	case string:
		str = a
	case []any:
		if len(a) != 2 {
			return nil, errors.New("want a string or [string, {variables}]")
		}
		str, _ = a[0].(string)
		m, ok := a[1].(map[string]any)
		if !ok {
			return nil, errors.New("the variables must be an object")
		}
		for k, v := range m {
			rv, err := r.resolve(path+"."+k, v)
			if err != nil {
				return nil, err
			}
			vars[k] = rv
		}
	default:
		return nil, errors.New("want a string or [string, {variables}]")
	}
	var b strings.Builder
	for {
		i := strings.Index(str, "${")
		if i < 0 {
			b.WriteString(str)
			break
		}
		j := strings.Index(str[i:], "}")
		if j < 0 {
			return nil, errors.New("unclosed ${")
		}
		b.WriteString(str[:i])
		name := strings.TrimSpace(str[i+2 : i+j])
		str = str[i+j+1:]
		if strings.HasPrefix(name, "!") {
			b.WriteString("${" + name[1:] + "}")
			continue
		}
		var v any
		var err error
		if vv, ok := vars[name]; ok {
			v = vv
		} else if id, attr, ok := strings.Cut(name, "."); ok && !strings.HasPrefix(name, "AWS::") {
			v, err = r.getAtt(id, attr)
		} else {
			v, err = r.ref(name)
		}
		if err != nil {
			return nil, fmt.Errorf("${%s}: %w", name, err)
		}
		s, ok := scalar(v)
		if !ok {
			return nil, fmt.Errorf("${%s} is not a string", name)
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// Condition evaluates one of the template's Conditions.
func (r *Resolver) Condition(name string) (bool, error) { return r.condition(name) }

func (r *Resolver) condition(name string) (bool, error) {
	c, ok := r.T.Conditions[name]
	if !ok {
		return false, fmt.Errorf("no condition %s", name)
	}
	v, err := r.evalCond("Conditions."+name, c)
	if err != nil {
		return false, err
	}
	b, _ := v.(bool)
	return b, nil
}

func (r *Resolver) evalCond(path string, c any) (any, error) {
	m, ok := c.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, errors.New("a condition is one function")
	}
	for fn, arg := range m {
		a, _ := arg.([]any)
		switch fn {
		case "Condition":
			name, _ := arg.(string)
			return r.condition(name)
		case "Fn::Equals":
			if len(a) != 2 {
				return nil, errors.New("Fn::Equals wants two values")
			}
			x, err := r.resolve(path, a[0])
			if err != nil {
				return nil, err
			}
			y, err := r.resolve(path, a[1])
			if err != nil {
				return nil, err
			}
			xs, _ := scalar(x)
			ys, _ := scalar(y)
			return xs == ys, nil
		case "Fn::Not":
			if len(a) != 1 {
				return nil, errors.New("Fn::Not wants one condition")
			}
			v, err := r.evalCond(path, a[0])
			if err != nil {
				return nil, err
			}
			b, _ := v.(bool)
			return !b, nil
		case "Fn::And", "Fn::Or":
			and := fn == "Fn::And"
			for _, e := range a {
				v, err := r.evalCond(path, e)
				if err != nil {
					return nil, err
				}
				b, _ := v.(bool)
				if and && !b {
					return false, nil
				}
				if !and && b {
					return true, nil
				}
			}
			return and, nil
		}
		return nil, fmt.Errorf("%s is not a condition function", fn)
	}
	return nil, nil
}
