package harness_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// These tests run the harness in the test process with drivers of their
// own: shell commands standing in for agents, and the test itself acting as
// the agent's MCP client.

// shellDriver runs sh -c script as the agent, and hands the MCP endpoint to
// the test.
type shellDriver struct {
	script string
	args   []string
	env    []string // the driver's own variables
	mcp    chan [2]string
	needs  harness.AgentNeeds
}

func (d shellDriver) Needs() harness.AgentNeeds { return d.needs }

func (d shellDriver) Command(_ workerapi.Self, mcpURL, mcpSecret, workspace string) (*exec.Cmd, error) {
	if d.mcp != nil {
		d.mcp <- [2]string{mcpURL, mcpSecret}
	}
	cmd := exec.Command("sh", append([]string{"-c", d.script, "agent"}, d.args...)...)
	cmd.Dir = workspace
	cmd.Env = d.env
	return cmd, nil
}

func (d shellDriver) Observe(stdout io.Reader, ev harness.Events) {
	b, _ := io.ReadAll(stdout)
	if strings.Contains(string(b), "started") {
		ev.Started("shell said started")
	}
}

type inproc struct {
	log  *syncBuffer
	done chan error
	fake *fakeapi.Server // the worker API it called
}

func runInProcess(t *testing.T, ctx context.Context, f *fakeapi.Server, family string, d harness.Driver, edit func(*harness.Config)) *inproc {
	t.Helper()
	p := &inproc{log: &syncBuffer{}, done: make(chan error, 1), fake: f}
	cfg := harness.Config{
		Endpoint:      f.URL,
		Token:         testToken,
		Workspace:     filepath.Join(t.TempDir(), "ws"),
		Repository:    bareRepo(t),
		Heartbeat:     time.Hour,
		StopGrace:     5 * time.Second,
		Drivers:       map[string]harness.Driver{family: d},
		ClientOptions: []client.Option{client.WithRetry(2, time.Millisecond, time.Millisecond)},
		Logger:        slog.New(slog.NewJSONHandler(p.log, nil)),
	}
	if edit != nil {
		edit(&cfg)
	}
	go func() { p.done <- harness.Run(ctx, cfg) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("harness log:\n%s", p.log.String())
		}
	})
	return p
}

func (p *inproc) wait(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case err := <-p.done:
		if strings.Contains(p.log.String(), testToken[strings.LastIndex(testToken, ".")+1:]) {
			t.Error("the harness log holds the worker token")
		}
		return err
	case <-ctx.Done():
		t.Fatal("the harness did not return")
		return nil
	}
}

func fakeFor(t *testing.T, self workerapi.Self, opts ...fakeapi.Option) *fakeapi.Server {
	t.Helper()
	if self.Handle == "" {
		self.Handle, self.Run, self.Brief, self.Branch = "w-1", "run-1", "Fix it.", testBranch
	}
	f := fakeapi.New(self, testToken, opts...)
	t.Cleanup(f.Close)
	return f
}

// An agent that exits without an outcome is never reported ready without
// evidence, and its exit says why, once: the last lines of its stderr
// (issue 28, item 8), with secrets and anything shaped like a credential
// redacted.
func TestNoReadyWithoutEvidence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}})
	script := "echo warming up; for i in 1 2 3 4 5 6 7 8 9 10; do echo noise $i >&2; done; " +
		"echo 'error: cannot start: permission denied' >&2; echo 'with x-api-key: sk-ant-api03-abcdefghijklmnopqrst' >&2; exit 2"
	p := runInProcess(t, ctx, f, "shell", shellDriver{script: script}, nil)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	if len(s.Calls) != 1 || s.Calls[0].Exited == nil || s.Calls[0].Exited.Code != 2 {
		t.Fatalf("calls = %+v, want only exited with code 2", s.Calls)
	}
	reason := s.Calls[0].Exited.Reason
	if !strings.Contains(reason, "its stderr ended with:") || !strings.Contains(reason, "error: cannot start: permission denied") ||
		!strings.Contains(reason, "noise 10") || strings.Contains(reason, "noise 1\n") {
		t.Errorf("the exit's reason is not the stderr's last lines: %q", reason)
	}
	if strings.Contains(reason, "sk-ant") || !strings.Contains(reason, "x-api-key: [redacted]") {
		t.Errorf("the exit's reason holds a key: %q", reason)
	}
	if strings.Count(reason, "without reporting an outcome") != 0 {
		t.Errorf("the reason repeats what the service says: %q", reason)
	}
}

