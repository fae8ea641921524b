package agents

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// fakeEvents records what a driver reports.
type fakeEvents struct {
	mu      sync.Mutex
	started []string
	notes   []string
	usage   []protocol.UsageReport
	agent   protocol.AgentSelection
}

func (f *fakeEvents) Started(e string) { f.mu.Lock(); f.started = append(f.started, e); f.mu.Unlock() }
func (f *fakeEvents) Note(msg string, _ ...any) {
	f.mu.Lock()
	f.notes = append(f.notes, msg)
	f.mu.Unlock()
}
func (f *fakeEvents) Usage(r protocol.UsageReport)   { f.usage = append(f.usage, r) }
func (f *fakeEvents) Agent() protocol.AgentSelection { return f.agent }

func recorded(t *testing.T, names ...string) []byte {
	t.Helper()
	var b []byte
	for _, n := range names {
		d, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, d...)
	}
	return b
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestObserveRecorded reads the real CLIs' recorded output (two turns of
// one session each) as the harness would get it from the supervisor.
func TestObserveRecorded(t *testing.T) {
	cases := []struct {
		family  string
		files   []string
		agent   protocol.AgentSelection
		started string
		usage   []string
	}{
		{FamilyClaude, []string{"claude-turn1.jsonl", "claude-resume.jsonl"}, protocol.AgentSelection{Agent: "claude", Model: "sonnet"},
			"claude system/init event: session fe55612c-6a3a-40ee-9772-10992dd27b7c, galley MCP server connected",
			[]string{
				`{"source":"","model":"claude-sonnet-4-5","tokens":{"input":3600,"output":126,"cacheRead":12000,"cacheWrite":900},"cost":{"amount":19665,"basis":"reported"}}`,
				// The resumed session's result carries the running totals.
				`{"source":"","model":"claude-sonnet-4-5","tokens":{"input":4800,"output":168,"cacheRead":16000,"cacheWrite":1200},"cost":{"amount":26220,"basis":"reported"}}`,
			}},
		{FamilyCodex, []string{"codex-turn1.jsonl", "codex-resume.jsonl"}, protocol.AgentSelection{Agent: "codex", Model: "gpt-5.5"},
			"codex thread.started event: session 01a22895-8ee6-7d90-a383-025890be8f7b, galley MCP server connected",
			[]string{
				// 2000 uncached × 5.00 + 6000 cached × 0.50 + 320 × 30.00
				`{"source":"","model":"gpt-5.5","tokens":{"input":2000,"output":320,"cacheRead":6000,"cacheWrite":0},"cost":{"amount":22600,"basis":"computed"}}`,
				`{"source":"","model":"gpt-5.5","tokens":{"input":2500,"output":400,"cacheRead":7500,"cacheWrite":0},"cost":{"amount":28250,"basis":"computed"}}`,
			}},
		{FamilyCodex, []string{"codex-turn1.jsonl"}, protocol.AgentSelection{Agent: "codex", Model: "an-unpriced-model"},
			"codex thread.started event: session 01a22895-8ee6-7d90-a383-025890be8f7b, galley MCP server connected",
			[]string{`{"source":"","model":"an-unpriced-model","tokens":{"input":2000,"output":320,"cacheRead":6000,"cacheWrite":0}}`}},
	}
	for _, tc := range cases {
		t.Run(tc.family+" "+tc.agent.Model, func(t *testing.T) {
			ev := &fakeEvents{agent: tc.agent}
			Driver{Family: tc.family}.Observe(bytes.NewReader(recorded(t, tc.files...)), ev)
			if len(ev.started) == 0 || ev.started[0] != tc.started {
				t.Fatalf("started: %q", ev.started)
			}
			var got []string
			for _, u := range ev.usage {
				got = append(got, js(u))
			}
			if !slices.Equal(got, tc.usage) {
				t.Fatalf("usage:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(tc.usage, "\n     "))
			}
		})
	}
}

// TestObserveNoEvidence: an init whose MCP server failed, or output that is
// not JSON, is no evidence that the agent runs.
func TestObserveNoEvidence(t *testing.T) {
	for name, in := range map[string][]byte{
		"claude mcp failed": recorded(t, "claude-init-mcp-failed.jsonl"),
		"garbage":           []byte("hello\n{\"type\": broken\n[1,2]\n"),
	} {
		ev := &fakeEvents{agent: protocol.AgentSelection{Agent: "claude"}}
		Driver{Family: FamilyClaude}.Observe(bytes.NewReader(in), ev)
		if len(ev.started) != 0 || len(ev.usage) != 0 {
			t.Errorf("%s: started %q, usage %v", name, ev.started, ev.usage)
		}
	}
}

func TestUsageCounterCarriesADrop(t *testing.T) {
	c := newUsageCounter(FamilyClaude, "m", nil)
	n := func(v int64) *int64 { return &v }
	f := func(v float64) *float64 { return &v }
	c.add(&totals{Input: n(100), Output: n(10), CostUSD: f(0.5)})
	// A new count (a resume that kept no totals) is added to the old.
	rep, ok := c.add(&totals{Input: n(30), Output: n(3), CostUSD: f(0.1)})
	if !ok || *rep.Tokens.Input != 130 || *rep.Tokens.Output != 13 || rep.Cost.Amount != 600000 || rep.Tokens.CacheRead != nil {
		t.Fatalf("after a drop: %s", js(rep))
	}
	if _, ok := newUsageCounter(FamilyCodex, "m", nil).add(&totals{}); ok {
		t.Fatal("empty totals made a report")
	}
}

func TestCheckSelection(t *testing.T) {
	const ok = galleyerr.Other // no error
	cases := []struct {
		sel  protocol.AgentSelection
		kind galleyerr.Kind
	}{
		{protocol.AgentSelection{Agent: "claude"}, ok},
		{protocol.AgentSelection{Agent: "claude", Model: "opus", Effort: "max"}, ok},
		{protocol.AgentSelection{Agent: "claude", Effort: "minimal"}, galleyerr.Invalid},
		// codex: no model of its catalog takes none or minimal (codex would
		// pass them to the API, which refuses the turn); max only on the
		// models that list it, its default model among them.
		{protocol.AgentSelection{Agent: "codex", Model: "gpt-5.5", Effort: "minimal"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "codex", Effort: "none"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "codex", Effort: "max"}, ok},
		{protocol.AgentSelection{Agent: "codex", Model: "gpt-6.2-sol", Effort: "max"}, ok},
		{protocol.AgentSelection{Agent: "codex", Model: "gpt-5.5", Effort: "max"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "codex", Model: "gpt-5.5", Effort: "xhigh"}, ok},
		{protocol.AgentSelection{Agent: "codex", Model: "some-new-model", Effort: "max"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "codex", Effort: "ultra"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "codex", Model: "-rf"}, galleyerr.Invalid},
		{protocol.AgentSelection{Agent: "script"}, galleyerr.Unsupported},
	}
	for _, tc := range cases {
		err := CheckSelection(tc.sel)
		if (err == nil) != (tc.kind == ok) || (err != nil && !galleyerr.Is(tc.kind, err)) {
			t.Errorf("%+v: %v, want kind %q", tc.sel, err, tc.kind)
		}
	}
}

func fakeCLI(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestDiscover(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		clis     []string
		families []string
		model    bool
		effort   string
	}{
		{nil, nil, false, "unsupported"},
		{[]string{"codex"}, []string{"codex"}, true, "always"},
		{[]string{"claude", "codex", "other"}, []string{"claude", "codex"}, true, "always"},
	} {
		f, m, e := Discover(fakeCLI(t, tc.clis...))
		if !slices.Equal(f, tc.families) || m != tc.model || e != tc.effort {
			t.Errorf("%v: %v %v %q", tc.clis, f, m, e)
		}
	}
	// PATH is looked at too.
	t.Setenv("PATH", fakeCLI(t, "claude"))
	if f, _, _ := Discover(""); !slices.Equal(f, []string{"claude"}) {
		t.Errorf("on PATH: %v", f)
	}
}

func TestCommand(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	bin := fakeCLI(t, "claude")
	self := workerapi.Self{Brief: "do it", Branch: "b/1", Agent: protocol.AgentSelection{Agent: "claude", Model: "opus", Effort: "high"}}
	cmd, err := Driver{Family: FamilyClaude, BinDir: bin, Supervisor: "/bin/galley-worker"}.Command(self, "http://127.0.0.1:1/mcp", "s3cret", "/ws")
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(cmd.Env, "\n")
	for _, want := range []string{"GALLEY_AGENT_CLI=" + filepath.Join(bin, "claude"), "GALLEY_AGENT_MODEL=opus", "GALLEY_AGENT_EFFORT=high", "GALLEY_BRIEF=do it"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %s", want)
		}
	}
	if !slices.Equal(cmd.Args, []string{"/bin/galley-worker", SessionCommand}) || cmd.Dir != "/ws" {
		t.Errorf("command %v in %s", cmd.Args, cmd.Dir)
	}
	for _, tc := range []struct {
		family string
		sel    protocol.AgentSelection
		want   string
	}{
		{FamilyCodex, protocol.AgentSelection{Agent: "codex"}, "codex CLI is not installed"},
		{FamilyClaude, protocol.AgentSelection{Agent: "claude", Effort: "turbo"}, `cannot honour effort "turbo"`},
		{FamilyClaude, protocol.AgentSelection{Agent: "codex"}, "cannot run agent family"},
	} {
		self.Agent = tc.sel
		_, err := Driver{Family: tc.family, BinDir: bin}.Command(self, "u", "s", "/ws")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.sel, err, tc.want)
		}
	}
}

