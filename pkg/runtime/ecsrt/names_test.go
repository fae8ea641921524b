package ecsrt_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/runtime/ecsrt"
)

func TestStartedBy(t *testing.T) {
	tests := []struct {
		handle  string
		literal bool
	}{
		{"w-3f9a1c0d2b4e6f8a0c1e", true},
		{"w-live", true},
		{strings.Repeat("a", 29), true},
		{strings.Repeat("a", 30), false}, // "galley-" + 30 > 36
		{"worker.with.dots", false},
		{"w space", false},
		{"galleyh-x", true},
		{"", false},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		sb := ecsrt.StartedBy(tc.handle)
		if len(sb) > ecsrt.MaxStartedBy || strings.Trim(sb, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/") != "" {
			t.Errorf("StartedBy(%q) = %q: not a valid startedBy", tc.handle, sb)
		}
		if !ecsrt.IsGalleyStartedBy(sb) {
			t.Errorf("StartedBy(%q) = %q is not recognised as galley's", tc.handle, sb)
		}
		h, ok := ecsrt.HandleFromStartedBy(sb)
		if ok != tc.literal || (ok && h != tc.handle) {
			t.Errorf("HandleFromStartedBy(%q) = %q, %v; want %q, %v", sb, h, ok, tc.handle, tc.literal)
		}
		if prev, dup := seen[sb]; dup {
			t.Errorf("StartedBy(%q) = StartedBy(%q) = %q", tc.handle, prev, sb)
		}
		seen[sb] = tc.handle
	}
	for _, sb := range []string{"ecs-svc/123", "galley-", "galley-has.dot", ""} {
		if h, ok := ecsrt.HandleFromStartedBy(sb); ok {
			t.Errorf("HandleFromStartedBy(%q) = %q, want none", sb, h)
		}
	}
}

func TestClientToken(t *testing.T) {
	for _, idem := range []string{"t-0123456789abcdef0123", "", strings.Repeat("x", 65), "has space", "ünïcode"} {
		ct := ecsrt.ClientToken(idem)
		if ct == "" || len(ct) > ecsrt.MaxClientToken || strings.ContainsFunc(ct, func(r rune) bool { return r < 33 || r > 126 }) {
			t.Errorf("ClientToken(%q) = %q: not a valid clientToken", idem, ct)
		}
		if ct != ecsrt.ClientToken(idem) {
			t.Errorf("ClientToken(%q) is not deterministic", idem)
		}
	}
	if got := ecsrt.ClientToken("t-0123456789abcdef0123"); got != "t-0123456789abcdef0123" {
		t.Errorf("a valid token was changed to %q", got)
	}
	if ecsrt.ClientToken(strings.Repeat("x", 65)) == ecsrt.ClientToken(strings.Repeat("x", 66)) {
		t.Error("two long tokens share a clientToken")
	}
}

func TestTagValue(t *testing.T) {
	tests := []struct{ in, want string }{
		{"run-1", "run-1"},
		{"key with spaces: ok=+/@.", "key with spaces: ok=+/@."},
		{"naïve ключ", "naïve ключ"},
		{"semi;colon*star\n", "semi_colon_star_"},
		{"aws:reserved", "_aws:reserved"},
		{"AWS:Reserved", "_AWS:Reserved"},
		{"", ""},
		{"bad\xffutf8", "bad_utf8"},
	}
	for _, tc := range tests {
		if got := ecsrt.TagValue(tc.in); got != tc.want {
			t.Errorf("TagValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, long := range []string{strings.Repeat("é", 300), "aws:" + strings.Repeat("a", 300)} {
		if n := utf8.RuneCountInString(ecsrt.TagValue(long)); n != ecsrt.MaxTagValue {
			t.Errorf("TagValue of a long value has %d characters, want %d", n, ecsrt.MaxTagValue)
		}
	}
}
