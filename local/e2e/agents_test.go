package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/prices"
	"github.com/galley-run/galley/pkg/protocol"
)

var (
	standinOnce sync.Once
	standinDir  string
	standinErr  error
)

// standins builds the stand-in claude and codex into a folder of their own.
func standins(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "galley-standin-bin")
		if err != nil {
			standinErr = err
			return
		}
		for _, name := range []string{"claude", "codex"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "github.com/galley-run/galley/local/standin-cli/"+name)
			if out, err := cmd.CombinedOutput(); err != nil {
				standinErr = fmt.Errorf("build %s: %v: %s", name, err, out)
				return
			}
		}
		standinDir = dir
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinDir
}

// agentServer starts galley serve declaring the CLI families, with a home
// of its own and, when withCLIs, the stand-in CLIs first on PATH (the
// workers inherit both).
func agentServer(t *testing.T, withCLIs bool, flags ...string) *server {
	t.Helper()
	// claude and codex workers refuse to start without their provider's
	// key (random: nothing checks it).
	env := serveEnv{"HOME": t.TempDir(), "ANTHROPIC_API_KEY": randomHex(t), "CODEX_API_KEY": randomHex(t)}
	// A confined agent runs the binaries under a uid of its own (as root)
	// or inside Landlock: let other users run them.
	openForAgents(t, "", false)
	if withCLIs {
		env = withStandinCLIs(t, env)
	}
	s := startServerEnv(t, env, t.TempDir(), append([]string{"--families", "claude,codex"}, flags...)...)
	t.Cleanup(func() { dumpWorkerLogs(t, s) })
	return s
}

// dumpWorkerLogs shows the workers' harness logs of a failed test.
func dumpWorkerLogs(t *testing.T, s *server) {
	if !t.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(s.Data, "*", "*", "harness.log"))
	more, _ := filepath.Glob(filepath.Join(s.Data, "*", "harness.log"))
	for _, l := range append(logs, more...) {
		b, _ := os.ReadFile(l)
		if len(b) > 20000 {
			b = b[len(b)-20000:]
		}
		t.Logf("%s:\n%s", l, b)
	}
}

type mailRow = protocol.MailMessage

// agentLaunch launches a worker with an agent selection and returns its
// handle, or the answer when the launch was not applied.
func agentLaunch(t *testing.T, s *server, run, key, brief, branch string, sel map[string]string) (string, string) {
	t.Helper()
	b, _ := json.Marshal(brief)
	a, _ := json.Marshal(sel)
	eff := fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":%s,"branch":%q,"agent":%s}`, b, branch, a)
	st, ans := s.kitchn(t, contract.RouteEffects, effectBody(run, key, eff), "Idempotency-Key", key)
	if st != 200 {
		t.Fatalf("launch: %d %s", st, ans)
	}
	var out struct {
		Status  string
		Receipt struct {
			Created []struct{ Kind, Handle string }
		}
	}
	_ = json.Unmarshal(ans, &out)
	if out.Status != "applied" {
		return "", string(ans)
	}
	for _, c := range out.Receipt.Created {
		if c.Kind == "worker" {
			return c.Handle, string(ans)
		}
	}
	t.Fatalf("launch created no worker: %s", ans)
	return "", ""
}

func workerEffect(t *testing.T, s *server, run, key, eff string) {
	t.Helper()
	st, ans := s.kitchn(t, contract.RouteEffects, effectBody(run, key, eff), "Idempotency-Key", key)
	if st != 200 || !strings.Contains(string(ans), `"applied"`) {
		t.Fatalf("effect %s: %d %s", eff, st, ans)
	}
}

func workerRes(handle string) string {
	return fmt.Sprintf(`{"kind":"worker","backend":"galley","handle":%q}`, handle)
}

// mailbox reads a run's mailbox as one coordinator, in order.
type mailbox struct {
	s       *server
	run     string
	pending []mailRow // read and acknowledged, not yet looked at
}