// A harness that cannot reach galley for longer than its client's retries
// (a server restarting after a SIGKILL) when it starts, and again when it
// reports its agent's exit, waits for galley instead of ending without a
// word: nothing else would report a harness an earlier server started, and
// its worker would stay unsettled.
func TestUnreachableGalleyIsWaitedFor(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}})
	f.FailNext(workerapi.PathSelf, 503, 503, 503, 503, 503)
	f.FailNext(workerapi.PathExited, 502, 503, 503)
	p := runInProcess(t, ctx, f, "shell", shellDriver{script: "echo warming up; exit 2"}, nil)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	if len(s.Calls) != 1 || s.Calls[0].Exited == nil || s.Calls[0].Exited.Code != 2 {
		t.Fatalf("calls = %+v, want only exited with code 2", s.Calls)
	}
	if n := s.Attempts[workerapi.PathSelf]; n != 6 {
		t.Errorf("%d attempts to read the launch facts, want 6 (5 failed)", n)
	}
}

func TestReadyOnStartedEvidence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}})
	p := runInProcess(t, ctx, f, "shell", shellDriver{script: "echo started; exit 0"}, nil)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	if s.Calls[0].Ready.Evidence != "shell said started" {
		t.Errorf("evidence = %q", s.Calls[0].Ready.Evidence)
	}
	if last := s.Calls[len(s.Calls)-1]; last.Exited == nil || last.Exited.Code != 0 {
		t.Errorf("last call = %+v, want exited 0 (no outcome reported)", last)
	}
	if len(s.Events) != 0 {
		t.Errorf("a deployment that asked for no events got %d", len(s.Events))
	}
}

func TestAgentNeverStarts(t *testing.T) {
	tests := []struct {
		name   string
		self   workerapi.Self
		driver harness.Driver
		reason string
	}{
		{"no driver for the family", workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}}, nil, `no driver for agent family "claude"`},
		{"the branch is missing", workerapi.Self{Handle: "w-1", Brief: "x", Branch: "kitchen/missing", Agent: protocol.AgentSelection{Agent: "shell"}},
			shellDriver{script: "exit 0"}, "preparing the workspace failed"},
		{"the token would reach the agent", workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}},
			shellDriver{script: "exit 0", args: []string{testToken}}, "refusing the agent command"},
		{"the agent cannot be executed", workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}},
			badExeDriver{}, "starting the agent failed"},
		// A cause that quotes a secret the harness holds: the reason, the
		// event and the log say why without it.
		{"the command cannot be built", workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}},
			badCmdDriver{}, "building the agent command failed: no agent for key [redacted]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			f := fakeFor(t, tt.self)
			drivers := map[string]harness.Driver{}
			if tt.driver != nil {
				drivers["shell"] = tt.driver
			}
			p := runInProcess(t, ctx, f, "unused", nil, func(c *harness.Config) { c.Drivers, c.EgressSecret = drivers, badCmdSecret })
			err := p.wait(t, ctx)
			if err == nil {
				t.Error("Run succeeded")
			} else if strings.Contains(err.Error(), badCmdSecret) {
				t.Error("Run's error holds a secret")
			}
			if strings.Contains(p.log.String(), badCmdSecret) {
				t.Error("the harness log holds a secret")
			}
			s := f.Snapshot()
			if len(s.Calls) != 1 || s.Calls[0].Exited == nil {
				t.Fatalf("calls = %+v, want only exited", s.Calls)
			}
			if e := s.Calls[0].Exited; e.Code != harness.CodeNotStarted || !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("exited = %+v, want a reason with %q", e, tt.reason)
			}
			if strings.Contains(s.Calls[0].Exited.Reason, testToken) {
				t.Error("the reason holds the token")
			}
		})
	}
}

// badCmdSecret is the egress service's credential, as
// TestAgentNeverStarts's harnesses hold it.
const badCmdSecret = "egress-secret-0123456789abcdef"

