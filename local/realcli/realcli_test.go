package realcli_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

const (
	testBranch = "kitchen/real-cli"
	// idleLimit is claude's MCP tool idle limit in these tests (ms), lowered
	// from its 300 s (CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT); the harness sends
	// progress every progressEvery.
	idleLimit     = 8000
	progressEvery = "2s"
	// claudeWatchdog is how often claude checks a call's idle time (30 s in
	// 2.1.332): an idle call is aborted at the first check past the limit.
	claudeWatchdog = 30 * time.Second
)

var workerBin string

func TestMain(m *testing.M) {
	// The agent runs under a uid of its own: the supervisor (this
	// galley-worker) must be executable by it.
	dir, err := os.MkdirTemp("", "galley-realcli-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "galley-worker")
	build := exec.Command("go", "build", "-o", workerBin, "github.com/galley-run/galley/cmd/galley-worker")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building galley-worker:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// clisBin is the folder with the real claude and codex, or the test skips
// (fails when GALLEY_REQUIRE_REAL_CLIS=1).
func clisBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GALLEY_AGENT_CLIS_BIN")
	if dir == "" {
		if os.Getenv("GALLEY_REQUIRE_REAL_CLIS") == "1" {
			t.Fatal("GALLEY_REQUIRE_REAL_CLIS=1 but GALLEY_AGENT_CLIS_BIN is unset: run scripts/agent-clis.sh")
		}
		t.Skip("GALLEY_AGENT_CLIS_BIN unset: the real CLIs are not installed (scripts/agent-clis.sh)")
	}
	for _, n := range []string{"claude", "codex"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Fatalf("no %s in GALLEY_AGENT_CLIS_BIN: %v", n, err)
		}
	}
	return dir
}

