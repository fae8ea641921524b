package agents

import (
	"fmt"
	"strings"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
)

// codexBearerEnv names the variable codex reads galley's MCP bearer token
// from (mcp_servers.galley.bearer_token_env_var): the harness's own, so
// that the secret stays off the command line.
const codexBearerEnv = contract.EnvMCPSecret

// codexProvider is the model provider galley configures codex with. codex
// reads its key (the model proxy's token) from harness.EnvCodexCLIKey, the
// harness's KeyEnv for codex.
const codexProvider = "galley"

// ClaudeAllowedTools are the tools a headless claude may use without a
// prompt: file edits, the shell (git included) and galley's tools. With -p
// anything else that would ask (web access among them) is denied. The
// worker's container (or, locally, the operator's machine) is the sandbox:
// --dangerously-skip-permissions is not used, as claude refuses it as root.
var ClaudeAllowedTools = []string{"Bash", "Edit", "Write", "Read", "Glob", "Grep", "NotebookEdit", "TodoWrite", "Task", "mcp__" + MCPServerName}

// MCPToolTimeout bounds one galley tool call in codex (seconds): a
// question waits for the coordinator's reply.
const MCPToolTimeout = 86400

func (s *session) args(resume string) []string {
	switch s.cfg.Family {
	case FamilyClaude:
		return claudeArgs(s.cfg, s.mcpConfigPath(), resume)
	default:
		return codexArgs(s.cfg, resume)
	}
}

// claudeArgs: one headless turn, prompt on stdin, JSON lines on stdout.
func claudeArgs(c SessionConfig, mcpConfig, resume string) []string {
	a := []string{"-p", "--output-format", "stream-json", "--verbose",
		"--mcp-config", mcpConfig, "--strict-mcp-config",
		"--permission-mode", "acceptEdits",
		"--allowedTools", strings.Join(ClaudeAllowedTools, ","),
	}
	if c.Instructions != "" {
		a = append(a, "--append-system-prompt", c.Instructions)
	}
	if c.Model != "" {
		a = append(a, "--model", c.Model)
	}
	if c.Effort != "" {
		a = append(a, "--effort", c.Effort)
	}
	if resume != "" {
		a = append(a, "--resume", resume)
	}
	return a
}

// codexArgs: codex exec (or exec resume), prompt on stdin ("-"), JSON lines
// on stdout, galley's server configured with -c overrides.
func codexArgs(c SessionConfig, resume string) []string {
	srv := "mcp_servers." + MCPServerName + "."
	a := []string{"exec", "--json", "--dangerously-bypass-approvals-and-sandbox",
		"-c", srv + "url=" + tomlString(c.MCPURL),
		"-c", srv + "bearer_token_env_var=" + tomlString(codexBearerEnv),
		"-c", srv + "required=true",
		"-c", srv + "default_tools_approval_mode=" + tomlString("approve"),
		"-c", fmt.Sprintf("%stool_timeout_sec=%d", srv, MCPToolTimeout),
	}
	if c.Instructions != "" {
		a = append(a, "-c", "developer_instructions="+tomlString(c.Instructions))
	}
	if c.OpenAIBaseURL != "" {
		// codex ignores OPENAI_BASE_URL. A provider of galley's own sends
		// its calls to the harness's model proxy, with the token codex
		// reads from CODEX_API_KEY, over HTTP: the built-in provider tries
		// the Responses WebSocket first (seven attempts, about 7 s a
		// turn, before it falls back), which the proxy does not serve.
		p := "model_providers." + codexProvider + "."
		a = append(a, "-c", "model_provider="+tomlString(codexProvider),
			"-c", p+"name="+tomlString(codexProvider),
			"-c", p+"base_url="+tomlString(c.OpenAIBaseURL),
			"-c", p+"env_key="+tomlString(harness.EnvCodexCLIKey),
			"-c", p+"wire_api="+tomlString("responses"),
			"-c", p+"supports_websockets=false")
	}
	if c.Model != "" {
		a = append(a, "-m", c.Model)
	}
	if c.Effort != "" {
		a = append(a, "-c", "model_reasoning_effort="+tomlString(c.Effort))
	}
	if resume != "" {
		a = append(a, "resume", resume)
	}
	return append(a, "-")
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