// badCmdDriver cannot build its command, and its error quotes a secret.
type badCmdDriver struct{}

func (badCmdDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{} }
func (badCmdDriver) Command(workerapi.Self, string, string, string) (*exec.Cmd, error) {
	return nil, fmt.Errorf("no agent for key %s", badCmdSecret)
}
func (badCmdDriver) Observe(io.Reader, harness.Events) {}

type badExeDriver struct{}

func (badExeDriver) Needs() harness.AgentNeeds { return harness.AgentNeeds{} }
func (badExeDriver) Command(workerapi.Self, string, string, string) (*exec.Cmd, error) {
	return exec.Command(filepath.Join(os.TempDir(), "no-such-agent-binary")), nil
}
func (badExeDriver) Observe(io.Reader, harness.Events) {}

func TestSettledWorkerDoesNothing(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", State: protocol.StateSettled, Outcome: protocol.OutcomeCancelled, Agent: protocol.AgentSelection{Agent: "shell"}})
	p := runInProcess(t, ctx, f, "shell", shellDriver{script: "echo started; sleep 60"}, nil)
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	if s := f.Snapshot(); len(s.Calls) != 0 {
		t.Errorf("calls = %+v", s.Calls)
	}
}

// TestToolsDirectly plays the agent: the test calls the MCP tools itself
// while a sleeping shell stands in for the agent process.
func TestToolsDirectly(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch,
		Agent: protocol.AgentSelection{Agent: "claude", Model: "opus-9"}, ReportEvents: true})
	ep := make(chan [2]string, 1)
	p := runInProcess(t, ctx, f, "claude", shellDriver{script: "exec sleep 600", mcp: ep, needs: harness.AgentNeeds{AppendMessages: true}},
		func(c *harness.Config) {
			c.StopGrace = 100 * time.Millisecond // the stand-in never exits by itself after finish
		})
	var mcpURL, secret string
	select {
	case e := <-ep:
		mcpURL, secret = e[0], e[1]
	case <-ctx.Done():
		t.Fatal("no agent command")
	}

	hc := &http.Client{Transport: bearerRT{secret}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: mcpURL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var parts []string
		for _, c := range res.Content {
			parts = append(parts, c.(*mcp.TextContent).Text)
		}
		return strings.Join(parts, "|"), res.IsError
	}

	seq := f.Message("rebase onto main")
	// Once the harness has taken the message from its inbox (its log says
	// so), the next tool result carries it. (Counting inbox polls raced a
	// busy machine: a poll counts when it begins, not when its answer was
	// taken.)
	waitForItem(t, ctx, p, seq)
	// The first tool call is the evidence that the agent runs; the message
	// waiting by then is appended to its result.
	text, isErr := call(harness.ToolStatus, map[string]any{"body": "looking"})
	if isErr {
		t.Fatalf("post_status: %s", text)
	}
	// An agent that posts the worker's own credential: its event is
	// redacted.
	// The inbox poll that holds the message may land just after the first
	// call's result was made: the message then rides on this one.
	leak, isErr := call(harness.ToolStatus, map[string]any{"body": "leak " + testToken})
	if isErr {
		t.Fatalf("post_status: %s", leak)
	}
	if n := strings.Count(text+leak, "Message from the coordinator: rebase onto main"); n != 1 {
		t.Errorf("the message appeared %d times in the results %q and %q, want once", n, text, leak)
	}
	if text, isErr := call(harness.ToolStatus, map[string]any{"body": "  "}); !isErr || !strings.Contains(text, "empty") {
		t.Errorf("an empty status answered %q", text)
	}
	if text, isErr := call(harness.ToolUsage, map[string]any{"input": 10, "output": 5}); isErr {
		t.Errorf("report_usage: %s", text)
	}
	if text, isErr := call(harness.ToolFinish, map[string]any{"outcome": "great"}); !isErr {
		t.Errorf("finish with a bad outcome answered %q", text)
	}
	if text, isErr := call(harness.ToolFinish, map[string]any{"outcome": "succeeded", "body": "done"}); isErr {
		t.Fatalf("finish: %s", text)
	}
	if text, isErr := call(harness.ToolStatus, map[string]any{"body": "after"}); !isErr || !strings.Contains(text, "already reported") {
		t.Errorf("a tool after finish answered %q", text)
	}

	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	if !strings.HasPrefix(s.Calls[0].Ready.Evidence, "agent called ") {
		t.Errorf("evidence = %q", s.Calls[0].Ready.Evidence)
	}
	var usage *workerapi.UsageRequest
	for _, c := range s.Calls {
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if usage == nil || usage.Report.Agent != "claude" || usage.Report.Model != "opus-9" || usage.Report.Cost != nil ||
		*usage.Report.Tokens.Input != 10 || *usage.Report.Tokens.Output != 5 {
		t.Errorf("usage = %+v", usage)
	}
	if got := kinds(s.Posts()); strings.Join(got, ",") != strings.Repeat("status,", len(got)-1)+"worker-done" {
		t.Errorf("posts = %v", got)
	}
	if s.Count(workerapi.PathExited) != 0 {
		t.Error("exited reported after finish")
	}
	// What the harness saw reached galley for the event log: the
	// workspace, the agent's start, each tool call with its arguments
	// and result size, and never the credential.
	seen := map[string]bool{}
	for _, e := range s.Events {
		seen[e.Event] = true
		all := e.Text
		for _, v := range e.Fields {
			all += v
		}
		if strings.Contains(all, testToken) {
			t.Errorf("event %+v holds the worker's credential", e)
		}
		if e.Event == workerapi.EventTool && e.Fields["tool"] == harness.ToolStatus && strings.Contains(e.Fields["args"], "looking") && e.Fields["resultBytes"] == "" {
			t.Errorf("tool event %+v has no result size", e)
		}
	}
	for _, ev := range []string{workerapi.EventWorkspace, workerapi.EventAgentStarted, workerapi.EventTool} {
		if !seen[ev] {
			t.Errorf("no %s event among %+v", ev, s.Events)
		}
	}
}