func random(t *testing.T, prefix string) string {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func bareRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bare := filepath.Join(root, "house.git")
	seed := filepath.Join(root, "seed")
	git(t, root, "init", "--quiet", "--bare", bare)
	git(t, root, "init", "--quiet", "-b", "main", seed)
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("house\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, seed, "add", "README.md")
	git(t, seed, "commit", "--quiet", "-m", "initial")
	git(t, seed, "push", "--quiet", bare, "main", "main:refs/heads/"+testBranch)
	return bare
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// family is what differs between the CLIs: the script in each one's tool
// names, and how its provider is reached.
type family struct {
	name  string
	steps func(shell string) []providerstandin.Step
}

// The script: find galley's tools through the CLI's tool search, post a
// status, ask (the reply comes after the CLI's idle limit), commit and
// push, end the turn without finish (galley's supervisor waits for a
// message, which resumes the session), then finish.
var families = []family{
	{"claude", func(shell string) []providerstandin.Step {
		return []providerstandin.Step{
			{Tool: "ToolSearch", Input: map[string]any{"query": "select:mcp__galley__post_status,mcp__galley__ask_coordinator,mcp__galley__finish"}},
			{Tool: "mcp__galley__post_status", Input: map[string]any{"body": "starting"}},
			{Tool: "mcp__galley__ask_coordinator", Input: map[string]any{"subject": "Which greeting?", "body": "hello or hi?"}},
			{Tool: "Bash", Input: map[string]any{"command": shell, "description": "commit and push the greeting"}},
			{Text: "Pushed; waiting for the coordinator."},
			{Tool: "mcp__galley__finish", Input: map[string]any{"outcome": "succeeded", "body": "greeting pushed"}},
			{Text: "Done."},
		}
	}},
	// codex 0.171 offers its tools in code mode: one freeform exec tool
	// whose JavaScript calls the nested tools (exec_command, galley's MCP
	// tools, deferred and found through ALL_TOOLS, its tool search). exec
	// yields to the model after 30 s by default; a call that waits for the
	// coordinator asks for more with the @exec pragma.
	{"codex", func(shell string) []providerstandin.Step {
		call := func(tool, args string) string {
			return "// @exec: {\"yield_time_ms\": 600000}\n" +
				"const r = await tools." + tool + "(" + args + ");\n" +
				"text(typeof r === \"string\" ? r : (r.content || []).map((c) => c.text).join(\"\\n\"));\n"
		}
		return []providerstandin.Step{
			{Tool: "exec", Code: "text(ALL_TOOLS.filter((t) => t.name.startsWith(\"mcp__galley__\")).map((t) => t.name).sort().join(\",\"));\n"},
			{Tool: "exec", Code: call("mcp__galley__post_status", `{body: "starting"}`)},
			{Tool: "exec", Code: call("mcp__galley__ask_coordinator", `{subject: "Which greeting?", body: "hello or hi?"}`)},
			{Tool: "exec", Code: "const r = await tools.exec_command({cmd: " + jsString(shell) + "});\ntext(JSON.stringify(r));\n"},
			{Text: "Pushed; waiting for the coordinator."},
			{Tool: "exec", Code: call("mcp__galley__finish", `{outcome: "succeeded", body: "greeting pushed"}`)},
			{Text: "Done."},
		}
	}},
}

// jsString quotes s as a JavaScript string.
var jsString = providerstandin.JSString

// TestRealCLIWorker runs each real CLI as a galley worker from starting to
// its outcome: ready on the CLI's own evidence, a status, a question whose
// reply comes after claude's (lowered) MCP idle limit and still reaches the
// agent as the call's result, a commit pushed to the worker's branch, a
// message that resumes the session, usage from the CLI's report, and the
// outcome the agent reported.
//
// Each CLI runs as npm installs it (node_modules/.bin, links into the
// packages) under both confinements the machine enforces: a uid of its
// own, and Landlock, whose domain must then hold what the links lead to.
func TestRealCLIWorker(t *testing.T) {
	bin := clisBin(t)
	for _, fam := range families {
		for _, confine := range []harness.Confinement{harness.ConfineUser, harness.ConfineLandlock} {
			t.Run(fam.name+"/"+string(confine), func(t *testing.T) {
				if ok, why := harness.CanSwitchUser(); confine == harness.ConfineUser && !ok {
					t.Skip(why)
				}
				t.Parallel()
				runWorker(t, bin, fam, confine)
			})
		}
	}
}

func runWorker(t *testing.T, bin string, fam family, confine harness.Confinement) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // XXX
	defer cancel()
	key := random(t, "sk-test-")
	shell := "printf 'hello\\n' > greeting.txt && git add greeting.txt && git -c user.name=agent -c user.email=agent@example.com commit -qm 'add greeting' && git push -q origin HEAD"
	prov := providerstandin.New(key, fam.steps(shell))
	t.Cleanup(prov.Close)
	// Each worker's agent has a uid of its own (the fake draws one, as the
	// service allocates one): the harness ends every process of that uid.
	handle := "w-" + fam.name + "-" + string(confine)
	token := handle + "." + random(t, "")
	f := fakeapi.New(workerapi.Self{Handle: handle, Run: "run-1", Task: "real-cli", Role: "commis",
		Brief: "Add a greeting file, ask which greeting, push, and finish.", Branch: testBranch,
		Agent: protocol.AgentSelection{Agent: fam.name}}, token)
	t.Cleanup(f.Close)

	bare := bareRepo(t)
	// The agent runs under a uid of its own, which must reach its
	// workspace: a folder open to others (t.TempDir's parent is not).
	root, err := os.MkdirTemp("", "galley-realcli-")
	if err == nil {
		err = os.Chmod(root, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	home := filepath.Join(root, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"GALLEY_WORKER_ENDPOINT=" + f.URL,
		"GALLEY_WORKER_TOKEN=" + token,
		"GALLEY_WORKER_HANDLE=" + handle,
		"GALLEY_WORKSPACE=" + filepath.Join(root, "ws"),
		"GALLEY_REPOSITORY=" + bare,
		"GALLEY_AGENT_BIN_DIR=" + bin,
		harness.EnvConfine + "=" + string(confine),
		"GALLEY_HEARTBEAT_INTERVAL=1h",
		"GALLEY_MCP_PROGRESS_INTERVAL=" + cmp.Or(os.Getenv("REALCLI_PROGRESS_INTERVAL"), progressEvery),
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		fmt.Sprintf("CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=%d", idleLimit),
		harness.EnvAnthropicBaseURL + "=" + prov.URL,
		harness.EnvOpenAIBaseURL + "=" + prov.URL + "/v1",
	}
	if fam.name == "claude" {
		env = append(env, "GALLEY_ANTHROPIC_API_KEY="+key)
	} else {
		env = append(env, "GALLEY_OPENAI_API_KEY="+key)
	}
	stderr := &syncBuffer{}
	cmd := exec.Command(workerBin)
	cmd.Env = env
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() || os.Getenv("GALLEY_TEST_LOGS") != "" {
			t.Logf("harness stderr:\n%s", stderr.String())
			for _, c := range prov.Calls() {
				t.Logf("provider call: api=%s model=%s step=%d stream=%v tools=%v results=%q", c.API, c.Model, c.Step, c.Stream, c.Tools, c.Results)
			}
			t.Logf("provider refusals: %v", prov.Refused())
		}
	})
	// A wait ends when the worker exits too.
	live, endLive := context.WithCancel(ctx)
	defer endLive()
	go func() { <-done; endLive() }()
	wait := func(what string, cond func(fakeapi.Snapshot) bool) fakeapi.Snapshot {
		t.Helper()
		s, err := f.Wait(live, cond)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		return s
	}

	s := wait("the question", func(s fakeapi.Snapshot) bool { return s.State == protocol.StateAwaitingReply })
	if s.Calls[0].Ready == nil {
		t.Fatalf("the first call was not ready: %+v", s.Calls[0])
	}
	posts := s.Posts()
	if len(posts) != 2 || posts[0].Body != "starting" || posts[1].Kind != protocol.MsgQuestion || posts[1].Subject != "Which greeting?" {
		t.Fatalf("posts = %+v", posts)
	}
	question := s.Calls[len(s.Calls)-1].PostID
	// While the agent waits for the reply, no process but the harness
	// holds the house's key (in its environment or command line), while
	// the agent's own processes hold the model proxy's token in its place.
	keyHolders, tokenHolders := holders(t, key), holders(t, "galley-model-")
	if len(keyHolders) != 1 || keyHolders[0] != cmd.Process.Pid {
		t.Errorf("processes holding the house key: %v, want only the harness (%d)", keyHolders, cmd.Process.Pid)
	}
	if len(tokenHolders) == 0 {
		t.Errorf("no process holds a model proxy token: the agent's environment was not searched")
	}
	// The coordinator takes longer than claude's idle limit to answer: the
	// wait itself is the scenario, not an assertion.
	time.Sleep(claudeWatchdog + 5*time.Second)
	f.Reply(question, "hello, please")

	wait("the end of turn 1", func(s fakeapi.Snapshot) bool {
		for _, p := range s.Posts() {
			if strings.Contains(p.Body, "ended turn 1 without calling finish") {
				return true
			}
		}
		return false
	})
	f.Message("looks good: finish now")
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the worker did not exit")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s = f.Snapshot()
	if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeSucceeded {
		t.Errorf("state %s/%s", s.State, s.Outcome)
	}
	if !strings.Contains(s.Calls[0].Ready.Evidence, fam.name) {
		t.Errorf("ready evidence %q is not the CLI's", s.Calls[0].Ready.Evidence)
	}
	// The reply reached the agent as the ask_coordinator call's own result:
	// the call outlived the idle limit (a late reply would read "Reply to
	// your question ... after your ask_coordinator call had ended").
	var results []string
	var prompts int
	for _, c := range prov.Calls() {
		if c.Step >= 0 {
			results = c.Results
			prompts++
		}
	}
	if fam.name == "claude" && !slices.Contains(results, "hello, please") {
		t.Errorf("the agent's tool results %q lack the reply as ask_coordinator's result", results)
	}
	if got := git(t, bare, "log", "-1", "--format=%s", testBranch); got != "add greeting" {
		t.Errorf("the branch's head is %q, want the agent's pushed commit", got)
	}
	var usage *workerapi.UsageRequest
	for _, c := range s.Calls {
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if usage == nil || usage.Report.Tokens == nil || usage.Report.Tokens.Output == nil || *usage.Report.Tokens.Output == 0 {
		t.Fatalf("usage = %+v", usage)
	}
	if fam.name == "codex" && usage.Report.Cost != nil {
		t.Errorf("codex with no model to price reported a cost: %+v", usage.Report.Cost)
	}
	if fam.name == "codex" && !slices.ContainsFunc(results, func(r string) bool { return strings.HasSuffix(r, "\nhello, please") }) {
		t.Errorf("codex's exec results %q lack the reply", results)
	}
	if len(prov.Refused()) != 0 || prov.SawWrongKey() {
		t.Errorf("the provider refused: %v", prov.Refused())
	}
	// The usage galley got is the model proxy's count of what the
	// provider answered: every call's fixed usage, not what the CLI said.
	calls := int64(len(prov.Calls()))
	u := providerstandin.MessagesUsage
	if fam.name == "codex" {
		u = providerstandin.ResponsesUsage
		if n := prov.WebSockets(); n != 0 {
			t.Errorf("codex tried the Responses WebSocket %d times: it must use HTTP", n)
		}
	}
	tok := usage.Report.Tokens
	if tok.Input == nil || *tok.Input != calls*u.Input || *tok.Output != calls*u.Output || tok.CacheRead == nil || *tok.CacheRead != calls*u.CacheRead ||
		(fam.name == "claude" && (tok.CacheWrite == nil || *tok.CacheWrite != calls*u.CacheWrite)) {
		t.Errorf("usage %s over %d calls of %+v each is not the provider's count", jsonOf(tok), calls, u)
	}
	t.Logf("%s: %d scripted model turns, usage %+v", fam.name, prompts, usage.Report)
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// holders are the processes of this machine whose environment or command
// line holds s.
func holders(t *testing.T, s string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		for _, f := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), f))
			if err == nil && strings.Contains(string(b), s) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}
