package bootstrap

import (
	"strings"
	"testing"
)

func TestCode(t *testing.T) {
	const handle, token = "w-3f9a1c0d2b4e6f8a0c1e", "w-3f9a1c0d2b4e6f8a0c1e.c2FtcGxlLW1hYy1ub3QtcmVhbA"
	code := Code(token, handle)
	if code != Code(token, handle) {
		t.Fatal("Code is not deterministic: a retried RunTask would conflict")
	}
	if !strings.HasPrefix(code, Prefix) || strings.Contains(code, token[len(handle)+1:]) {
		t.Errorf("Code = %q", code)
	}
	if !Valid(token, handle, code) {
		t.Error("a code does not verify")
	}
	for name, c := range map[string]string{
		"another handle": Code(token, "w-other"),
		"another token":  Code(token+"x", handle),
		"the token":      token,
		"no prefix":      strings.TrimPrefix(code, Prefix),
		"truncated":      code[:len(code)-1],
		"empty":          "",
	} {
		if Valid(token, handle, c) {
			t.Errorf("%s: Valid = true", name)
		}
	}
}
