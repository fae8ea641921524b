// Package standin is the shared body of the stand-in `claude` and `codex`
// programs (local/standin-cli/claude, local/standin-cli/codex): test
// doubles of the real CLIs that accept the flags galley's drivers pass,
// write the real CLIs' JSON-lines formats (modelled on the recordings in
// pkg/agents/testdata), connect to the harness's MCP server over
// streamable HTTP with the configured bearer header, and do what a script
// in the prompt says instead of asking a model.
//
// A prompt whose first line is "#!standin" is a script. Lines "---" split
// it into turns: the first turn runs the first part; each resume of the
// session runs the next (the script and the running usage are kept per
// session under $HOME/.galley-standin). Directives, one a line:
//
//	tool <name> <json arguments>   call a galley tool ($LAST, $PROMPT, $PID substituted)
//	tool-patient <name> <json>     the same, called again while galley answers "post again"
//	                               (a full budget of unread rows), for up to a minute
//	text <words>                   an assistant message
//	commit <path> <text>           write, commit and push the file (pkg/workspace)
//	usage <in> <out> <cacheRead> <cacheWrite> [<costUSD>]   this turn's usage
//	crash                          exit 3 mid-turn, without the final event
//	garbage                        write lines that are not JSON and exit 0
//	hang                           post "hanging pid <pid> child <pid>", start a
//	                               child process, ignore SIGTERM and block
//	exit <code>                    exit with the code, without the final event
//	env-report                     post_status with a JSON object naming every
//	                               variable of this process's environment, each
//	                               with the first 16 hex digits of the SHA-256
//	                               of its value (tests compare hashes; no value
//	                               leaves the process)
//	attack <name> <json>           try one attack (see Attack; AttackBrief scripts them
//	                               all) and post "attack <name>: blocked (<why>)" or
//	                               "attack <name>: SUCCEEDED (<what>)"
//	git <args>                     run plain git in the worktree ($LAST is its output)
//	flood-log <bytes>              write that many bytes to stderr, in lines (a log flood)
//	flood-push <n> <bytes>         n force-pushes of the branch, each one commit of that
//	                               many fresh random bytes (a push flood); $LAST says
//	                               "pushes accepted <a>, refused <r>" and, when a refusal
//	                               named the push budget, "(push budget)"
//
// Like the real CLIs (2.1.332, 0.171.0), and so as strict: claude finds
// galley's deferred tools through ToolSearch before its first galley call of
// a turn (shown in its stream), and aborts a galley call that sends no
// response or progress for its idle limit (CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT,
// ms, default 300000, 0 disables; checked every 30 s, or every limit when
// shorter), with the real error text; it asks for progress with a token on
// every call. claude's result marks a model it does not know with costBasis
// "unknown" and still states a guessed total_cost_usd; codex reports
// command executions with item.started before item.completed.
//
// $LAST is the text of the last tool result, $PROMPT this turn's prompt,
// $PID this process's id; each is JSON-escaped where it stands. A tool
// error does not stop the script (as a model would read it and go on).
package standin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/workspace"
)

// Shebang starts a script prompt.
const Shebang = "#!standin"

// Options are what a stand-in's flags said.
type Options struct {
	Family   string // "claude" or "codex"
	Model    string
	Effort   string
	Resume   string // session id to resume, or ""
	MCPURL   string // galley's MCP server
	MCPAuth  string // the Authorization header value
	Required bool   // codex: fail to start without the server
	// ModelBaseURL is codex's model provider's base URL (the `model`
	// directive); claude reads ANTHROPIC_BASE_URL.
	ModelBaseURL string
}

// Usage is one turn's (or a session's running) counts.
type Usage struct {
	Input, Output, CacheRead, CacheWrite int64
	CostUSD                              float64
}

type state struct {
	Session string   `json:"session"`
	Turns   []string `json:"turns"` // the script's parts
	Next    int      `json:"next"`  // the part the next turn runs
	Total   Usage    `json:"total"`
}

// Run runs one turn and returns the exit code.
func Run(opts Options, prompt string, stdout, stderr io.Writer) int {
	ctx := context.Background()
	r := &runner{opts: opts, out: stdout, errw: stderr, prompt: prompt}
	return r.run(ctx)
}

type runner struct {
	opts   Options
	out    io.Writer
	errw   io.Writer
	prompt string
	st     state
	tools  *mcp.ClientSession
	last   string
	// lastFailed says the last tool call failed on the way (no answer
	// from galley's MCP server), not that the tool refused.
	lastFailed bool
	turn       Usage
	seq        int

	searched bool // claude: galley's tools were found through ToolSearch this turn

	actMu    sync.Mutex
	activity time.Time // the running call's last response or progress
}