func TestArgs(t *testing.T) {
	c := SessionConfig{Family: FamilyCodex, MCPURL: "http://127.0.0.1:9/mcp", MCPSecret: "s3cret", Model: "gpt-5.5", Effort: "high", Instructions: "say \"hi\"\n"}
	got := strings.Join(codexArgs(c, "t-1"), " ")
	want := `exec --json --dangerously-bypass-approvals-and-sandbox -c mcp_servers.galley.url="http://127.0.0.1:9/mcp" ` +
		`-c mcp_servers.galley.bearer_token_env_var="GALLEY_MCP_SECRET" -c mcp_servers.galley.required=true ` +
		`-c mcp_servers.galley.default_tools_approval_mode="approve" -c mcp_servers.galley.tool_timeout_sec=86400 ` +
		`-c developer_instructions="say \"hi\"\n" -m gpt-5.5 -c model_reasoning_effort="high" resume t-1 -`
	if got != want {
		t.Errorf("codex:\n got %s\nwant %s", got, want)
	}
	// The harness's model proxy (OPENAI_BASE_URL) reaches codex as a
	// provider of galley's own, over HTTP (no WebSocket), with its key
	// from CODEX_API_KEY.
	c.OpenAIBaseURL = "http://127.0.0.1:9/v1"
	if got := strings.Join(codexArgs(c, ""), " "); !strings.Contains(got, ` -c model_provider="galley" -c model_providers.galley.name="galley" `+
		`-c model_providers.galley.base_url="http://127.0.0.1:9/v1" -c model_providers.galley.env_key="CODEX_API_KEY" `+
		`-c model_providers.galley.wire_api="responses" -c model_providers.galley.supports_websockets=false -m gpt-5.5 `) {
		t.Errorf("codex with a base URL: %s", got)
	}
	if c, _ := SessionConfigFromEnv(func(k string) string {
		return map[string]string{contract.EnvAgentFamily: FamilyCodex, contract.EnvAgentCLI: "/x/codex", "GALLEY_WORKSPACE": "/w", "GALLEY_MCP_URL": "u",
			"GALLEY_MCP_SECRET": "s", "GALLEY_BRIEF": "b", "OPENAI_BASE_URL": "http://gw/v1"}[k]
	}); c.OpenAIBaseURL != "http://gw/v1" {
		t.Errorf("session config base URL = %q", c.OpenAIBaseURL)
	}
	c.Family, c.Instructions = FamilyClaude, ""
	got = strings.Join(claudeArgs(c, "/tmp/x/mcp.json", ""), " ")
	want = "-p --output-format stream-json --verbose --mcp-config /tmp/x/mcp.json --strict-mcp-config --permission-mode acceptEdits " +
		"--allowedTools Bash,Edit,Write,Read,Glob,Grep,NotebookEdit,TodoWrite,Task,mcp__galley --model gpt-5.5 --effort high"
	if got != want {
		t.Errorf("claude:\n got %s\nwant %s", got, want)
	}
	if strings.Contains(got, "s3cret") {
		t.Error("the MCP secret is on claude's command line")
	}
}

