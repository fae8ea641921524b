package harness

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strconv"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Driver starts one agent family and reads its output.
type Driver interface {
	// Needs says what the agent needs from the harness beside its command.
	Needs() AgentNeeds
	// Command builds the agent's command. Its Env holds only the variables
	// the driver adds; the harness puts them over the agent's environment
	// (AgentEnv), and refuses a command whose path, arguments or
	// environment hold the worker token, the git credential or a provider
	// key the agent does not need. The harness sets Stdout, Stderr and the
	// process attributes.
	Command(self workerapi.Self, mcpURL, mcpSecret, workspace string) (*exec.Cmd, error)
	// Observe reads the agent's stdout until EOF and tells ev what it shows.
	Observe(stdout io.Reader, ev Events)
}

// Provider names a model provider whose key the harness holds.
type Provider string

// Providers: Anthropic's key is Config.AnthropicKey, OpenAI's
// Config.OpenAIKey.
const (
	ProviderNone      Provider = ""
	ProviderAnthropic Provider = "anthropic"
	ProviderOpenAI    Provider = "openai"
)

// AgentNeeds is what an agent family needs from the harness.
type AgentNeeds struct {
	// Provider is the provider the agent calls. The harness serves it a
	// model proxy with the house's key for that provider (refusing to
	// start the agent without one), and gives the agent the proxy's
	// token under KeyEnv, the name its CLI reads its key from: never the
	// key.
	Provider Provider
	KeyEnv   string
	// BaseURLEnv is the name the agent's CLI reads its provider's base URL
	// from: the harness sets it to its model proxy, which forwards to the
	// configured URL of Provider (Config.AnthropicBaseURL, OpenAIBaseURL)
	// or the provider's public API.
	BaseURLEnv string
	// CLI is the program the agent runs (found in Config.AgentBinDir, then
	// on PATH), which its confinement must let it run: empty for an agent
	// of galley's own.
	CLI string
	// AppendMessages: the agent cannot block in wait_message while it
	// works (a CLI turn), so the harness appends the messages waiting at
	// the time of any other tool's result to that result.
	AppendMessages bool
}

// Events is what a driver reports from the agent's output stream.
type Events interface {
	// Started reports positive evidence that the agent runs, which the
	// harness reports to galley as ready (once).
	Started(evidence string)
	// Note logs one event of the agent's stream.
	Note(msg string, args ...any)
}

// Agent families with a driver in this harness.
const FamilyScript = "script"

// DefaultDrivers returns the drivers the worker image ships: the scripted
// agent. Claude Code and Codex drivers come with their CLIs.
func DefaultDrivers() map[string]Driver {
	return map[string]Driver{FamilyScript: ScriptDriver{}}
}

// ScriptAgentCommand is the galley-worker subcommand that runs the scripted
// agent.
const ScriptAgentCommand = "script-agent"

// Event types of the scripted agent's stdout stream, one JSON object a line
// with a "type" field.
const (
	EventStarted = "started" // connected to the MCP server and found its tools
	// EventDirective comes before each directive, with its line: where
	// the agent is, should it be parked.
	EventDirective = "directive"
)

// ScriptDriver runs the scripted agent: Executable (default: this very
// executable, galley-worker) with the script-agent subcommand.
type ScriptDriver struct {
	Executable string
}

// Needs implements Driver: the scripted agent needs no key and takes
// messages only through wait_message.
func (ScriptDriver) Needs() AgentNeeds { return AgentNeeds{} }

// Command implements Driver.
func (d ScriptDriver) Command(self workerapi.Self, mcpURL, mcpSecret, workspace string) (*exec.Cmd, error) {
	exe := d.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, galleyerr.E(galleyerr.Op("harness.script"), "cannot find the worker executable", err)
		}
	}
	cmd := exec.Command(exe, ScriptAgentCommand)
	cmd.Dir = workspace
	cmd.Env = []string{
		contract.EnvMCPURL + "=" + mcpURL,
		contract.EnvMCPSecret + "=" + mcpSecret,
		contract.EnvWorkspace + "=" + workspace,
		contract.EnvBrief + "=" + self.Brief,
	}
	return cmd, nil
}

// Observe implements Driver: the first "started" event is the evidence;
// every event is logged.
func (ScriptDriver) Observe(stdout io.Reader, ev Events) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			ev.Note("agent output", "line", truncate(sc.Text(), 4096))
			continue
		}
		switch e["type"] {
		case EventStarted:
			ev.Started("script agent started")
		case EventDirective:
			if line, ok := e["line"].(float64); ok && line >= 1 {
				TellResumable(ev, strconv.Itoa(int(line)))
			}
		}
		ev.Note("agent event", "event", e)
	}
}

// SessionDir implements Parker: the scripted agent keeps no session
// files.
func (ScriptDriver) SessionDir() string { return "" }

// ResumeCommand implements Parker: the scripted agent starts at fact, the
// line of the directive it was parked in (contract.EnvScriptResume).
func (d ScriptDriver) ResumeCommand(self workerapi.Self, mcpURL, mcpSecret, workspace, fact string) (*exec.Cmd, error) {
	if err := d.CheckResumeFact(fact); err != nil {
		return nil, err
	}
	cmd, err := d.Command(self, mcpURL, mcpSecret, workspace)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, contract.EnvScriptResume+"="+fact)
	return cmd, nil
}

// CheckResumeFact implements Parker: a line number.
func (ScriptDriver) CheckResumeFact(fact string) error {
	if n, err := strconv.Atoi(fact); err != nil || n < 1 || strconv.Itoa(n) != fact {
		return galleyerr.E(galleyerr.Op("harness.script"), galleyerr.Invalid, "the parked script's line is not a line number")
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