type bearerRT struct{ secret string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return http.DefaultTransport.RoundTrip(r)
}

func TestConfigFromEnv(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	loose := filepath.Join(dir, "loose")
	link := filepath.Join(dir, "link")
	empty := filepath.Join(dir, "empty")
	for path, mode := range map[string]os.FileMode{good: 0o600, loose: 0o644, empty: 0o600} {
		content := testToken + "\n"
		if path == empty {
			content = "\n"
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		contract.EnvWorkerEndpoint:  "http://127.0.0.1:8080",
		contract.EnvWorkerTokenFile: good,
		contract.EnvWorkspace:       "/tmp/ws",
		contract.EnvRepository:      "/tmp/repo.git",
	}
	tests := []struct {
		name string
		set  map[string]string
		ok   bool
	}{
		{"token file", nil, true},
		{"token in the environment", map[string]string{contract.EnvWorkerTokenFile: "", contract.EnvWorkerToken: testToken}, true},
		{"heartbeat", map[string]string{contract.EnvHeartbeatInterval: "5s"}, true},
		{"no token", map[string]string{contract.EnvWorkerTokenFile: ""}, false},
		{"token file readable by others", map[string]string{contract.EnvWorkerTokenFile: loose}, false},
		{"token file behind a link", map[string]string{contract.EnvWorkerTokenFile: link}, false},
		{"empty token file", map[string]string{contract.EnvWorkerTokenFile: empty}, false},
		{"missing token file", map[string]string{contract.EnvWorkerTokenFile: filepath.Join(dir, "none")}, false},
		{"bad endpoint", map[string]string{contract.EnvWorkerEndpoint: "ftp://x"}, false},
		{"no workspace", map[string]string{contract.EnvWorkspace: ""}, false},
		{"no repository", map[string]string{contract.EnvRepository: ""}, false},
		{"bad heartbeat", map[string]string{contract.EnvHeartbeatInterval: "often"}, false},
		{"git cache", map[string]string{contract.EnvGitCache: "/var/cache/git"}, true},
		{"git cache off", map[string]string{contract.EnvGitCache: "off"}, true},
		{"relative git cache", map[string]string{contract.EnvGitCache: "cache"}, false},
		{"base URLs", map[string]string{contract.EnvAnthropicBaseURL: "https://gw.example/anthropic", contract.EnvOpenAIBaseURL: "http://127.0.0.1:9/v1"}, true},
		{"http base URL off loopback", map[string]string{contract.EnvAnthropicBaseURL: "http://gw.example"}, false},
		{"base URL with a password", map[string]string{contract.EnvOpenAIBaseURL: "https://u:" + testToken + "@gw.example/v1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := configFromEnvWith(base, tt.set)
			if tt.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if err != nil {
				if !galleyerr.Is(galleyerr.Invalid, err) {
					t.Errorf("kind = %v", galleyerr.KindOf(err))
				}
				if strings.Contains(err.Error(), testToken) {
					t.Errorf("the error holds the token: %v", err)
				}
				return
			}
			if cfg.Token != testToken {
				t.Errorf("token not read")
			}
			if cfg.AnthropicBaseURL != tt.set[contract.EnvAnthropicBaseURL] || cfg.OpenAIBaseURL != tt.set[contract.EnvOpenAIBaseURL] {
				t.Errorf("base URLs %q, %q; want the environment's", cfg.AnthropicBaseURL, cfg.OpenAIBaseURL)
			}
			// The cache is beside the workspace unless named or off.
			wantCache := map[string]string{"/var/cache/git": "/var/cache/git", "off": ""}[tt.set[contract.EnvGitCache]]
			if _, named := tt.set[contract.EnvGitCache]; !named {
				wantCache = "/tmp/" + harness.DefaultGitCacheName
			}
			if cfg.GitCache != wantCache {
				t.Errorf("GitCache = %q, want %q", cfg.GitCache, wantCache)
			}
		})
	}
}

// TestAgentEnvironment runs a shell agent under a harness whose own
// environment is full of what the agent must not hold: it gets the
// allow-list, its model proxy's token and URL under its CLI's names, and
// nothing else.
// (Not parallel: it sets the process's environment.)
func TestAgentEnvironment(t *testing.T) {
	forbidden := map[string]string{}
	for _, k := range []string{
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_AUTHORIZATION_TOKEN",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"ECS_CONTAINER_METADATA_URI_V4", "GALLEY_WORKER_TOKEN", "GALLEY_KITCHN_TOKEN", "GALLEY_GIT_CREDENTIAL",
		"GALLEY_OPENAI_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY", "ANTHROPIC_API_KEY", "GIT_ASKPASS", "UNLISTED",
		// Unchecked, from the harness's own environment: the agent gets
		// only its provider's configured base URL.
		"ANTHROPIC_BASE_URL", "OPENAI_BASE_URL",
	} {
		forbidden[k] = randomSecret(t, "v-")
		t.Setenv(k, forbidden[k])
	}
	t.Setenv("LC_CTYPE", "C.UTF-8")
	t.Setenv("NODE_EXTRA_CA_CERTS", "/etc/ssl/extra.pem")
	t.Setenv("HOME", t.TempDir())
	anthropic, openai, gitCred := randomSecret(t, "sk-ant-"), randomSecret(t, "sk-oai-"), randomSecret(t, "ghs_")
	binDir := t.TempDir()

	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}})
	out := filepath.Join(t.TempDir(), "env")
	d := shellDriver{script: `env > "$1"; echo started`, args: []string{out}, env: []string{"DRIVER_SET=1"},
		needs: harness.AgentNeeds{Provider: harness.ProviderAnthropic, KeyEnv: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}}
	p := runInProcess(t, ctx, f, "claude", d, func(c *harness.Config) {
		c.AnthropicKey, c.OpenAIKey, c.GitCredential, c.AgentBinDir = anthropic, openai, gitCred, binDir
		c.AnthropicBaseURL, c.OpenAIBaseURL = "https://gw.example/anthropic", "https://gw.example/openai/v1"
	})
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	// The agent calls its model proxy (which forwards to the configured
	// base URL with the key) with the proxy's token: the key and the
	// configured URL are not the agent's.
	if !strings.HasPrefix(env["ANTHROPIC_API_KEY"], "galley-model-") {
		t.Error("the agent's ANTHROPIC_API_KEY is not its model proxy's token")
	}
	if strings.Contains(string(b), anthropic) {
		t.Error("the agent's environment holds the harness's Anthropic key")
	}
	if u := env["ANTHROPIC_BASE_URL"]; !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("the agent's ANTHROPIC_BASE_URL is %q, want its model proxy", u)
	}
	if strings.Contains(string(b), "gw.example") {
		t.Error("the agent has a configured base URL: it must reach only its model proxy")
	}
	if strings.Contains(string(b), "gw.example/openai") {
		t.Error("the claude agent has the OpenAI base URL")
	}
	for k, v := range forbidden {
		if k != "ANTHROPIC_API_KEY" && k != "ANTHROPIC_BASE_URL" {
			if _, ok := env[k]; ok {
				t.Errorf("the agent has %s", k)
			}
		}
		if strings.Contains(string(b), v) {
			t.Errorf("the agent's environment holds the value of the harness's %s", k)
		}
	}
	for what, v := range map[string]string{"OpenAI key": openai, "git credential": gitCred} {
		if strings.Contains(string(b), v) {
			t.Errorf("the agent's environment holds the %s", what)
		}
	}
	if env["LC_CTYPE"] != "C.UTF-8" || env["NODE_EXTRA_CA_CERTS"] == "" || env["HOME"] == "" || env["DRIVER_SET"] != "1" {
		t.Errorf("the agent lacks an allowed or driver variable: %q", string(b))
	}
	if !strings.HasPrefix(env["PATH"], binDir+string(os.PathListSeparator)) {
		t.Errorf("PATH = %q, want the agents' folder first", env["PATH"])
	}
}

