package agents

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/galley-run/galley/pkg/agents/effort"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// SessionCommand is the galley-worker subcommand that runs the session
// supervisor (RunSession).
const SessionCommand = "agent-session"

// Driver drives one CLI family through the session supervisor.
type Driver struct {
	Family string // FamilyClaude or FamilyCodex
	// BinDir is where the CLI is looked for first (GALLEY_AGENT_BIN_DIR);
	// then PATH.
	BinDir string
	// Supervisor is the executable with the agent-session subcommand;
	// default this very executable (galley-worker).
	Supervisor string
	// Prices price codex's token counts; nil means the built-in table.
	Prices map[string]Price
}

// Drivers returns the claude and codex drivers, looking for the CLIs in
// binDir first, with the harness's default drivers (the scripted agent).
func Drivers(binDir string) map[string]harness.Driver {
	d := harness.DefaultDrivers()
	for _, f := range Families() {
		d[f] = Driver{Family: f, BinDir: binDir}
	}
	return d
}

// The names each family's CLI (or its supervisor) reads its provider's base
// URL from, which the harness sets to its model proxy: claude reads
// ANTHROPIC_BASE_URL itself; codex does not read OPENAI_BASE_URL, so the
// session supervisor turns it into a provider of galley's own (codexArgs).
const (
	EnvAnthropicBaseURL = "ANTHROPIC_BASE_URL"
	EnvOpenAIBaseURL    = "OPENAI_BASE_URL"
)

// Needs implements harness.Driver: each CLI calls its provider through the
// harness's model proxy, which it finds under the family's BaseURLEnv,
// with the proxy's token under the name it reads its key from (claude:
// ANTHROPIC_API_KEY; codex: CODEX_API_KEY); it cannot block in
// wait_message during a turn, so messages ride on its tool results.
func (d Driver) Needs() harness.AgentNeeds {
	switch d.Family {
	case FamilyClaude:
		return harness.AgentNeeds{Provider: harness.ProviderAnthropic, KeyEnv: harness.EnvAnthropicCLIKey,
			BaseURLEnv: EnvAnthropicBaseURL, CLI: d.Family, AppendMessages: true}
	case FamilyCodex:
		return harness.AgentNeeds{Provider: harness.ProviderOpenAI, KeyEnv: harness.EnvCodexCLIKey,
			BaseURLEnv: EnvOpenAIBaseURL, CLI: d.Family, AppendMessages: true}
	}
	return harness.AgentNeeds{AppendMessages: true}
}

// Command implements harness.Driver: it refuses a selection the CLI cannot
// honour and a missing CLI, then starts the supervisor with what it needs.
func (d Driver) Command(self workerapi.Self, mcpURL, mcpSecret, workspace string) (*exec.Cmd, error) {
	op := galleyerr.Op("agents.command")
	sel := self.Agent
	if sel.Agent != d.Family {
		return nil, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("the %s driver cannot run agent family %q", d.Family, sel.Agent))
	}
	if err := CheckSelection(sel); err != nil {
		return nil, err
	}
	cli, err := FindCLI(d.BinDir, d.Family)
	if err != nil {
		return nil, err
	}
	exe := d.Supervisor
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, galleyerr.E(op, "cannot find the worker executable", err)
		}
	}
	cmd := exec.Command(exe, SessionCommand)
	cmd.Dir = workspace
	cmd.Env = []string{
		contract.EnvMCPURL + "=" + mcpURL,
		contract.EnvMCPSecret + "=" + mcpSecret,
		contract.EnvWorkspace + "=" + workspace,
		contract.EnvBrief + "=" + self.Brief,
		contract.EnvAgentFamily + "=" + d.Family,
		contract.EnvAgentCLI + "=" + cli,
		contract.EnvAgentModel + "=" + sel.Model,
		contract.EnvAgentEffort + "=" + sel.Effort,
		contract.EnvAgentInstructions + "=" + Instructions(self.Branch),
	}
	return cmd, nil
}

