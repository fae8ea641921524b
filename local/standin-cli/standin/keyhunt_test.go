package standin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sha(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

// The hunt finds a key by its hash alone, wherever it sits in a file and
// however many candidates of its shape surround it, finds the control,
// and names where, never the value.
func TestKeyHuntFindsByHash(t *testing.T) {
	key := "sk-ant-test-" + strings.Repeat("ab", 16)
	decoy := "sk-ant-test-" + strings.Repeat("cd", 16)
	control := "sk-openai-test-" + strings.Repeat("ef", 16)
	dir := t.TempDir()
	for name, body := range map[string]string{
		"decoy.txt":              "A=" + decoy + "\n",
		"deep/settings.json":     `{"apiKey":"` + key + `"}`,
		"control/planted":        control,
		"deep/other/nothing.txt": "nothing here",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := newHunt([]string{`sk-ant-test-[0-9a-f]{32}`, `sk-openai-test-[0-9a-f]{32}`}, []string{sha(key)}, sha(control))
	if err != nil {
		t.Fatal(err)
	}
	h.walk(context.Background(), dir)
	h.walk(context.Background(), dir) // each file once
	found, v := h.verdict("control/planted", "%d %d %d %d files %d %d")
	t.Log(v)
	if !found || !strings.Contains(v, filepath.Join(dir, "deep/settings.json")) || h.files != 4 {
		t.Errorf("the key was not found where it is (%d files): %s", h.files, v)
	}
	if h.candidates != 3 {
		t.Errorf("%d candidates, want 3 (the key, the decoy, the control)", h.candidates)
	}
	if !strings.Contains(strings.Join(h.controlAt, ","), filepath.Join(dir, "control/planted")) {
		t.Errorf("the control was not found: %v", h.controlAt)
	}
	for _, secret := range []string{key, decoy, control} {
		if strings.Contains(v, secret) {
			t.Errorf("the verdict holds a value: %s", v)
		}
	}
}

// Without the key in reach, the verdict is blocked and, the control found,
// passes CheckVerdict; a hunt that missed the control does not.
func TestKeyHuntVerdicts(t *testing.T) {
	control := "sk-ant-test-" + strings.Repeat("01", 16)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := newHunt([]string{`sk-ant-test-[0-9a-f]{32}`}, []string{sha("sk-ant-test-" + strings.Repeat("99", 16))}, sha(control))
	if err != nil {
		t.Fatal(err)
	}
	h.walk(context.Background(), dir)
	found, v := h.verdict("c", "%d %d %d %d %d %d")
	if found {
		t.Fatalf("found a key that is not there: %s", v)
	}
	if err := CheckVerdict("find-key", "attack find-key: blocked ("+v+")"); err != nil {
		t.Error(err)
	}
	missed, _ := newHunt([]string{`sk-ant-test-[0-9a-f]{32}`}, []string{sha("x")}, sha(control))
	_, v = missed.verdict("c", "%d %d %d %d %d %d")
	if CheckVerdict("find-key", "attack find-key: blocked ("+v+")") == nil {
		t.Errorf("a hunt that missed the control passed: %s", v)
	}
	if _, err := newHunt([]string{"("}, []string{"x"}, ""); err == nil {
		t.Error("a shape that does not compile was taken")
	}
}