func TestAgentEnvPath(t *testing.T) {
	got := harness.AgentEnv([]string{"HOME=/h", "AWS_REGION=x", "LC_ALL=C"}, "/bin/agents")
	if strings.Join(got, " ") != "HOME=/h LC_ALL=C PATH=/bin/agents" {
		t.Errorf("AgentEnv = %q (no empty PATH entry, which would search the working folder)", got)
	}
}

// TestMissingOrLeakedSecret: a CLI agent without its provider key never
// starts, and galley hears which secret is missing (by name); a driver that
// would hand the agent the git credential or another family's key is
// refused.
func TestMissingOrLeakedSecret(t *testing.T) {
	key, other, cred := randomSecret(t, "sk-"), randomSecret(t, "sk-"), randomSecret(t, "ghs_")
	claude := harness.AgentNeeds{Provider: harness.ProviderAnthropic, KeyEnv: "ANTHROPIC_API_KEY", AppendMessages: true}
	codex := harness.AgentNeeds{Provider: harness.ProviderOpenAI, KeyEnv: "CODEX_API_KEY", AppendMessages: true}
	for _, tc := range []struct {
		name   string
		d      shellDriver
		cfg    func(*harness.Config)
		reason string
	}{
		{"no Anthropic key", shellDriver{script: "echo started", needs: claude},
			func(c *harness.Config) { c.OpenAIKey = other }, "set GALLEY_ANTHROPIC_API_KEY"},
		{"no OpenAI key", shellDriver{script: "echo started", needs: codex},
			func(c *harness.Config) { c.AnthropicKey = other }, "set GALLEY_OPENAI_API_KEY"},
		{"the git credential in the driver's variables", shellDriver{script: "echo started", needs: claude, env: []string{"X=" + cred}},
			func(c *harness.Config) { c.AnthropicKey, c.GitCredential = key, cred }, "would hold the git credential"},
		{"the other family's key as an argument", shellDriver{script: "echo started", needs: claude, args: []string{other}},
			func(c *harness.Config) { c.AnthropicKey, c.OpenAIKey = key, other }, "would hold the openai key"},
		{"its own key as an argument", shellDriver{script: "echo started", needs: claude, args: []string{key}},
			func(c *harness.Config) { c.AnthropicKey = key }, "would hold the anthropic key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "cli"}})
			p := runInProcess(t, ctx, f, "cli", tc.d, tc.cfg)
			if err := p.wait(t, ctx); err == nil {
				t.Error("Run succeeded")
			}
			s := f.Snapshot()
			if len(s.Calls) != 1 || s.Calls[0].Exited == nil {
				t.Fatalf("calls = %+v, want only exited", s.Calls)
			}
			e := s.Calls[0].Exited
			if e.Code != harness.CodeNotStarted || !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("exited = %+v, want a reason with %q", e, tc.reason)
			}
			for _, v := range []string{key, other, cred} {
				if strings.Contains(e.Reason, v) || strings.Contains(p.log.String(), v) {
					t.Error("the reason or the log holds a secret")
				}
			}
		})
	}
}

