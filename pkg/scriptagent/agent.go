// Package scriptagent is galley's deterministic agent for tests and demos,
// run as its own process (galley-worker script-agent) by the harness's
// script driver. It is an MCP client of the harness's tool server, so it
// goes through exactly the tools a real agent uses.
//
// A brief whose first line is "#!galley-script" is a script: each following
// line is one directive (see Parse and docs/harness.md), executed in order.
// Any other brief makes the agent announce itself and idle until it is
// stopped; the harness reports ready and sends the heartbeats.
//
// On stdout the agent writes one JSON object a line: {"type":"started"}
// once it is connected and has found its tools (the harness's evidence for
// ready), then {"type":"directive","line":N,"op":...} before each
// directive, and {"type":"finished"}, {"type":"exit"}, {"type":"failed"},
// {"type":"stopped"} or {"type":"end"} at the end.
package scriptagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workspace"
)

// CodeStopped is the exit code of an agent stopped mid-script, as a shell
// reports a process ended by SIGTERM.
const CodeStopped = 128 + 15

// Config is what the scripted agent needs; the harness's script driver
// passes it in the environment (see ConfigFromEnv).
type Config struct {
	MCPURL    string
	MCPSecret string
	Brief     string
	Workspace string
	Stdout    io.Writer // the event stream; default os.Stdout
	// From is the line a resumed agent starts at: the directive it was
	// parked in (contract.EnvScriptResume); 0 for the first directive.
	From int
}

// ConfigFromEnv reads the variables the script driver sets.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	cfg := Config{
		MCPURL:    getenv(contract.EnvMCPURL),
		MCPSecret: getenv(contract.EnvMCPSecret),
		Brief:     getenv(contract.EnvBrief),
		Workspace: getenv(contract.EnvWorkspace),
	}
	if cfg.MCPURL == "" || cfg.MCPSecret == "" || cfg.Workspace == "" {
		return cfg, fmt.Errorf("scriptagent: %s, %s and %s are required", contract.EnvMCPURL, contract.EnvMCPSecret, contract.EnvWorkspace)
	}
	if s := getenv(contract.EnvScriptResume); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("scriptagent: %s must be a line number", contract.EnvScriptResume)
		}
		cfg.From = n
	}
	return cfg, nil
}

// Tools calls the harness's tools: the MCP session, or a fake in tests.
type Tools interface {
	// Call calls a tool and returns its text, or an error for a tool error.
	Call(ctx context.Context, name string, args map[string]any) (string, error)
}

// Run connects to the harness's MCP server and runs the brief. It returns
// the process's exit code: the code of an exit directive, 0 after done, an
// idle stop or the end of the script, 1 when it could not report a failure.
func Run(ctx context.Context, cfg Config) (int, error) {
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	tools, closeTools, err := connect(ctx, cfg.MCPURL, cfg.MCPSecret)
	if err != nil {
		return 1, err
	}
	defer closeTools()
	return ExecuteFrom(ctx, tools, cfg.Brief, cfg.Workspace, cfg.Stdout, workspace.CommitAndPush, cfg.From)
}

// CommitFunc commits and pushes one file: workspace.CommitAndPush. Its git
// inherits the agent's environment, so the push goes through the
// harness's push gate with the gate's credential, as any agent's does.
type CommitFunc func(ctx context.Context, dir, path, content, message string) error

// Execute runs a brief against tools, writing events to out. Run calls it
// once connected; tests call it with fake tools.
func Execute(ctx context.Context, tools Tools, brief, dir string, out io.Writer, commit CommitFunc) (int, error) {
	return ExecuteFrom(ctx, tools, brief, dir, out, commit, 0)
}

// ExecuteFrom is Execute for a resumed agent (docs/parking.md): it starts
// at the directive on line from, the one it was parked in, and runs none
// before it. A line past the script's last directive runs nothing more.
func ExecuteFrom(ctx context.Context, tools Tools, brief, dir string, out io.Writer, commit CommitFunc, from int) (int, error) {
	a := &agent{tools: tools, dir: dir, ev: &eventWriter{w: out}, commit: commit}
	if !IsScript(brief) {
		a.ev.emit(map[string]any{"type": harness.EventStarted, "mode": "idle", "pid": os.Getpid()})
		<-ctx.Done() // the harness sends heartbeats; the agent waits to be stopped
		return 0, nil
	}
	script, perr := Parse(brief)
	started := map[string]any{"type": harness.EventStarted, "mode": "script", "pid": os.Getpid(), "directives": len(script)}
	if from > 0 {
		started["from"] = from
	}
	a.ev.emit(started)
	if perr != nil {
		var le *LineError
		errors.As(perr, &le)
		return a.fail(ctx, le.Line, "malformed script directive", perr.Error())
	}
	for _, d := range script {
		if d.Line < from {
			continue
		}
		a.ev.emit(map[string]any{"type": harness.EventDirective, "line": d.Line, "op": d.Op})
		switch d.Op {
		case OpDone:
			if _, err := a.call(ctx, harness.ToolFinish, map[string]any{"outcome": d.Outcome, "body": d.Body}); err != nil {
				return a.failed(ctx, d, err)
			}
			a.ev.emit(map[string]any{"type": "finished", "outcome": d.Outcome})
			return 0, nil
		case OpExit:
			a.ev.emit(map[string]any{"type": "exit", "code": d.Code})
			return d.Code, nil
		}
		if err := a.do(ctx, d); err != nil {
			return a.failed(ctx, d, err)
		}
	}
	// A script that ends without done or exit reports nothing: the harness
	// reports the exit and galley settles the worker failed.
	a.ev.emit(map[string]any{"type": "end"})
	return 0, nil
}

