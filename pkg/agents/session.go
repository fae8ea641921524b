package agents

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
)

// SessionConfig is what the session supervisor needs; the driver passes it
// in the environment (SessionConfigFromEnv).
type SessionConfig struct {
	Family       string
	CLI          string // the CLI's absolute path
	Model        string
	Effort       string
	Instructions string
	Brief        string
	Workspace    string
	MCPURL       string
	MCPSecret    string
	// OpenAIBaseURL is the harness's model proxy for codex, which the
	// harness sets as OPENAI_BASE_URL and codex is given as the base URL
	// of a provider of galley's own (codexArgs).
	OpenAIBaseURL string
	// Resume is the session a parked worker's resumed supervisor goes on
	// with (contract.EnvAgentResume): its first prompt is the next
	// message (the reply that woke it comes as one).
	Resume string
	// StopGrace is how long the CLI gets between SIGTERM and SIGKILL when
	// the supervisor is stopped; default 5 s, within the harness's grace.
	StopGrace time.Duration
}

// SessionConfigFromEnv reads the variables the driver sets.
func SessionConfigFromEnv(getenv func(string) string) (SessionConfig, error) {
	c := SessionConfig{
		Family:       getenv(contract.EnvAgentFamily),
		CLI:          getenv(contract.EnvAgentCLI),
		Model:        getenv(contract.EnvAgentModel),
		Effort:       getenv(contract.EnvAgentEffort),
		Instructions: getenv(contract.EnvAgentInstructions),
		Brief:        getenv(contract.EnvBrief),
		Workspace:    getenv(contract.EnvWorkspace),
		MCPURL:       getenv(contract.EnvMCPURL),
		MCPSecret:    getenv(contract.EnvMCPSecret),
		Resume:       getenv(contract.EnvAgentResume),
	}
	if c.Family == FamilyCodex {
		c.OpenAIBaseURL = getenv(EnvOpenAIBaseURL)
	}
	switch {
	case c.Family != FamilyClaude && c.Family != FamilyCodex:
		return c, fmt.Errorf("agent-session: %s must be claude or codex", contract.EnvAgentFamily)
	case c.CLI == "" || c.Workspace == "" || c.MCPURL == "" || c.MCPSecret == "":
		return c, fmt.Errorf("agent-session: %s, %s, %s and %s are required", contract.EnvAgentCLI, contract.EnvWorkspace, contract.EnvMCPURL, contract.EnvMCPSecret)
	case c.Brief == "":
		return c, fmt.Errorf("agent-session: %s is empty", contract.EnvBrief)
	case c.Resume != "" && !ValidSessionID(c.Resume):
		return c, fmt.Errorf("agent-session: %s is not a session id", contract.EnvAgentResume)
	}
	return c, nil
}

// Exit codes of the supervisor besides the CLI's own.
const (
	CodeStopped = 128 + 15 // stopped by SIGTERM, as a shell reports it
	CodeFailed  = 1        // the session cannot go on (see stderr)
)

// toolsFinishedMark is in the harness's refusal of any tool call after
// finish.
const toolsFinishedMark = "already reported its outcome"

// RunSession runs one agent session turn by turn and returns the exit code:
// 0 once the agent has finished through the finish tool, the CLI's code
// when it failed, CodeFailed when its output or its turn failed,
// CodeStopped when ctx ended. The CLI's stdout lines are copied to stdout;
// the supervisor's own notes go to stderr.
func RunSession(ctx context.Context, cfg SessionConfig, stdout, stderr io.Writer) int {
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 5 * time.Second
	}
	s := &session{cfg: cfg, stdout: stdout, stderr: stderr}
	defer s.close()
	if cfg.Family == FamilyClaude {
		if err := s.writeClaudeMCPConfig(); err != nil {
			s.logf("cannot write claude's MCP configuration: %v", err)
			return CodeFailed
		}
	}
	prompt, id := cfg.Brief, cfg.Resume
	if id != "" {
		// A parked session, resumed: what woke it (the reply to the
		// question it was parked in, or the messages it waited for) is
		// its next prompt, on the same session.
		s.logf("resuming session %s; waiting for what woke it", id)
		next, code, ok := s.takePrompt(ctx)
		if !ok {
			return code
		}
		prompt = next
	}
	for turn := 1; ; turn++ {
		r := s.runTurn(ctx, turn, prompt, id)
		switch {
		case ctx.Err() != nil:
			return CodeStopped
		case r.failure != "":
			s.logf("turn %d: %s", turn, r.failure)
			if r.code != 0 {
				return r.code
			}
			return CodeFailed
		}
		if r.session != "" {
			id = r.session
		}
		next, code, ok := s.nextPrompt(ctx, turn)
		if !ok {
			return code
		}
		prompt = next
	}
}