// TestConfigSecrets: the secrets are read with their fallbacks, and a
// logged or printed Config shows none of them.
func TestConfigSecrets(t *testing.T) {
	ant, oai, codex, cred := randomSecret(t, "a-"), randomSecret(t, "o-"), randomSecret(t, "c-"), randomSecret(t, "g-")
	base := map[string]string{
		contract.EnvWorkerEndpoint: "http://127.0.0.1:8080", contract.EnvWorkerToken: testToken,
		contract.EnvWorkspace: "/tmp/ws", contract.EnvRepository: "https://git.example.com/house.git",
	}
	for _, tc := range []struct {
		name                        string
		set                         map[string]string
		anthropic, openai, git, usr string
	}{
		{"ECS names", map[string]string{"GALLEY_ANTHROPIC_API_KEY": ant + "\n", "GALLEY_OPENAI_API_KEY": oai, "GALLEY_GIT_CREDENTIAL": cred,
			"ANTHROPIC_API_KEY": "ignored", "CODEX_API_KEY": "ignored"}, ant, oai, cred, "x-access-token"},
		{"CLI names", map[string]string{"ANTHROPIC_API_KEY": ant, "CODEX_API_KEY": codex, "OPENAI_API_KEY": oai}, ant, codex, "", ""},
		{"OPENAI_API_KEY last", map[string]string{"OPENAI_API_KEY": oai, "GALLEY_GIT_CREDENTIAL": cred, "GALLEY_GIT_USERNAME": "bot"}, "", oai, cred, "bot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := configFromEnvWith(base, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.AnthropicKey != tc.anthropic || cfg.OpenAIKey != tc.openai || cfg.GitCredential != tc.git || cfg.GitUsername != tc.usr {
				t.Errorf("keys read wrong (anthropic %v, openai %v, git %v, user %q)",
					cfg.AnthropicKey == tc.anthropic, cfg.OpenAIKey == tc.openai, cfg.GitCredential == tc.git, cfg.GitUsername)
			}
			var logged syncBuffer
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "cfg", cfg)
			shown := fmt.Sprintf("%v %+v %#v %s ", cfg, cfg, cfg, cfg) + logged.String()
			for _, v := range []string{ant, oai, codex, cred, testToken} {
				if strings.Contains(shown, v) {
					t.Errorf("a printed or logged Config holds a secret: %s", shown)
				}
			}
			if !strings.Contains(logged.String(), "[redacted]") {
				t.Errorf("logged: %s", logged.String())
			}
		})
	}
}