// TestCostRules: galley never invents a cost. claude's total for a model it
// marks costBasis "unknown" is left out (tokens still reported), for that
// turn and every later one; codex's usage without a model to price carries
// no cost and a note says why.
func TestCostRules(t *testing.T) {
	line := func(basis string, cost float64, in int) string {
		return js(map[string]any{"type": "result", "subtype": "success", "session_id": "s-1", "total_cost_usd": cost,
			"modelUsage": map[string]any{"claude-unreleased-9": map[string]any{"inputTokens": in, "outputTokens": 10, "costBasis": basis}}}) + "\n"
	}
	ev := &fakeEvents{agent: protocol.AgentSelection{Agent: "claude"}}
	Driver{Family: FamilyClaude}.Observe(strings.NewReader(line("list", 0.5, 100)+line("unknown", 0.9, 200)+line("list", 1.2, 300)), ev)
	if len(ev.usage) != 3 {
		t.Fatalf("usage = %v", ev.usage)
	}
	if c := ev.usage[0].Cost; c == nil || c.Basis != "reported" || c.Amount != 500000 {
		t.Errorf("a listed cost: %+v", c)
	}
	for _, u := range ev.usage[1:] {
		if u.Cost != nil || u.Tokens == nil || u.Tokens.Input == nil {
			t.Errorf("after costBasis unknown: %s", js(u))
		}
	}
	if !slices.Contains(ev.notes, "agent usage reported without a cost") {
		t.Errorf("notes = %v", ev.notes)
	}

	codex := `{"type":"thread.started","thread_id":"t-1"}` + "\n" +
		`{"type":"turn.completed","usage":{"input_tokens":1000,"cached_input_tokens":0,"output_tokens":50}}` + "\n"
	for _, model := range []string{"", "an-unpriced-model"} {
		ev := &fakeEvents{agent: protocol.AgentSelection{Agent: "codex", Model: model}}
		Driver{Family: FamilyCodex}.Observe(strings.NewReader(codex), ev)
		if len(ev.usage) != 1 || ev.usage[0].Cost != nil || *ev.usage[0].Tokens.Input != 1000 {
			t.Errorf("codex model %q: %s", model, js(ev.usage))
		}
		if !slices.Contains(ev.notes, "agent usage reported without a cost") {
			t.Errorf("codex model %q: no note saying why (%v)", model, ev.notes)
		}
	}
	if why := unpricedWhy(FamilyCodex, "", CodexPrices()); !strings.Contains(why, "names no model") {
		t.Errorf("why = %q", why)
	}
	if why := unpricedWhy(FamilyCodex, "gpt-5.5", CodexPrices()); why != "" {
		t.Errorf("a priced model: %q", why)
	}
}