type session struct {
	cfg            SessionConfig
	stdout, stderr io.Writer
	outMu          sync.Mutex

	dir   string // private temporary folder (claude's MCP configuration)
	tools *mcp.ClientSession
}

func (s *session) logf(format string, args ...any) {
	fmt.Fprintf(s.stderr, "agent-session (%s): %s\n", s.cfg.Family, fmt.Sprintf(format, args...))
}

func (s *session) close() {
	if s.tools != nil {
		_ = s.tools.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// writeClaudeMCPConfig writes the --mcp-config file: galley's server over
// streamable HTTP with the bearer header, in a folder only this user can
// read, outside the workspace, removed when the session ends.
func (s *session) writeClaudeMCPConfig() error {
	dir, err := os.MkdirTemp("", "galley-agent-")
	if err != nil {
		return err
	}
	s.dir = dir
	cfg := map[string]any{"mcpServers": map[string]any{MCPServerName: map[string]any{
		"type": "http", "url": s.cfg.MCPURL,
		"headers": map[string]string{"Authorization": "Bearer " + s.cfg.MCPSecret},
	}}}
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "mcp.json"), b, 0o600)
}

func (s *session) mcpConfigPath() string { return filepath.Join(s.dir, "mcp.json") }

// turnResult is what one CLI run showed.
type turnResult struct {
	session string
	code    int
	failure string // why the session cannot go on; "" after a clean turn end
}

func (s *session) runTurn(ctx context.Context, turn int, prompt, resume string) turnResult {
	args := s.args(resume)
	cmd := exec.Command(s.cfg.CLI, args...)
	cmd.Dir = s.cfg.Workspace
	cmd.Env = s.env()
	cmd.Stdin = strings.NewReader(prompt)
	cmd.Stderr = s.stderr
	setCLIProcAttr(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return turnResult{failure: err.Error()}
	}
	if err := cmd.Start(); err != nil {
		return turnResult{failure: fmt.Sprintf("cannot start %s: %v", s.cfg.CLI, err)}
	}
	var (
		r        turnResult
		ended    bool
		turnErr  string
		badMCP   string
		killOnce sync.Once
	)
	kill := func() { killOnce.Do(func() { _ = cmd.Process.Signal(syscall.SIGKILL) }) }
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			s.outMu.Lock()
			_, _ = s.stdout.Write(append(append([]byte(nil), line...), '\n'))
			s.outMu.Unlock()
			e, err := parseLine(s.cfg.Family, line)
			if err != nil {
				continue
			}
			if e.Session != "" {
				r.session = e.Session
			}
			switch e.Kind {
			case evInit:
				if e.MCP != "connected" {
					// Without galley's tools the agent can neither ask nor
					// finish: stop now rather than let it work unseen.
					badMCP = e.MCP
					kill()
				}
			case evTurnEnd:
				ended, turnErr = true, e.Err
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	waited := make(chan error, 1)
	go func() {
		<-read
		waited <- cmd.Wait()
	}()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(s.cfg.StopGrace)
		select {
		case werr = <-waited:
		case <-t.C:
			kill()
			werr = <-waited
		}
		t.Stop()
		return turnResult{code: CodeStopped, failure: "stopped"}
	}
	r.code = exitCode(cmd.ProcessState, werr)
	name := filepath.Base(s.cfg.CLI)
	switch {
	case badMCP != "":
		r.failure = fmt.Sprintf("%s could not use galley's MCP server (status %q); stopped it", name, badMCP)
		r.code = CodeFailed
	case r.code != 0:
		r.failure = fmt.Sprintf("%s exited with code %d", name, r.code)
	case !ended:
		r.failure = fmt.Sprintf("%s exited without the event that ends a turn: its output is not what galley reads", name)
	case turnErr != "":
		r.failure = turnErr
	}
	return r
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return CodeFailed
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// env is the supervisor's environment less every GALLEY_ variable, with
// what the CLI needs.
func (s *session) env() []string {
	var env []string
	has := map[string]bool{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, contract.EnvPrefix) {
			continue
		}
		has[k] = true
		env = append(env, kv)
	}
	setDefault := func(k, v string) {
		if !has[k] {
			env = append(env, k+"="+v)
		}
	}
	switch s.cfg.Family {
	case FamilyClaude:
		// ask_coordinator blocks until the coordinator replies: let a
		// tool call last a day (milliseconds). The idle limit (a call that
		// sends no response or progress that long is aborted) is claude's
		// default, stated: the harness sends progress every 20 s. Raising
		// it does not help: claude's HTTP transport drops a silent call at
		// 350 to 450 s anyway (docs/agents.md).
		setDefault("MCP_TOOL_TIMEOUT", "86400000")
		setDefault(ClaudeIdleTimeoutEnv, "300000")
		setDefault("DISABLE_AUTOUPDATER", "1")
	case FamilyCodex:
		env = append(env, codexBearerEnv+"="+s.cfg.MCPSecret)
	}
	return env
}