// Instructions is what each CLI is told beside the brief (claude's
// --append-system-prompt, codex's developer_instructions).
func Instructions(branch string) string {
	var b strings.Builder
	b.WriteString("You run as a galley worker: a coordinator gave you the task in the prompt and talks to you only through the galley MCP tools. ")
	b.WriteString("Use ask_coordinator to ask a question (it waits for the reply), post_status for short progress notes, and escalate for problems that need a person. ")
	b.WriteString("Messages from the coordinator may arrive appended to the result of any galley tool call, or as your next prompt. ")
	if branch != "" {
		fmt.Fprintf(&b, "Work on the checked-out branch %s: commit your changes and push only that branch (git push origin HEAD). ", branch)
	} else {
		b.WriteString("Commit your changes in the workspace. ")
	}
	b.WriteString("When the work is over, call finish exactly once with outcome succeeded, failed or cancelled and a summary, then stop.")
	return b.String()
}

// Observe implements harness.Driver: it reads the CLI's JSON lines (as
// the supervisor copies them), reports ready on the init event once
// galley's MCP server is connected, logs each event briefly, and reports
// the usage each turn's end carries. Each tool call of the CLI's own
// (not galley's MCP tools) is reported once, with its result's size.
func (d Driver) Observe(stdout io.Reader, ev harness.Events) {
	prices := d.Prices
	if prices == nil {
		prices = codexPrices
	}
	if d.Family == FamilyClaude {
		prices = nil // claude states its cost
	}
	usage, _ := ev.(harness.UsageEvents)
	var counter *usageCounter
	model := ""
	if usage != nil {
		model = usage.Agent().Model
	}
	var tools toolTracker
	tools.te, _ = ev.(harness.ToolEvents)
	defer tools.flush()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		e, err := parseLine(d.Family, sc.Bytes())
		if err != nil {
			ev.Note("agent output is not a JSON event", "family", d.Family, "line", truncate(sc.Text(), 512))
			continue
		}
		switch e.Kind {
		case evInit:
			if e.Model != "" {
				model = e.Model
			}
			if ValidSessionID(e.Session) {
				// Where a parking resumes it.
				harness.TellResumable(ev, e.Session)
			}
			if e.MCP == "connected" {
				ev.Started(fmt.Sprintf("%s %s event: session %s, galley MCP server connected", d.Family, e.Type, e.Session))
			}
			ev.Note("agent session started", "family", d.Family, "event", e.Type, "session", e.Session, "model", e.Model, "mcp", e.MCP)
		case evTool:
			for _, c := range e.Calls {
				ev.Note("agent tool call", "family", d.Family, "tool", c.Tool, "server", c.Server)
				tools.start(c)
			}
			for _, r := range e.Results {
				tools.result(r)
			}
		case evTurnEnd:
			tools.flush()
			ev.Note("agent turn ended", "family", d.Family, "event", e.Type, "error", e.Err)
			if counter == nil {
				counter = newUsageCounter(d.Family, model, prices)
				if why := unpricedWhy(d.Family, model, prices); why != "" {
					ev.Note("agent usage reported without a cost", "family", d.Family, "why", why)
				}
			}
			if e.Totals != nil && e.Totals.CostUnknown {
				ev.Note("agent usage reported without a cost", "family", d.Family,
					"why", "claude marked a model's cost basis unknown: its total_cost_usd is a guess")
			}
			if rep, ok := counter.add(e.Totals); ok && usage != nil {
				usage.Usage(rep)
			}
		case evError:
			ev.Note("agent error", "family", d.Family, "error", truncate(e.Err, 1024))
		default:
			ev.Note("agent event", "family", d.Family, "event", e.Type)
		}
	}
	if err := sc.Err(); err != nil {
		ev.Note("agent output unreadable", "family", d.Family, "err", err)
	}
}

// unpricedWhy says why galley computes no cost for family's usage, or ""
// when it can: codex states no cost and names no model in its stream, so
// galley prices the launch's model, and only from its dated table.
func unpricedWhy(family, model string, prices map[string]Price) string {
	if family != FamilyCodex {
		return ""
	}
	if model == "" {
		return "codex states no cost and names no model; the launch chose none (codex runs its default, " +
			effort.CodexDefaultModel + ", which has no price in galley's table)"
	}
	if _, ok := prices[model]; !ok {
		return "model " + model + " has no price in galley's table (pkg/prices, " + PriceTableDate + ")"
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
