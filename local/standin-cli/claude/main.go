// Command claude is a stand-in for the Claude Code CLI in tests: it accepts
// the flags galley's claude driver passes (and refuses others as the real
// CLI does), writes claude's stream-json lines and does what a script in
// the prompt says (package standin).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/galley-run/galley/local/standin-cli/standin"
)

func main() { os.Exit(run(os.Args[1:])) }

// Flags taking a value, and flags without one, as the real CLI has them.
var (
	valued = map[string]bool{"--output-format": true, "--mcp-config": true, "--permission-mode": true,
		"--allowedTools": true, "--allowed-tools": true, "--append-system-prompt": true, "--model": true,
		"--effort": true, "--resume": true, "-r": true}
	boolean = map[string]bool{"-p": true, "--print": true, "--verbose": true, "--strict-mcp-config": true}
	efforts = map[string]bool{"low": true, "medium": true, "high": true, "xhigh": true, "max": true}
)

func run(args []string) int {
	vals := map[string]string{}
	set := map[string]bool{}
	var prompt []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, v, hasV := strings.Cut(a, "=")
		switch {
		case valued[name]:
			if !hasV {
				if i+1 >= len(args) {
					fmt.Fprintf(os.Stderr, "error: option '%s <value>' argument missing\n", name)
					return 1
				}
				i++
				v = args[i]
			}
			vals[name] = v
		case boolean[a]:
			set[a] = true
		case strings.HasPrefix(a, "-"):
			fmt.Fprintf(os.Stderr, "error: unknown option '%s'\n", a)
			return 1
		default:
			prompt = append(prompt, a)
		}
	}
	if !set["-p"] && !set["--print"] {
		fmt.Fprintln(os.Stderr, "standin claude: only --print (-p) runs are supported")
		return 1
	}
	if vals["--output-format"] != "stream-json" {
		fmt.Fprintln(os.Stderr, "standin claude: only --output-format stream-json is supported")
		return 1
	}
	if !set["--verbose"] {
		fmt.Fprintln(os.Stderr, "Error: When using --print, --output-format=stream-json requires --verbose")
		return 1
	}
	if e := vals["--effort"]; e != "" && !efforts[e] {
		fmt.Fprintf(os.Stderr, "Warning: Unknown --effort value '%s' — ignoring it and using the default effort. Valid values: low, medium, high, xhigh, max.\n", e)
		delete(vals, "--effort")
	}
	opts := standin.Options{Family: "claude", Model: vals["--model"], Effort: vals["--effort"], Resume: vals["--resume"]}
	if vals["-r"] != "" {
		opts.Resume = vals["-r"]
	}
	if f := vals["--mcp-config"]; f != "" {
		url, auth, err := readMCPConfig(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "Error: Invalid MCP configuration: %v\n", err)
			return 1
		}
		opts.MCPURL, opts.MCPAuth = url, auth
	}
	text := strings.Join(prompt, " ")
	if text == "" {
		b, _ := io.ReadAll(os.Stdin)
		text = string(b)
	}
	if strings.TrimSpace(text) == "" {
		fmt.Fprintln(os.Stderr, "Error: Input must be provided either through stdin or as a prompt argument when using --print")
		return 1
	}
	return standin.Run(opts, text, os.Stdout, os.Stderr)
}

// readMCPConfig reads galley's server from a --mcp-config file (or JSON
// string, as the real flag also takes).
func readMCPConfig(arg string) (url, auth string, err error) {
	data := []byte(arg)
	if !strings.HasPrefix(strings.TrimSpace(arg), "{") {
		if data, err = os.ReadFile(arg); err != nil {
			return "", "", err
		}
	}
	var c struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return "", "", err
	}
	s, ok := c.MCPServers["galley"]
	if !ok {
		return "", "", nil
	}
	if s.Type != "http" {
		return "", "", fmt.Errorf("server galley: type %q is not http", s.Type)
	}
	return s.URL, s.Headers["Authorization"], nil
}