func (r *runner) emit(v map[string]any) {
	b, _ := json.Marshal(v)
	_, _ = r.out.Write(append(b, '\n'))
}

func (r *runner) fail(format string, args ...any) int {
	fmt.Fprintf(r.errw, format+"\n", args...)
	return 1
}

func stateDir(family string) string {
	home, _ := os.UserHomeDir()
	if family == "codex" && os.Getenv("CODEX_HOME") != "" {
		return filepath.Join(os.Getenv("CODEX_HOME"), "galley-standin")
	}
	return filepath.Join(home, ".galley-standin", family)
}

func (r *runner) loadOrStart() error {
	dir := stateDir(r.opts.Family)
	if r.opts.Resume != "" {
		b, err := os.ReadFile(filepath.Join(dir, r.opts.Resume+".json"))
		if err != nil {
			return fmt.Errorf("No conversation found with session ID: %s", r.opts.Resume)
		}
		return json.Unmarshal(b, &r.st)
	}
	r.st = state{Session: newID()}
	first, rest, _ := strings.Cut(r.prompt, "\n")
	if strings.TrimSpace(first) == Shebang {
		r.st.Turns = strings.Split(rest, "\n---\n")
	}
	return nil
}

func (r *runner) save() {
	dir := stateDir(r.opts.Family)
	_ = os.MkdirAll(dir, 0o700)
	b, _ := json.Marshal(r.st)
	_ = os.WriteFile(filepath.Join(dir, r.st.Session+".json"), b, 0o600)
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func (r *runner) run(ctx context.Context) int {
	if err := r.loadOrStart(); err != nil {
		return r.fail("%v", err)
	}
	mcpStatus := "connected"
	if err := r.connect(ctx); err != nil {
		if r.opts.Required {
			return r.fail("Error: required MCP servers failed to initialize: galley: %v", err)
		}
		mcpStatus = "failed"
	}
	if r.tools != nil {
		defer r.tools.Close()
	}
	r.init(mcpStatus)
	part := ""
	if r.st.Next < len(r.st.Turns) {
		part = r.st.Turns[r.st.Next]
	}
	r.st.Next++
	r.save()
	r.turn = Usage{Input: 1000, Output: 100, CacheRead: 500, CacheWrite: 200, CostUSD: 0.0123}
	if part == "" {
		r.text("Nothing scripted for this turn.")
	}
	for _, raw := range strings.Split(part, "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if code, stop := r.do(ctx, line); stop {
			return code
		}
	}
	r.st.Total = add(r.st.Total, r.turn)
	r.save()
	r.end()
	return 0
}

func add(a, b Usage) Usage {
	return Usage{a.Input + b.Input, a.Output + b.Output, a.CacheRead + b.CacheRead, a.CacheWrite + b.CacheWrite, a.CostUSD + b.CostUSD}
}

