package agents

import (
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

func TestSessionDir(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		family string
		env    map[string]string
		want   string
	}{
		{FamilyClaude, nil, ".claude/projects"},
		{FamilyClaude, map[string]string{EnvClaudeConfigDir: "/etc/claude"}, "/etc/claude/projects"},
		{FamilyClaude, map[string]string{EnvClaudeConfigDir: "relative"}, ".claude/projects"},
		{FamilyCodex, nil, ".codex/sessions"},
		{FamilyCodex, map[string]string{EnvCodexHome: "/srv/codex"}, "/srv/codex/sessions"},
		{"other", nil, ""},
	} {
		if got := SessionDir(tc.family, env(tc.env)); got != tc.want {
			t.Errorf("%s %v: %q, want %q", tc.family, tc.env, got, tc.want)
		}
	}
}

// The session id comes from the CLI's stream, which the agent may forge:
// only a UUID reaches the resumed CLI's command line.
func TestResumeCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	bin := fakeCLI(t, "codex")
	self := workerapi.Self{Brief: "do it", Agent: protocol.AgentSelection{Agent: "codex"}}
	d := Driver{Family: FamilyCodex, BinDir: bin, Supervisor: "/bin/galley-worker"}
	id := "0199a213-81c0-7800-8aa1-bbab2a035a53"
	cmd, err := d.ResumeCommand(self, "http://127.0.0.1:1/mcp", "s3cret", "/ws", id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cmd.Env, contract.EnvAgentResume+"="+id) || !slices.Equal(cmd.Args, []string{"/bin/galley-worker", SessionCommand}) {
		t.Errorf("resume command %v env %v", cmd.Args, cmd.Env)
	}
	for _, bad := range []string{"", "--dangerously-skip-permissions", "0199a213-81c0-7800-8aa1-bbab2a035a5", "0199a213-81c0-7800-8aa1-bbab2a035a5g",
		"0199a213x81c0-7800-8aa1-bbab2a035a53", "../../0199a213-81c0-7800-8aa1-bbab2a0"} {
		if _, err := d.ResumeCommand(self, "u", "s", "/ws", bad); err == nil {
			t.Errorf("resumed from %q", bad)
		}
	}
	cfg, err := SessionConfigFromEnv(func(k string) string {
		return map[string]string{contract.EnvAgentFamily: "codex", contract.EnvAgentCLI: "/c", contract.EnvWorkspace: "/ws",
			contract.EnvMCPURL: "u", contract.EnvMCPSecret: "s", contract.EnvBrief: "b", contract.EnvAgentResume: "-x"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), "not a session id") {
		t.Errorf("a supervisor took a resume of %q: %v", cfg.Resume, err)
	}
	// Each CLI resumes the session by its own flag (args.go).
	if a := codexArgs(SessionConfig{}, id); !slices.Equal(a[len(a)-3:], []string{"resume", id, "-"}) {
		t.Errorf("codex args %v", a)
	}
	if a := claudeArgs(SessionConfig{}, "/m.json", id); !slices.Equal(a[len(a)-2:], []string{"--resume", id}) {
		t.Errorf("claude args %v", a)
	}
}