// TestUnsetSecretEnv: once read, the secrets leave the harness's own
// environment, so no child that inherits it holds them. (Not parallel.)
func TestUnsetSecretEnv(t *testing.T) {
	gone := []string{"GALLEY_WORKER_TOKEN", "GALLEY_WORKER_BOOTSTRAP", "GALLEY_ANTHROPIC_API_KEY", "GALLEY_OPENAI_API_KEY",
		"GALLEY_GIT_CREDENTIAL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_SECRET_ACCESS_KEY", "ECS_CONTAINER_METADATA_URI_V4"}
	for _, k := range gone {
		t.Setenv(k, randomSecret(t, "v-"))
	}
	t.Setenv("GALLEY_WORKSPACE", "/ws")
	harness.UnsetSecretEnv()
	for _, k := range gone {
		if _, ok := os.LookupEnv(k); ok {
			t.Errorf("%s is still set", k)
		}
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range gone {
		if strings.Contains(string(out), k+"=") {
			t.Errorf("a child inherits %s", k)
		}
	}
	if os.Getenv("GALLEY_WORKSPACE") != "/ws" {
		t.Error("a variable that is no secret was removed")
	}
}

// configFromEnvWith is harness.ConfigFromEnv of base with set's variables
// put over it.
func configFromEnvWith(base, set map[string]string) (harness.Config, error) {
	env := maps.Clone(base)
	maps.Copy(env, set)
	return harness.ConfigFromEnv(func(k string) string { return env[k] })
}
