package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

func fingerprintOf(t *testing.T, body string) string {
	t.Helper()
	c, err := DecodeEffectCall([]byte(body))
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	fp, err := Fingerprint(c)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	if len(fp) != 64 || strings.Trim(fp, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q is not hex SHA-256", fp)
	}
	return fp
}

// reorder writes v with every object's keys in reverse order and generous
// whitespace, as another client might.
func reorder(v any) string {
	switch v := v.(type) {
	case map[string]any:
		var keys []string
		for k := range v {
			keys = append(keys, k)
		}
		// reverse of sorted order
		for i := 0; i < len(keys); i++ {
			for j := i + 1; j < len(keys); j++ {
				if keys[j] > keys[i] {
					keys[i], keys[j] = keys[j], keys[i]
				}
			}
		}
		var parts []string
		for _, k := range keys {
			kb, _ := json.Marshal(k)
			parts = append(parts, "\n  "+string(kb)+" :\t"+reorder(v[k]))
		}
		return "{" + strings.Join(parts, " ,") + "\n}"
	case []any:
		var parts []string
		for _, el := range v {
			parts = append(parts, reorder(el))
		}
		return "[ " + strings.Join(parts, " , ") + " ]"
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func TestFingerprintIgnoresSpelling(t *testing.T) {
	var generic any
	if err := json.Unmarshal([]byte(exampleCall), &generic); err != nil {
		t.Fatal(err)
	}
	compact := string(mustJSON(t, generic))
	base := fingerprintOf(t, exampleCall)
	for name, body := range map[string]string{
		"compact":          compact,
		"reordered":        reorder(generic),
		"escaped strings":  strings.Replace(compact, `"Fix the flaky test."`, `"Fix the flaky test\u002e"`, 1),
		"escaped key":      strings.Replace(compact, `"brief"`, `"\u0062rief"`, 1),
		"duplicate key":    strings.Replace(compact, `"role":"station-cook"`, `"role":"commis","role":"station-cook"`, 1),
		"explicit nulls":   strings.Replace(compact, `"role":"station-cook"`, `"pinned":null,"role":"station-cook"`, 1),
		"re-encoded":       string(mustReencode(t, exampleCall)),
		"trailing newline": exampleCall + "\n",
	} {
		if body == compact && name != "compact" {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if got := fingerprintOf(t, body); got != base {
			t.Errorf("%s changed the fingerprint", name)
		}
	}
}

func mustReencode(t *testing.T, body string) []byte {
	c, err := DecodeEffectCall([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := EncodeEffectCall(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFingerprintSeesEveryField(t *testing.T) {
	var generic map[string]any
	if err := json.Unmarshal([]byte(exampleCall), &generic); err != nil {
		t.Fatal(err)
	}
	base := fingerprintOf(t, exampleCall)
	seen := map[string]string{"base": base}
	for _, tc := range []struct {
		name string
		mod  func(obj)
	}{
		{"run", func(m obj) { m["run"] = "run-2" }},
		{"house", func(m obj) { at(m, "request")["house"] = "origin90" }},
		{"backend", func(m obj) { at(m, "request")["backend"] = "sandbox2" }},
		{"credential", func(m obj) { at(m, "request")["credential"] = "other-token" }},
		{"task", func(m obj) { at(m, "request")["task"] = "issue-196" }},
		{"attempt", func(m obj) { at(m, "request")["attempt"] = 2 }},
		{"key", func(m obj) { at(m, "request")["key"] = "k-8d2g" }},
		{"executor", func(m obj) { at(m, "request.effect")["executor"] = "github" }},
		{"role", func(m obj) { at(m, "request.effect.effect")["role"] = "commis" }},
		{"workspace", func(m obj) {
			at(m, "request.effect.effect")["workspace"] = obj{"type": "existing", "resource": obj{"kind": "worktree", "backend": "sandbox", "handle": "wt"}}
		}},
		{"brief", func(m obj) { at(m, "request.effect.effect")["brief"] = "Fix the flaky test!" }},
		{"branch", func(m obj) { at(m, "request.effect.effect")["branch"] = "kitchen/issue-196" }},
		{"no branch", func(m obj) { delete(at(m, "request.effect.effect"), "branch") }},
		{"pinned", func(m obj) {
			at(m, "request.effect.effect")["pinned"] = obj{"head": strings.Repeat("a", 40), "report_path": "r"}
		}},
		{"agent", func(m obj) { at(m, "request.effect.effect.agent")["agent"] = "claude" }},
		{"model", func(m obj) { at(m, "request.effect.effect.agent")["model"] = "gpt-6" }},
		{"effort", func(m obj) { at(m, "request.effect.effect.agent")["effort"] = "high" }},
		{"no agent", func(m obj) { delete(at(m, "request.effect.effect"), "agent") }},
	} {
		m := deepCopy(generic).(obj)
		tc.mod(m)
		fp := fingerprintOf(t, string(mustJSON(t, m)))
		if prev, ok := seen[fp]; ok {
			t.Errorf("%s: same fingerprint as %s", tc.name, prev)
		}
		seen[fp] = tc.name
	}
	// The other effect types' fields, and another executor's effect.
	w := `{"kind":"worker","backend":"sandbox","handle":"w-17"}`
	for _, effect := range []string{
		`{"type":"message-worker","worker":` + w + `,"body":"hi"}`,
		`{"type":"message-worker","worker":` + w + `,"body":"hi!"}`,
		`{"type":"message-worker","worker":{"kind":"worker","backend":"sandbox","handle":"w-18"},"body":"hi"}`,
		`{"type":"reply-to-worker","worker":` + w + `,"question":"q1","body":"hi"}`,
		`{"type":"reply-to-worker","worker":` + w + `,"question":"q2","body":"hi"}`,
		`{"type":"cancel-worker","worker":` + w + `}`,
		`{"type":"release-resource","resource":` + w + `}`,
		`{"type":"release-resource","resource":{"kind":"worktree","backend":"sandbox","handle":"w-17"}}`,
	} {
		body := string(mustJSON(t, callWith(json.RawMessage(effect))))
		fp := fingerprintOf(t, body)
		if prev, ok := seen[fp]; ok {
			t.Errorf("%s: same fingerprint as %s", effect, prev)
		}
		seen[fp] = effect
	}
}

func TestFingerprintOtherExecutors(t *testing.T) {
	call := func(effect string) string {
		return `{"run":"r","request":{"house":"h","backend":"b","credential":"c","task":"t","attempt":1,"key":"k","effect":{"executor":"github","effect":` + effect + `}}}`
	}
	a := fingerprintOf(t, call(`{"repo":"x","labels":["a","b"],"n":1}`))
	if b := fingerprintOf(t, call(` { "n" : 1 , "labels" : [ "a" , "b" ] , "repo" : "\u0078" } `)); a != b {
		t.Error("spelling changed an unknown executor's fingerprint")
	}
	if b := fingerprintOf(t, call(`{"repo":"x","labels":["b","a"],"n":1}`)); a == b {
		t.Error("array order did not change the fingerprint")
	}
	// A worker effect that does not decode has no fingerprint.
	c, err := DecodeEffectCall([]byte(strings.Replace(call(`{"type":"nope"}`), "github", "worker", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Fingerprint(c); err == nil {
		t.Error("fingerprint of an invalid worker effect")
	}
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, el := range v {
			m[k] = deepCopy(el)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, el := range v {
			s[i] = deepCopy(el)
		}
		return s
	}
	return v
}
