package scriptagent

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
)

// TestExecuteFromResumesAtItsLine: a resumed agent runs no directive
// before the line it was parked in, starts with that one (the ask, asked
// again), and says where it started.
func TestExecuteFromResumesAtItsLine(t *testing.T) {
	brief := "#!galley-script\nstatus before\n\n# a comment\nask Which API? :: v1 or v2?\nstatus after\ndone succeeded"
	for _, tc := range []struct {
		from  int
		calls []string
	}{
		{5, []string{"ask_coordinator map[body:v1 or v2? subject:Which API?]", "post_status map[body:reply: use v2]",
			"post_status map[body:after]", "finish map[body: outcome:succeeded]"}},
		{6, []string{"post_status map[body:after]", "finish map[body: outcome:succeeded]"}},
		{99, nil},
	} {
		tools := &fakeTools{}
		var out bytes.Buffer
		code, err := ExecuteFrom(context.Background(), tools, brief, t.TempDir(), &out, nil, tc.from)
		if err != nil || code != 0 {
			t.Fatalf("from %d: code %d, %v", tc.from, code, err)
		}
		if !reflect.DeepEqual(tools.calls, tc.calls) {
			t.Errorf("from %d: calls\n got %q\nwant %q", tc.from, tools.calls, tc.calls)
		}
		var started map[string]any
		first, _, _ := strings.Cut(out.String(), "\n")
		if err := json.Unmarshal([]byte(first), &started); err != nil || started["from"] != float64(tc.from) {
			t.Errorf("from %d: the started event %s does not say where", tc.from, first)
		}
	}
}

func TestConfigFromEnvReadsTheResumeLine(t *testing.T) {
	env := map[string]string{contract.EnvMCPURL: "http://127.0.0.1:1/mcp", contract.EnvMCPSecret: "s", contract.EnvWorkspace: "/w"}
	get := func(k string) string { return env[k] }
	if cfg, err := ConfigFromEnv(get); err != nil || cfg.From != 0 {
		t.Fatalf("no resume: %+v, %v", cfg.From, err)
	}
	env[contract.EnvScriptResume] = "7"
	if cfg, err := ConfigFromEnv(get); err != nil || cfg.From != 7 {
		t.Fatalf("resume at 7: %+v, %v", cfg.From, err)
	}
	for _, bad := range []string{"0", "-1", "seven"} {
		env[contract.EnvScriptResume] = bad
		if _, err := ConfigFromEnv(get); err == nil {
			t.Errorf("resume line %q accepted", bad)
		}
	}
}