// do runs one directive; stop reports that the process ends with code.
func (r *runner) do(ctx context.Context, line string) (code int, stop bool) {
	op, rest, _ := strings.Cut(line, " ")
	switch op {
	case "tool":
		name, args, _ := strings.Cut(rest, " ")
		r.callTool(ctx, name, r.subst(args))
	case "tool-patient":
		name, args, _ := strings.Cut(rest, " ")
		r.callPatiently(ctx, name, r.subst(args))
	case "text":
		r.text(rest)
	case "model":
		r.modelCall(ctx, r.subst(rest))
	case "commit":
		path, text, _ := strings.Cut(rest, " ")
		dir, _ := os.Getwd()
		r.shell("git commit and push " + path)
		if err := workspace.CommitAndPush(ctx, dir, path, text, "standin: write "+path); err != nil {
			r.last = "commit failed: " + err.Error()
		} else {
			r.last = "committed " + path
		}
	case "usage":
		f := strings.Fields(rest)
		n := make([]int64, 4)
		for i := 0; i < 4 && i < len(f); i++ {
			n[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		r.turn = Usage{Input: n[0], Output: n[1], CacheRead: n[2], CacheWrite: n[3]}
		if len(f) > 4 {
			r.turn.CostUSD, _ = strconv.ParseFloat(f[4], 64)
		}
	case "crash":
		r.text("about to crash")
		fmt.Fprintln(r.errw, "standin: simulated crash")
		return 3, true
	case "garbage":
		fmt.Fprintln(r.out, "this is not JSON")
		fmt.Fprintln(r.out, "{\"type\": broken")
		return 0, true
	case "hang":
		child := exec.Command("sleep", "3600")
		_ = child.Start()
		cpid := 0
		if child.Process != nil {
			cpid = child.Process.Pid
		}
		r.callTool(ctx, "post_status", fmt.Sprintf(`{"body":"hanging pid %d child %d"}`, os.Getpid(), cpid))
		signal.Ignore(syscall.SIGTERM)
		select {}
	case "exit":
		c, _ := strconv.Atoi(rest)
		return c, true
	case "attack":
		name, args, _ := strings.Cut(rest, " ")
		var a Attack
		verdict := ""
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			verdict = "blocked (the directive's JSON is malformed: " + err.Error() + ")"
		} else if ok, detail := r.attack(ctx, a); ok {
			verdict = "SUCCEEDED (" + detail + ")"
		} else {
			verdict = "blocked (" + detail + ")"
		}
		b, _ := json.Marshal(map[string]any{"body": "attack " + name + ": " + verdict})
		// A verdict must not be lost to the worker's budget of unread
		// status rows: wait for the coordinator to read, as a model would.
		r.callPatiently(ctx, "post_status", string(b))
	case "git":
		// Plain git, as a model runs it: hooks, fsmonitor and credential
		// helpers of the worktree apply.
		out, err := exec.CommandContext(ctx, "git", strings.Fields(rest)...).CombinedOutput()
		r.last = strings.TrimSpace(string(out))
		if err != nil {
			r.last = "git failed: " + err.Error() + ": " + r.last
		}
	case "flood-log":
		n, _ := strconv.Atoi(rest)
		line := strings.Repeat("x", 1023) + "\n"
		for left := n; left > 0; left -= len(line) {
			_, _ = io.WriteString(r.errw, line[:min(left, len(line))])
		}
		r.last = fmt.Sprintf("wrote %d bytes to stderr", n)
	case "flood-push":
		var n, size int
		_, _ = fmt.Sscan(rest, &n, &size)
		r.last = floodPush(ctx, n, size)
	case "env-report":
		b, _ := json.Marshal(map[string]any{"body": EnvReport(os.Environ())})
		r.callTool(ctx, "post_status", string(b))
	default:
		fmt.Fprintf(r.errw, "standin: unknown directive %q\n", op)
		return 2, true
	}
	return 0, false
}

// EnvReport maps each variable of environ to the first 16 hex digits of
// the SHA-256 of its value, as a JSON object.
func EnvReport(environ []string) string {
	m := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = HashValue(v)
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// HashValue is how EnvReport shows a value.
func HashValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:])[:16]
}

// subst replaces $LAST, $PROMPT and $PID inside a JSON text, escaped.
func (r *runner) subst(s string) string {
	esc := func(v string) string {
		b, _ := json.Marshal(v)
		return string(b[1 : len(b)-1])
	}
	s = strings.ReplaceAll(s, "$LAST", esc(r.last))
	s = strings.ReplaceAll(s, "$PROMPT", esc(strings.TrimSpace(r.prompt)))
	return strings.ReplaceAll(s, "$PID", strconv.Itoa(os.Getpid()))
}

type bearer struct {
	auth string
	next http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if b.auth != "" {
		req.Header.Set("Authorization", b.auth)
	}
	return b.next.RoundTrip(req)
}

func (r *runner) connect(ctx context.Context) error {
	if r.opts.MCPURL == "" {
		return errors.New("no MCP server configured")
	}
	hc := &http.Client{Transport: bearer{auth: r.opts.MCPAuth, next: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "standin-" + r.opts.Family, Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { r.touch() },
	})
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: r.opts.MCPURL, HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return err
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		cs.Close()
		return err
	}
	r.tools = cs
	return nil
}

func (r *runner) touch() {
	r.actMu.Lock()
	r.activity = time.Now()
	r.actMu.Unlock()
}

func (r *runner) idleFor() time.Duration {
	r.actMu.Lock()
	defer r.actMu.Unlock()
	return time.Since(r.activity)
}

// idleLimit is claude's MCP tool idle limit; 0 means none (codex has none).
func (r *runner) idleLimit() time.Duration {
	if r.opts.Family != "claude" {
		return 0
	}
	ms := int64(300000)
	if v := os.Getenv("CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			ms = n
		}
	}
	return time.Duration(ms) * time.Millisecond
}