// next returns the first row from now on that match accepts, acknowledging
// every batch it reads; other rows are skipped. It fails the test after a
// generous deadline.
func (m *mailbox) next(t *testing.T, what string, match func(mailRow) bool) mailRow {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var passed []string // what was read meanwhile, for the failure's message
	for time.Now().Before(deadline) {
		for len(m.pending) > 0 {
			r := m.pending[0]
			m.pending = m.pending[1:]
			if match(r) {
				return r
			}
			passed = append(passed, fmt.Sprintf("%s %.60q", r.Kind, r.Body))
			if r.Kind == protocol.MsgWorkerDone && !strings.Contains(what, "worker-done") {
				t.Fatalf("waiting for %s, the worker ended: %+v", what, r)
			}
		}
		_, ans := m.s.kitchn(t, contract.RouteAwait, fmt.Sprintf(`{"run":%q,"coordinator":"c1","waitMs":10000}`, m.run))
		var a protocol.MailboxAnswer
		if err := json.Unmarshal(ans, &a); err != nil {
			t.Fatalf("await: %v: %s", err, ans)
		}
		if a.Delivery == nil {
			continue
		}
		m.s.kitchn(t, contract.RouteAcknowledge, fmt.Sprintf(`{"run":%q,"coordinator":"c1","delivery":%q}`, m.run, a.Delivery.ID))
		m.pending = append(m.pending, a.Delivery.Messages...)
	}
	t.Fatalf("no %s in the mailbox within 60s; passed over meanwhile: %v", what, passed)
	return mailRow{}
}

func kindBody(kind, prefix string) func(mailRow) bool {
	return func(r mailRow) bool { return r.Kind == kind && strings.HasPrefix(r.Body, prefix) }
}

func observe(t *testing.T, s *server, handle string) (state, outcome string) {
	t.Helper()
	_, ans := s.kitchn(t, contract.RouteObserve, `{"worker":`+workerRes(handle)+`}`)
	var o struct{ State, Outcome string }
	_ = json.Unmarshal(ans, &o)
	return o.State, o.Outcome
}

func usageOf(t *testing.T, s *server, handle string) (string, protocol.UsageReport) {
	t.Helper()
	_, ans := s.kitchn(t, contract.RouteUsage, `{"worker":`+workerRes(handle)+`}`)
	var u struct {
		Status string
		Report protocol.UsageReport
	}
	if err := json.Unmarshal(ans, &u); err != nil {
		t.Fatalf("usage: %v: %s", err, ans)
	}
	return u.Status, u.Report
}

