// Command codex is a stand-in for the Codex CLI in tests: it accepts the
// `codex exec` flags galley's codex driver passes (and refuses others as
// the real CLI does), writes codex's exec --json lines and does what a
// script in the prompt says (package standin).
package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/galley-run/galley/local/standin-cli/standin"
)

func main() { os.Exit(run(os.Args[1:])) }

var (
	boolean = map[string]bool{"--json": true, "--dangerously-bypass-approvals-and-sandbox": true, "--skip-git-repo-check": true}
	efforts = map[string]bool{"none": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true}
)

func unexpected(a string) int {
	fmt.Fprintf(os.Stderr, "error: unexpected argument '%s' found\n\nUsage: codex exec [OPTIONS] [PROMPT]\n       codex exec [OPTIONS] <COMMAND> [ARGS]\n\nFor more information, try '--help'.\n", a)
	return 2
}

func run(args []string) int {
	if len(args) == 0 || (args[0] != "exec" && args[0] != "e") {
		fmt.Fprintln(os.Stderr, "standin codex: only `codex exec` is supported")
		return 2
	}
	args = args[1:]
	cfg := map[string]string{}
	set := map[string]bool{}
	model, resume := "", ""
	var positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "--config":
			if i+1 >= len(args) {
				return unexpected(a)
			}
			i++
			k, v, ok := strings.Cut(args[i], "=")
			if !ok {
				fmt.Fprintf(os.Stderr, "Error: Invalid override (missing '='): %s\n", args[i])
				return 2
			}
			cfg[k] = tomlValue(v)
		case a == "-m" || a == "--model":
			if i+1 >= len(args) {
				return unexpected(a)
			}
			i++
			model = args[i]
		case boolean[a]:
			set[a] = true
		case a == "-":
			positional = append(positional, a)
		case strings.HasPrefix(a, "-"):
			return unexpected(a)
		case a == "resume" && len(positional) == 0 && resume == "":
			if i+1 >= len(args) {
				fmt.Fprintln(os.Stderr, "standin codex: exec resume needs a session id")
				return 2
			}
			i++
			resume = args[i]
		default:
			positional = append(positional, a)
		}
	}
	if !set["--json"] {
		fmt.Fprintln(os.Stderr, "standin codex: only --json output is supported")
		return 2
	}
	if e := cfg["model_reasoning_effort"]; e != "" && !efforts[e] {
		fmt.Fprintf(os.Stderr, "Error: unknown variant `%s` for model_reasoning_effort\n", e)
		return 1
	}
	const srv = "mcp_servers.galley."
	opts := standin.Options{Family: "codex", Model: model, Effort: cfg["model_reasoning_effort"], Resume: resume,
		MCPURL: cfg[srv+"url"]}
	opts.Required, _ = strconv.ParseBool(cfg[srv+"required"])
	// Where codex sends its model calls: the model provider galley
	// configures (model_provider and its base_url), else openai_base_url.
	opts.ModelBaseURL = cfg["openai_base_url"]
	if p := cfg["model_provider"]; p != "" {
		opts.ModelBaseURL = cfg["model_providers."+p+".base_url"]
	}
	if env := cfg[srv+"bearer_token_env_var"]; env != "" {
		tok := os.Getenv(env)
		if tok == "" {
			fmt.Fprintf(os.Stderr, "Error: environment variable %s for MCP server galley is not set\n", env)
			return 1
		}
		opts.MCPAuth = "Bearer " + tok
	}
	if opts.MCPURL != "" && cfg[srv+"default_tools_approval_mode"] != "approve" {
		fmt.Fprintln(os.Stderr, "standin codex: galley's tools need default_tools_approval_mode=approve (approval policy is never in exec)")
		return 1
	}
	prompt := ""
	switch {
	case len(positional) > 1:
		return unexpected(positional[1])
	case len(positional) == 1 && positional[0] != "-":
		prompt = positional[0]
	default:
		b, _ := io.ReadAll(os.Stdin)
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(os.Stderr, "No prompt provided via stdin.")
		return 1
	}
	return standin.Run(opts, prompt, os.Stdout, os.Stderr)
}

// tomlValue reads an override's value: a TOML basic string, or the raw
// text (as codex falls back to a literal).
func tomlValue(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		if s, err := strconv.Unquote(v); err == nil {
			return s
		}
		return v[1 : len(v)-1]
	}
	return v
}