// search finds galley's deferred tools as claude must before calling one.
func (r *runner) search() {
	if r.opts.Family != "claude" || r.searched {
		return
	}
	r.searched = true
	r.seq++
	id := fmt.Sprintf("toolu_search_%d", r.seq)
	q := "select:mcp__galley__ask_coordinator,mcp__galley__post_status,mcp__galley__finish"
	r.claudeMessage("assistant", []map[string]any{{"type": "tool_use", "id": id, "name": "ToolSearch", "input": map[string]any{"query": q}}})
	r.claudeMessage("user", []map[string]any{{"tool_use_id": id, "type": "tool_result",
		"content": []map[string]any{{"type": "tool_reference", "tool_name": "mcp__galley__ask_coordinator"}}}})
}

// callPatiently calls a tool again while galley answers "post again"
// (the worker's budget of unread rows is full until the coordinator
// reads) or the call itself failed (no answer from the harness), every
// 250 ms for up to a minute, as a model would.
func (r *runner) callPatiently(ctx context.Context, name, args string) {
	r.callWhile(ctx, name, args, true)
}

// callWhile is callPatiently, again on a failed call only if
// againOnFailure. A failed call is written to stderr, which the harness
// logs, so that a lost post leaves a trace.
func (r *runner) callWhile(ctx context.Context, name, args string, againOnFailure bool) {
	for range 240 {
		r.callTool(ctx, name, args)
		if r.lastFailed {
			fmt.Fprintf(r.errw, "standin: %s failed: %s\n", name, r.last)
		}
		again := strings.Contains(r.last, "post again") || (againOnFailure && r.lastFailed)
		if !again || ctx.Err() != nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *runner) callTool(ctx context.Context, name, args string) {
	var in map[string]any
	if err := json.Unmarshal([]byte(args), &in); err != nil {
		in = map[string]any{}
	}
	r.search()
	r.seq++
	id := fmt.Sprintf("call_%d", r.seq)
	r.toolStarted(id, name, in)
	var texts []string
	isErr := false
	r.lastFailed = false
	if r.tools == nil {
		texts, isErr = []string{"MCP server galley is not connected"}, true
	} else if res, err := r.call(ctx, name, in); err != nil {
		texts, isErr = []string{err.Error()}, true
		r.lastFailed = true
	} else {
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, t.Text)
			}
		}
		isErr = res.IsError
	}
	r.last = strings.Join(texts, "\n")
	r.toolDone(id, name, in, texts, isErr)
}

// call makes one tool call with a progress token and, for claude, aborts
// it once it has sent no response or progress for the idle limit.
func (r *runner) call(ctx context.Context, name string, in map[string]any) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.touch()
	if limit := r.idleLimit(); limit > 0 {
		tick := min(30*time.Second, limit)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					if idle := r.idleFor(); idle > limit {
						cancel(fmt.Errorf(`MCP server "galley" tool %q sent no response or progress for %ds; aborting. If this server is configured in your MCP settings, set a per-server "timeout" (ms) to allow longer silent runs for just this server; otherwise set CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT (ms) globally (0 disables).`,
							name, int(idle/time.Second)))
						return
					}
				}
			}
		}()
	}
	p := &mcp.CallToolParams{Name: name, Arguments: in}
	r.seq++
	p.SetProgressToken(fmt.Sprintf("standin-%d", r.seq))
	res, err := r.tools.CallTool(ctx, p)
	if err != nil && context.Cause(ctx) != nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return res, err
}

// floodPush force-pushes the worktree's branch n times, each time one
// commit of size fresh random bytes (so no push shares objects with
// another), and says how many pushes the remote accepted and refused.
func floodPush(ctx context.Context, n, size int) string {
	accepted, refused, budget := 0, 0, false
	blob := make([]byte, size)
	git := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, "git", args...).CombinedOutput()
	}
	for i := range n {
		_, _ = rand.Read(blob)
		if err := os.WriteFile("flood.bin", blob, 0o644); err != nil {
			return "flood failed: " + err.Error()
		}
		commit := []string{"commit", "--quiet", "-m", "flood"}
		if i > 0 {
			commit = append(commit, "--amend")
		}
		if out, err := git("add", "flood.bin"); err != nil {
			return "flood failed: git add: " + string(out)
		}
		if out, err := git(commit...); err != nil {
			return "flood failed: git commit: " + string(out)
		}
		out, err := git("push", "--force", "origin", "HEAD")
		if err != nil {
			refused++
			budget = budget || strings.Contains(string(out), "push budget")
		} else {
			accepted++
		}
	}
	s := fmt.Sprintf("pushes accepted %d, refused %d", accepted, refused)
	if budget {
		s += " (push budget)"
	}
	return s
}