// TestAgentCLIs runs each family's stand-in CLI through its real driver:
// ready, a question and its reply, a message while working and one after
// the turn ended (a resumed session), a pushed commit, a model call in each
// turn through the harness's model proxy to the provider galley serve's
// --anthropic-base-url and --openai-base-url name, the usage galley counted
// there (never what the CLI says), and the outcome it reported.
func TestAgentCLIs(t *testing.T) {
	// Two model calls, each of the provider stand-in's fixed usage, priced
	// at the launch's model (pkg/prices).
	priced := func(model string, u providerstandin.Usage, calls int64) *protocol.Cost {
		p, ok := prices.Lookup(prices.All(), model)
		if !ok {
			t.Fatalf("no price for %s", model)
		}
		nano, ok := p.RequestNanoUSD(prices.Tokens{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite})
		if !ok {
			t.Fatalf("%s not priced", model)
		}
		return &protocol.Cost{Amount: (calls*nano + 500) / 1000, Basis: protocol.BasisComputed}
	}
	m, r := providerstandin.MessagesUsage, providerstandin.ResponsesUsage
	cases := []struct {
		family, model string
		want          protocol.UsageReport
	}{
		{"claude", "claude-sonnet-4-5", protocol.UsageReport{Agent: "claude", Model: "claude-sonnet-4-5",
			Tokens: tokens(2*m.Input, 2*m.Output, 2*m.CacheRead, 2*m.CacheWrite), Cost: priced("claude-sonnet-4-5", m, 2)}},
		// OpenAI states no cache writes.
		{"codex", "gpt-5.4", protocol.UsageReport{Agent: "codex", Model: "gpt-5.4",
			Tokens: &protocol.Tokens{Input: ptr(2 * r.Input), Output: ptr(2 * r.Output), CacheRead: ptr(2 * r.CacheRead)},
			Cost:   priced("gpt-5.4", r, 2)}},
	}
	key := "sk-ant-test-" + randomHex(t)
	prov := providerstandin.New(key, nil)
	t.Cleanup(prov.Close)
	env := withStandinCLIs(t, serveEnv{"HOME": t.TempDir(), "ANTHROPIC_API_KEY": key, "CODEX_API_KEY": key})
	openForAgents(t, "", false)
	s := startServerEnv(t, env, t.TempDir(), "--families", "claude,codex",
		"--anthropic-base-url", prov.URL, "--openai-base-url", prov.URL+"/v1")
	t.Cleanup(func() { dumpWorkerLogs(t, s) })
	for _, tc := range cases {
		t.Run(tc.family, func(t *testing.T) {
			run, branch := "run-"+tc.family, "agents/"+tc.family
			brief := strings.Join([]string{
				"#!standin",
				"model what colour?",
				`tool ask_coordinator {"subject":"colour","body":"red or blue?"}`,
				`tool post_status {"body":"reply: $LAST"}`,
				"commit agent.txt written by " + tc.family,
				"text first turn done",
				"---",
				"model $PROMPT",
				`tool post_status {"body":"turn 2: $LAST; prompt: $PROMPT"}`,
				`tool finish {"outcome":"succeeded","body":"all done"}`,
			}, "\n")
			w, ans := agentLaunch(t, s, run, "k-"+tc.family, brief, branch, map[string]string{"agent": tc.family, "model": tc.model})
			if w == "" {
				t.Fatalf("launch not applied: %s", ans)
			}
			if st, _ := observe(t, s, w); st != protocol.StateStarting && st != protocol.StateReady && st != protocol.StateAwaitingReply {
				t.Fatalf("state right after launch: %s", st)
			}
			mb := &mailbox{s: s, run: run}
			q := mb.next(t, "question", func(r mailRow) bool { return r.Kind == protocol.MsgQuestion })
			if q.Body != "red or blue?" || q.Subject != "colour" {
				t.Fatalf("question: %+v", q)
			}
			if st, _ := observe(t, s, w); st != protocol.StateAwaitingReply {
				t.Fatalf("state while the question waits: %s", st)
			}
			// A message while the agent works rides on its next tool result.
			workerEffect(t, s, run, "k-msg1-"+tc.family, fmt.Sprintf(`{"type":"message-worker","worker":%s,"body":"hurry up"}`, workerRes(w)))
			workerEffect(t, s, run, "k-reply-"+tc.family, fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"blue"}`, workerRes(w), q.ID))
			r := mb.next(t, "reply status", kindBody(protocol.MsgStatus, "reply: "))
			if r.Body != "reply: blue\nMessage from the coordinator: hurry up" {
				t.Fatalf("the agent saw %q", r.Body)
			}
			mb.next(t, "turn-end status", kindBody(protocol.MsgStatus, tc.family+" ended turn 1 without calling finish"))
			if st, _ := observe(t, s, w); st != protocol.StateReady {
				t.Fatalf("state between turns: %s", st)
			}
			got, err := exec.Command("git", "--git-dir", filepath.Join(s.Data, "repository.git"), "show", branch+":agent.txt").CombinedOutput()
			if err != nil || string(got) != "written by "+tc.family {
				t.Fatalf("pushed file on %s: %q %v", branch, got, err)
			}
			// A message after the turn ended resumes the session.
			workerEffect(t, s, run, "k-msg2-"+tc.family, fmt.Sprintf(`{"type":"message-worker","worker":%s,"body":"please finish"}`, workerRes(w)))
			mb.next(t, "second turn", kindBody(protocol.MsgStatus, "turn 2: model answered; prompt: please finish"))
			done := mb.next(t, "worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
			if done.Outcome != protocol.OutcomeSucceeded || done.Body != "all done" {
				t.Fatalf("worker-done: %+v", done)
			}
			if st, out := observe(t, s, w); st != protocol.StateSettled || out != protocol.OutcomeSucceeded {
				t.Fatalf("settled as %s %s", st, out)
			}
			tc.want.Source = w
			want, _ := json.Marshal(tc.want)
			var last []byte
			for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				status, rep := usageOf(t, s, w)
				last, _ = json.Marshal(rep)
				if status == "reported" && string(last) == string(want) {
					return
				}
			}
			t.Fatalf("usage:\n got %s\nwant %s", last, want)
		})
	}
}

func ptr(n int64) *int64 { return &n }

func tokens(in, out, cr, cw int64) *protocol.Tokens {
	return &protocol.Tokens{Input: &in, Output: &out, CacheRead: &cr, CacheWrite: &cw}
}

// TestAgentCLIFailures covers an agent that cannot run or ends badly: each
// settles failed with a body that says why.
func TestAgentCLIFailures(t *testing.T) {
	s := agentServer(t, true)
	cases := []struct {
		name, family, brief, want string
	}{
		{"crash mid-turn", "claude", "#!standin\ntool post_status {\"body\":\"working\"}\ncrash", "code 3"},
		{"crash mid-turn", "codex", "#!standin\ntool post_status {\"body\":\"working\"}\ncrash", "code 3"},
		{"malformed output", "claude", "#!standin\ngarbage", "code 1"},
		{"malformed output", "codex", "#!standin\ngarbage", "code 1"},
		{"exit without finish", "codex", "#!standin\nexit 0", "code 1"},
	}
	for i, tc := range cases {
		t.Run(tc.family+" "+tc.name, func(t *testing.T) {
			run := fmt.Sprintf("run-fail-%d", i)
			w, ans := agentLaunch(t, s, run, fmt.Sprintf("k-fail-%d", i), tc.brief, fmt.Sprintf("fail/%d", i), map[string]string{"agent": tc.family})
			if w == "" {
				t.Fatalf("launch not applied: %s", ans)
			}
			mb := &mailbox{s: s, run: run}
			done := mb.next(t, "worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
			if done.Outcome != protocol.OutcomeFailed || !strings.Contains(done.Body, tc.want) {
				t.Fatalf("worker-done: %+v (want failed, body with %q)", done, tc.want)
			}
			if st, out := observe(t, s, w); st != protocol.StateSettled || out != protocol.OutcomeFailed {
				t.Fatalf("settled as %s %s", st, out)
			}
		})
	}
}

// TestAgentCLIMissing: a family the server does not declare is refused at
// launch; a declared family whose CLI the worker cannot find settles failed
// naming the missing CLI.
func TestAgentCLIMissing(t *testing.T) {
	t.Run("undeclared", func(t *testing.T) {
		standins(t)
		s := startServerEnv(t, serveEnv{"HOME": t.TempDir()}, t.TempDir())
		w, ans := agentLaunch(t, s, "run-undeclared", "k-undeclared", "hello", "missing/a", map[string]string{"agent": "claude"})
		if w != "" || !strings.Contains(ans, `"not-applied"`) {
			t.Fatalf("launch of an undeclared family: %s", ans)
		}
	})
	t.Run("not installed", func(t *testing.T) {
		s := agentServer(t, false)
		w, ans := agentLaunch(t, s, "run-missing", "k-missing", "hello", "missing/b", map[string]string{"agent": "codex"})
		if w == "" {
			t.Fatalf("launch not applied: %s", ans)
		}
		done := (&mailbox{s: s, run: "run-missing"}).next(t, "worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
		if done.Outcome != protocol.OutcomeFailed || !strings.Contains(done.Body, "codex CLI is not installed") {
			t.Fatalf("worker-done: %+v", done)
		}
	})
}

// TestAgentSelectionRefused: an effort the CLI does not take is refused at
// launch, not-applied rejected, whatever the descriptor declares: never
// passed to a worker, never silently dropped.
func TestAgentSelectionRefused(t *testing.T) {
	s := agentServer(t, true)
	for i, sel := range []map[string]string{
		{"agent": "claude", "model": "claude-sonnet-4-5", "effort": "turbo"},
		{"agent": "codex", "model": "gpt-5.5", "effort": "max"},
	} {
		w, ans := agentLaunch(t, s, "run-sel", fmt.Sprintf("k-sel-%d", i), "#!standin\ntool finish {\"outcome\":\"succeeded\"}", fmt.Sprintf("sel/%d", i), sel)
		if w != "" || !strings.Contains(ans, `"not-applied"`) || !strings.Contains(ans, `"rejected"`) {
			t.Fatalf("%v: %s", sel, ans)
		}
	}
}

// TestAgentCLIHangCancelAndSecrets: a CLI that hangs (ignoring SIGTERM,
// with a child of its own) is stopped by a cancel, which settles at once
// and leaves no process of the tree; kitchn's token is in none of the
// agent's environments and command lines, its workspace, or any file the
// worker wrote.
func TestAgentCLIHangCancelAndSecrets(t *testing.T) {
	s := agentServer(t, true)
	home := s.Env["HOME"]
	if home == "" {
		t.Fatal("the server was given no home of its own")
	}
	w, ans := agentLaunch(t, s, "run-hang", "k-hang", "#!standin\nhang", "hang/a", map[string]string{"agent": "claude"})
	if w == "" {
		t.Fatalf("launch not applied: %s", ans)
	}
	mb := &mailbox{s: s, run: "run-hang"}
	row := mb.next(t, "hanging status", kindBody(protocol.MsgStatus, "hanging pid "))
	var pid, child int
	if _, err := fmt.Sscanf(row.Body, "hanging pid %d child %d", &pid, &child); err != nil {
		t.Fatalf("status %q: %v", row.Body, err)
	}
	supervisor := ppid(t, pid)
	harnessPid := ppid(t, supervisor)
	for _, p := range []int{harnessPid, supervisor, pid, child} {
		for _, f := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p, f))
			if err != nil {
				t.Fatalf("read /proc/%d/%s: %v", p, f, err)
			}
			if strings.Contains(string(b), s.Token) {
				t.Fatalf("kitchn's token is in /proc/%d/%s", p, f)
			}
		}
	}
	if st, _ := observe(t, s, w); st != protocol.StateReady {
		t.Fatalf("state of the hanging agent: %s", st)
	}
	workerEffect(t, s, "run-hang", "k-hang-cancel", `{"type":"cancel-worker","worker":`+workerRes(w)+`}`)
	if st, out := observe(t, s, w); st != protocol.StateSettled || out != protocol.OutcomeCancelled {
		t.Fatalf("right after cancel: %s %s", st, out)
	}
	for _, p := range []int{harnessPid, supervisor, pid, child} {
		waitGone(t, p)
	}
	for _, root := range []string{s.Data, home} {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || path == filepath.Join(s.Data, "private", "token") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err == nil && strings.Contains(string(b), s.Token) {
				t.Errorf("kitchn's token is in %s", path)
			}
			return nil
		})
	}
}

func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	p, _ := strconv.Atoi(f[1])
	return p
}

// waitGone waits until pid no longer runs (a zombie counts as gone: its
// parent has not reaped it yet).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(f) > 0 && f[0] == "Z" {
				return
			}
		}
	}
	t.Fatalf("process %d still runs", pid)
}