// ClaudeIdleTimeoutEnv is claude's MCP tool idle limit (ms; 0 disables).
const ClaudeIdleTimeoutEnv = "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT"

// nextPrompt is what happens between turns: a finished agent ends the
// session; otherwise the coordinator hears that the turn ended, and the
// next message becomes the next turn's prompt.
func (s *session) nextPrompt(ctx context.Context, turn int) (prompt string, code int, ok bool) {
	if code, ok := s.connect(ctx); !ok {
		return "", code, false
	}
	note := fmt.Sprintf("%s ended turn %d without calling finish; it waits for a message (message the worker to go on, or cancel it)", s.cfg.Family, turn)
	res, err := callTool(ctx, s.tools, harness.ToolStatus, map[string]any{"body": note})
	if err != nil {
		return s.toolFailed(ctx, err)
	}
	// A message that came just now rides on this call's result, as on any
	// tool result: it is the next prompt (waiting for another would lose it).
	if msgs := appendedMessages(res); len(msgs) > 0 {
		s.logf("a message arrived with the status; resuming the session for turn %d", turn+1)
		return strings.Join(msgs, "\n\n"), 0, true
	}
	s.logf("turn %d ended without finish; waiting for a message", turn)
	return s.takePrompt(ctx)
}

// connect connects to the harness's tools, once.
func (s *session) connect(ctx context.Context) (int, bool) {
	if s.tools != nil {
		return 0, true
	}
	cs, err := connectTools(ctx, s.cfg.MCPURL, s.cfg.MCPSecret)
	if err != nil {
		if ctx.Err() != nil {
			return CodeStopped, false
		}
		s.logf("cannot reach the harness's tools: %v", err)
		return CodeFailed, false
	}
	s.tools = cs
	return 0, true
}

// takePrompt waits for the next message, the next turn's prompt.
func (s *session) takePrompt(ctx context.Context) (string, int, bool) {
	if code, ok := s.connect(ctx); !ok {
		return "", code, false
	}
	msg, err := callTool(ctx, s.tools, harness.ToolWaitMessage, map[string]any{})
	if err != nil {
		return s.toolFailed(ctx, err)
	}
	s.logf("a message arrived; resuming the session")
	return strings.ReplaceAll(msg, resultSep, "\n"), 0, true
}

func (s *session) toolFailed(ctx context.Context, err error) (string, int, bool) {
	switch {
	case strings.Contains(err.Error(), toolsFinishedMark):
		return "", 0, false // the agent finished: the session is over
	case ctx.Err() != nil:
		return "", CodeStopped, false
	}
	s.logf("between turns: %v", err)
	return "", CodeFailed, false
}

// bearer adds the MCP secret to every request.
type bearer struct {
	secret string
	next   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.secret)
	return b.next.RoundTrip(r)
}

func connectTools(ctx context.Context, url, secret string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearer{secret: secret, next: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "galley-agent-session", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
}

// messagePrefix starts each message the harness appends to a tool result.
const messagePrefix = "Message from the coordinator: "

// appendedMessages returns the messages appended to a tool result (its
// text items after the first).
func appendedMessages(result string) []string {
	parts := strings.Split(result, resultSep)
	var out []string
	for _, p := range parts[1:] {
		if m, ok := strings.CutPrefix(p, messagePrefix); ok {
			out = append(out, m)
		}
	}
	return out
}

// resultSep joins a tool result's text items in callTool's answer; a
// control character no galley text item holds (the tools refuse NUL).
const resultSep = "\x00"

func callTool(ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return "", err
	}
	var text []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	if res.IsError {
		return "", errors.New(name + ": " + strings.Join(text, "; "))
	}
	return strings.Join(text, resultSep), nil
}