type agent struct {
	tools  Tools
	dir    string
	ev     *eventWriter
	commit CommitFunc
}

func (a *agent) call(ctx context.Context, name string, args map[string]any) (string, error) {
	return a.tools.Call(ctx, name, args)
}

func (a *agent) status(ctx context.Context, body string) error {
	_, err := a.call(ctx, harness.ToolStatus, map[string]any{"body": body})
	return err
}

// do executes one directive other than done and exit.
func (a *agent) do(ctx context.Context, d Directive) error {
	switch d.Op {
	case OpStatus:
		return a.status(ctx, d.Text)
	case OpHeartbeat:
		_, err := a.call(ctx, harness.ToolHeartbeat, nil)
		return err
	case OpAsk:
		reply, err := a.call(ctx, harness.ToolAsk, map[string]any{"subject": d.Subject, "body": d.Body})
		if err != nil {
			return err
		}
		return a.status(ctx, "reply: "+reply)
	case OpEscalate:
		_, err := a.call(ctx, harness.ToolEscalate, map[string]any{"subject": d.Subject, "body": d.Body})
		return err
	case OpWaitMessage:
		msg, err := a.call(ctx, harness.ToolWaitMessage, nil)
		if err != nil {
			return err
		}
		return a.status(ctx, "message: "+msg)
	case OpSleep:
		t := time.NewTimer(d.Duration)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case OpCommit:
		return a.commit(ctx, a.dir, d.Path, d.Content, "galley script: write "+d.Path)
	case OpWrite:
		return writeFile(a.dir, d.Path, d.Content)
	case OpShow:
		return a.status(ctx, "show "+d.Path+": "+readShown(a.dir, d.Path))
	case OpUsage:
		args := map[string]any{"input": d.Input, "output": d.Output}
		if d.Cost != nil {
			args["cost"] = *d.Cost
		}
		_, err := a.call(ctx, harness.ToolUsage, args)
		return err
	}
	return fmt.Errorf("unknown directive %q", d.Op)
}

func (a *agent) failed(ctx context.Context, d Directive, err error) (int, error) {
	return a.fail(ctx, d.Line, "script directive failed", fmt.Sprintf("line %d (%s): %v", d.Line, d.Op, err))
}

// fail reports a script that cannot go on: an escalation naming the line,
// then done failed. When even that cannot be reported (the harness is
// stopping, or galley is unreachable) it exits 1 and the harness reports
// the exit.
func (a *agent) fail(ctx context.Context, line int, subject, body string) (int, error) {
	if ctx.Err() != nil {
		// Stopped (the worker was settled, or the harness stops): nothing
		// to report, and the harness knows.
		a.ev.emit(map[string]any{"type": "stopped", "line": line})
		return CodeStopped, nil
	}
	a.ev.emit(map[string]any{"type": "failed", "line": line, "error": body})
	if _, err := a.call(ctx, harness.ToolEscalate, map[string]any{"subject": subject, "body": body}); err != nil {
		return 1, err
	}
	done := fmt.Sprintf("%s at line %d", subject, line)
	if _, err := a.call(ctx, harness.ToolFinish, map[string]any{"outcome": protocol.OutcomeFailed, "body": done}); err != nil {
		return 1, err
	}
	a.ev.emit(map[string]any{"type": "finished", "outcome": protocol.OutcomeFailed})
	return 0, nil
}

// eventWriter writes the JSON-lines event stream.
type eventWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *eventWriter) emit(v map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, _ := json.Marshal(v)
	_, _ = e.w.Write(append(b, '\n'))
}

// session is Tools over an MCP client session.
type session struct{ cs *mcp.ClientSession }

func (s session) Call(ctx context.Context, name string, args map[string]any) (string, error) {
	if args == nil {
		args = map[string]any{}
	}
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
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
		return "", fmt.Errorf("%s: %s", name, strings.Join(text, "; "))
	}
	return strings.Join(text, "\n"), nil
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

// connect opens an MCP session and checks that every tool the scripts use
// is there, so that "started" means the agent can work.
func connect(ctx context.Context, url, secret string) (Tools, func(), error) {
	hc := &http.Client{Transport: bearer{secret: secret, next: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "galley-script-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("scriptagent: connecting to the harness: %w", err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		cs.Close()
		return nil, nil, fmt.Errorf("scriptagent: listing tools: %w", err)
	}
	have := map[string]bool{}
	for _, t := range res.Tools {
		have[t.Name] = true
	}
	for _, name := range []string{harness.ToolAsk, harness.ToolStatus, harness.ToolEscalate, harness.ToolHeartbeat,
		harness.ToolWaitMessage, harness.ToolFinish, harness.ToolUsage} {
		if !have[name] {
			cs.Close()
			return nil, nil, fmt.Errorf("scriptagent: the harness lacks tool %s", name)
		}
	}
	return session{cs}, func() { cs.Close() }, nil
}

// writeFile writes content to path in the workspace dir, its folders made,
// through an os.Root (no link leads it out of the workspace), and commits
// nothing.
func writeFile(dir, path, content string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	if d := filepath.Dir(path); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return root.WriteFile(path, []byte(content), 0o644)
}

// maxShown bounds what show reports of a file.
const maxShown = 512

// readShown is what show reports of path in the workspace dir: its
// content (its first maxShown bytes), or "missing".
func readShown(dir, path string) string {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "missing"
	}
	defer root.Close()
	f, err := root.Open(path)
	if err != nil {
		return "missing"
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxShown))
	return string(b)
}