// A message the harness appended to the supervisor's own status post is
// the next prompt; the status's own text is not.
func TestAppendedMessages(t *testing.T) {
	res := strings.Join([]string{"posted msg-3", messagePrefix + "rebase first", "not a message", messagePrefix + "then push"}, resultSep)
	if got := appendedMessages(res); !slices.Equal(got, []string{"rebase first", "then push"}) {
		t.Errorf("appended = %q", got)
	}
	if got := appendedMessages("posted msg-3"); len(got) != 0 {
		t.Errorf("appended = %q", got)
	}
}

// toolEvents is fakeEvents that also takes tool reports, as the harness's
// Events do.
type toolEvents struct {
	fakeEvents
	tools []reportedTool
}

type reportedTool struct {
	Name, Args string
	Bytes      int
}

func (f *toolEvents) Tool(name, args string, resultBytes int) {
	f.tools = append(f.tools, reportedTool{name, args, resultBytes})
}

// TestToolCalls: each tool call of the CLI's own is reported once, when
// its result is known, with its server-qualified name, its arguments
// (bounded) and its result's size; a call that never completes is
// reported at the turn's end without a size; galley's own MCP tools are
// not reported (the harness serving them does). Redaction of the fake key
// in the arguments is the harness's (pkg/harness TestToolEventRedacted).
func TestToolCalls(t *testing.T) {
	const fakeKey = "sk-ant-FAKE0123456789abcdefSECRET"
	for _, tc := range []struct {
		family, file string
		want         []reportedTool // Args: a prefix
	}{
		{FamilyClaude, "claude-tools.jsonl", []reportedTool{
			{"Bash", `{"command":"curl -H 'x-api-key: ` + fakeKey, len("hello, wörld\n")},
			{"github/search_code", `{"query":"func main"}`, len("found 3 matches")},
			{"Read", `{"file_path":"/tmp/rec/ws/README.md"}`, -1},
		}},
		{FamilyCodex, "codex-tools.jsonl", []reportedTool{
			{"command_execution", `bash -lc 'curl -H "Authorization: Bearer ` + fakeKey, len("ok\n12345\n")},
			{"github/search_code", `{"query":"func main"}`, len("found 3 matches")},
			{"github/get_file", `{"path":"a.go"}`, -1},
			{"command_execution", "sleep 100", -1},
		}},
	} {
		t.Run(tc.family, func(t *testing.T) {
			ev := &toolEvents{}
			Driver{Family: tc.family}.Observe(bytes.NewReader(recorded(t, tc.file)), ev)
			if len(ev.tools) != len(tc.want) {
				t.Fatalf("tools = %+v", ev.tools)
			}
			for i, w := range tc.want {
				g := ev.tools[i]
				if g.Name != w.Name || g.Bytes != w.Bytes || !strings.HasPrefix(g.Args, w.Args) {
					t.Errorf("tool %d = %+v, want %+v", i, g, w)
				}
				if len(g.Args) > argsKeep || strings.Contains(g.Name, "galley") {
					t.Errorf("tool %d: %d bytes of args, name %q", i, len(g.Args), g.Name)
				}
			}
			// The long command (over 300 bytes) is kept whole: under argsKeep.
			if !strings.Contains(ev.tools[0].Args, strings.Repeat("x", 300)) {
				t.Errorf("args cut: %q", ev.tools[0].Args)
			}
		})
	}

	// Calls beyond the pending bound are reported at once, without a size,
	// and memory stays bounded; their late results are ignored.
	var b strings.Builder
	for i := range maxPendingTools + 3 {
		b.WriteString(js(map[string]any{"type": "item.started", "item": map[string]any{"id": "i" + strconv.Itoa(i), "type": "command_execution", "command": "true"}}) + "\n")
	}
	b.WriteString(js(map[string]any{"type": "item.completed", "item": map[string]any{"id": "i0", "type": "command_execution", "command": "true", "aggregated_output": "abc"}}) + "\n")
	ev := &toolEvents{}
	Driver{Family: FamilyCodex}.Observe(strings.NewReader(b.String()), ev)
	if len(ev.tools) != maxPendingTools+3 {
		t.Fatalf("%d tools reported", len(ev.tools))
	}
	for i, g := range ev.tools[:3] {
		if g.Bytes != -1 {
			t.Errorf("over the bound, tool %d = %+v", i, g)
		}
	}
	if g := ev.tools[3]; g.Bytes != 3 {
		t.Errorf("the first pending call's result: %+v", g)
	}
	for _, g := range ev.tools[4:] {
		if g.Bytes != -1 {
			t.Errorf("never completed: %+v", g)
		}
	}

	// Arguments are cut to argsKeep on a rune boundary.
	long := strings.Repeat("é", argsKeep)
	if got := compactArgs(json.RawMessage(js(map[string]string{"s": long}))); len(got) > argsKeep || !utf8.ValidString(got) {
		t.Errorf("cut args: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}
