package awslocal

import (
	"encoding/json"
	"fmt"
	"strings"
)

// matchPattern reports whether an EventBridge event matches a rule's event
// pattern, as EventBridge matches: every field the pattern names must be in
// the event; a list of values matches when the event's value (or any
// element of an array value) equals one of them; an object recurses. The
// content filters the template may use are "prefix", "exists" and
// "anything-but" (a value or a list); any other filter is an error, so a
// rule the local stack cannot evaluate is refused rather than guessed.
func matchPattern(pattern map[string]any, event []byte) (bool, error) {
	var ev map[string]any
	if err := json.Unmarshal(event, &ev); err != nil {
		return false, fmt.Errorf("event: %w", err)
	}
	return matchObject(pattern, ev)
}

func matchObject(pattern map[string]any, ev map[string]any) (bool, error) {
	for k, want := range pattern {
		have, present := ev[k]
		switch w := want.(type) {
		case map[string]any:
			sub, ok := have.(map[string]any)
			if !present || !ok {
				return false, nil
			}
			if ok, err := matchObject(w, sub); !ok || err != nil {
				return false, err
			}
		case []any:
			ok, err := matchValues(w, have, present)
			if !ok || err != nil {
				return false, err
			}
		default:
			return false, fmt.Errorf("pattern field %s: want a list or an object, have %T", k, want)
		}
	}
	return true, nil
}

// matchValues matches one event field against a pattern's list.
func matchValues(want []any, have any, present bool) (bool, error) {
	values := []any{have}
	if a, ok := have.([]any); ok {
		values = a
	}
	for _, w := range want {
		if f, ok := w.(map[string]any); ok {
			ok, err := matchFilter(f, values, present)
			if ok || err != nil {
				return ok, err
			}
			continue
		}
		if !present {
			continue
		}
		for _, v := range values {
			if equalJSON(w, v) {
				return true, nil
			}
		}
	}
	return false, nil
}

func matchFilter(f map[string]any, values []any, present bool) (bool, error) {
	if len(f) != 1 {
		return false, fmt.Errorf("a content filter has one key: %v", f)
	}
	for op, arg := range f {
		switch op {
		case "exists":
			b, _ := arg.(bool)
			return present == b, nil
		case "prefix":
			p, ok := arg.(string)
			if !ok {
				return false, fmt.Errorf("prefix wants a string")
			}
			for _, v := range values {
				if s, ok := v.(string); ok && present && strings.HasPrefix(s, p) {
					return true, nil
				}
			}
			return false, nil
		case "anything-but":
			if !present {
				return false, nil
			}
			not := []any{arg}
			if a, ok := arg.([]any); ok {
				not = a
			}
			for _, v := range values {
				for _, n := range not {
					if equalJSON(n, v) {
						return false, nil
					}
				}
			}
			return true, nil
		}
		return false, fmt.Errorf("content filter %q is not supported by the local stack", op)
	}
	return false, nil
}

func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	return false
}
