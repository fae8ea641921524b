package harness_test

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// These tests run the real galley-worker binary as the harness, with the
// scripted agent as its agent, against the fake worker API and a real bare
// repository.

func TestScriptReportsThroughTools(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, strings.Join([]string{
		"#!galley-script",
		"status starting work",
		"heartbeat",
		"escalate Flaky CI :: the runner is down",
		"usage 1200 300 51000",
		"commit notes/result.txt all tests pass",
		"done succeeded fixed the flaky test",
	}, "\n"))
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	want := []workerapi.PostRequest{
		{Kind: protocol.MsgStatus, Body: "starting work"},
		{Kind: protocol.MsgHeartbeat},
		{Kind: protocol.MsgEscalation, Subject: "Flaky CI", Body: "the runner is down"},
		{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded, Body: "fixed the flaky test"},
	}
	if got := withoutClientIDs(t, s.Posts()); !reflect.DeepEqual(got, want) {
		t.Errorf("posts:\n got %+v\nwant %+v", got, want)
	}
	var usage *workerapi.UsageRequest
	for _, c := range s.Calls {
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	if usage == nil || usage.Report.Tokens == nil || *usage.Report.Tokens.Input != 1200 || *usage.Report.Tokens.Output != 300 ||
		usage.Report.Cost == nil || usage.Report.Cost.Amount != 51000 || usage.Report.Cost.Basis != "reported" ||
		usage.Report.Source != "w-1" || usage.Report.Agent != "" {
		t.Errorf("usage = %+v", usage)
	}
	if s.Count(workerapi.PathExited) != 0 {
		t.Error("exited reported after done")
	}
	if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeSucceeded {
		t.Errorf("state %s/%s", s.State, s.Outcome)
	}
	// The commit landed on the worker's branch in the house's repository.
	if got := git(t, p.bare, "show", testBranch+":notes/result.txt"); got != "all tests pass" {
		t.Errorf("committed file = %q", got)
	}
	if got := git(t, p.bare, "log", "-1", "--format=%s", testBranch); got != "galley script: write notes/result.txt" {
		t.Errorf("commit subject = %q", got)
	}
	if got := git(t, p.bare, "rev-parse", "main"); got == git(t, p.bare, "rev-parse", testBranch) {
		t.Error("the branch did not move")
	}
	// It went through the harness's push gate: the clone's origin leads
	// there for fetch and push.
	if got := git(t, p.ws, "remote", "get-url", "--push", "origin"); !strings.HasPrefix(got, "http://127.0.0.1:") {
		t.Errorf("the workspace pushes to %q, not the push gate", got)
	}
	p.checkNoToken(t)
}

func TestAskWaitsForTheReply(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded")
	p := startHarness(t, f, procOpts{})
	s := waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool {
		return len(s.Posts()) == 1 && s.State == protocol.StateAwaitingReply
	})
	q := s.Calls[len(s.Calls)-1]
	if q.Post.Kind != protocol.MsgQuestion || q.Post.Subject != "Which API?" || q.Post.Body != "v1 or v2?" {
		t.Fatalf("question = %+v", q.Post)
	}
	f.Reply("msg-unrelated", "not this one")
	f.Reply(q.PostID, "v2, please")
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s = f.Snapshot()
	checkReadyFirst(t, s)
	posts := s.Posts()
	if got := kinds(posts); !reflect.DeepEqual(got, []string{"question", "status", "worker-done"}) {
		t.Fatalf("posts = %v", got)
	}
	if posts[1].Body != "reply: v2, please" {
		t.Errorf("status = %q", posts[1].Body)
	}
}

func TestWaitMessageDeliversInOrder(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nwait-message\nwait-message\nstatus between\nwait-message\ndone failed gave up")
	// Messages sent while the worker starts wait for the agent.
	f.Message("first")
	f.Message("second")
	p := startHarness(t, f, procOpts{})
	waitFor(t, ctx, f, "the status", func(s fakeapi.Snapshot) bool { return len(s.Posts()) == 3 })
	f.Message("third")
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	want := []workerapi.PostRequest{
		{Kind: protocol.MsgStatus, Body: "message: first"},
		{Kind: protocol.MsgStatus, Body: "message: second"},
		{Kind: protocol.MsgStatus, Body: "between"},
		{Kind: protocol.MsgStatus, Body: "message: third"},
		{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeFailed, Body: "gave up"},
	}
	if got := withoutClientIDs(t, s.Posts()); !reflect.DeepEqual(got, want) {
		t.Errorf("posts:\n got %+v\nwant %+v", got, want)
	}
	if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeFailed {
		t.Errorf("state %s/%s", s.State, s.Outcome)
	}
}

func TestExitWithoutReportIsReported(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nstatus leaving\nexit 3\nstatus never")
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	if got := kinds(s.Posts()); !reflect.DeepEqual(got, []string{"status"}) {
		t.Errorf("posts = %v", got)
	}
	last := s.Calls[len(s.Calls)-1]
	if last.Exited == nil || last.Exited.Code != 3 {
		t.Fatalf("last call = %+v, want exited with code 3", last)
	}
	if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeFailed {
		t.Errorf("state %s/%s", s.State, s.Outcome)
	}
}

func TestScriptEndWithoutDoneIsReported(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nstatus only this")
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	if s.Count(workerapi.PathExited) != 1 || s.Outcome != protocol.OutcomeFailed {
		t.Errorf("calls = %+v, outcome %s", s.Calls, s.Outcome)
	}
}

func TestMalformedDirectiveEscalatesAndFails(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nstatus fine\nsleep forever\ndone succeeded")
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	checkReadyFirst(t, s)
	posts := s.Posts()
	if got := kinds(posts); !reflect.DeepEqual(got, []string{"escalation", "worker-done"}) {
		t.Fatalf("posts = %+v", posts)
	}
	if !strings.Contains(posts[0].Body, "line 3") || !strings.Contains(posts[0].Body, "sleep forever") {
		t.Errorf("escalation does not name the line: %q", posts[0].Body)
	}
	if posts[1].Outcome != protocol.OutcomeFailed {
		t.Errorf("outcome = %q", posts[1].Outcome)
	}
}

func TestCancelStopsAgentAndHarness(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nstatus about to sleep\nsleep 1h\ndone succeeded")
	p := startHarness(t, f, procOpts{})
	waitFor(t, ctx, f, "the status", func(s fakeapi.Snapshot) bool { return len(s.Posts()) == 1 })
	pid := p.agentPID(t)
	f.Settle(protocol.OutcomeCancelled)
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	s := f.Snapshot()
	if s.Count(workerapi.PathExited) != 0 || len(s.Posts()) != 1 {
		t.Errorf("a cancelled worker reported more: %+v", s.Calls)
	}
	if s.Outcome != protocol.OutcomeCancelled {
		t.Errorf("outcome = %s", s.Outcome)
	}
	// The harness waited for its agent, so the pid is gone.
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("the agent (pid %d) still exists: %v", pid, err)
	}
}

// TestStoppedHarnessReportsExit stops the worker as a runtime does: SIGTERM
// to the harness alone, or to its whole process group (harness and agent
// at once).
func TestStoppedHarnessReportsExit(t *testing.T) {
	for _, group := range []bool{false, true} {
		t.Run(map[bool]string{false: "harness", true: "group"}[group], func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			f := newFake(t, "#!galley-script\nstatus sleeping\nsleep 1h")
			p := startHarness(t, f, procOpts{})
			waitFor(t, ctx, f, "the status", func(s fakeapi.Snapshot) bool { return len(s.Posts()) == 1 })
			pid := p.agentPID(t)
			target := p.cmd.Process.Pid
			if group {
				target = -target
			}
			if err := syscall.Kill(target, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.wait(t, ctx); code != 0 {
				t.Fatalf("harness exit code %d", code)
			}
			s := f.Snapshot()
			last := s.Calls[len(s.Calls)-1]
			if last.Exited == nil || s.Count(workerapi.PathExited) != 1 {
				t.Fatalf("calls = %+v, want one exited last", s.Calls)
			}
			if !group && !strings.Contains(last.Exited.Reason, "harness was stopped") {
				t.Errorf("reason = %q", last.Exited.Reason)
			}
			if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
				t.Errorf("the agent (pid %d) still exists: %v", pid, err)
			}
		})
	}
}

// TestIdleBriefHeartbeatsUntilCancelled also checks what the agent holds:
// the MCP URL and secret, never the worker token, even when the harness got
// the token in its own environment.
func TestIdleBriefHeartbeatsUntilCancelled(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "Fix the flaky test.")
	p := startHarness(t, f, procOpts{tokenInEnv: true, heartbeat: 20 * time.Millisecond})
	s := waitFor(t, ctx, f, "three heartbeats", func(s fakeapi.Snapshot) bool { return len(s.Posts()) >= 3 })
	checkReadyFirst(t, s)
	for _, post := range s.Posts() {
		if post.Kind != protocol.MsgHeartbeat {
			t.Fatalf("an idle worker posted %+v", post)
		}
	}
	if s.Calls[0].Ready.Evidence != "script agent started" {
		t.Errorf("evidence = %q", s.Calls[0].Ready.Evidence)
	}

	pid := p.agentPID(t)
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatalf("reading the agent's environment: %v", err)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	secret := testToken[strings.LastIndex(testToken, ".")+1:]
	for name, b := range map[string][]byte{"environment": environ, "command line": cmdline} {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the agent's %s holds the worker token", name)
		}
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(environ), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, k := range []string{"GALLEY_WORKER_TOKEN", "GALLEY_WORKER_TOKEN_FILE", "GALLEY_WORKER_ENDPOINT", "GALLEY_REPOSITORY"} {
		if _, ok := env[k]; ok {
			t.Errorf("the agent has %s", k)
		}
	}
	mcpURL, mcpSecret := env["GALLEY_MCP_URL"], env["GALLEY_MCP_SECRET"]
	if !strings.HasPrefix(mcpURL, "http://127.0.0.1:") || len(mcpSecret) < 32 {
		t.Fatalf("MCP url %q, secret of %d bytes", mcpURL, len(mcpSecret))
	}
	if strings.Contains(string(cmdline), mcpSecret) || strings.Contains(p.stderr.String(), mcpSecret) {
		t.Error("the MCP secret is on the agent's command line or in the harness log")
	}
	// The MCP server refuses a request without the secret (made where the
	// agent is: in its network).
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + testToken} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, mcpURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		c, err := dialIn(pid, req.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := roundTrip(c, req)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("MCP request with %q answered %d", auth, resp.StatusCode)
		}
	}

	f.Settle(protocol.OutcomeCancelled)
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d", code)
	}
	if s := f.Snapshot(); s.Count(workerapi.PathExited) != 0 {
		t.Errorf("exited reported for a cancelled worker")
	}
	p.checkNoToken(t)
}

func TestWrongTokenStopsBeforeTheAgent(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeapi.New(workerapi.Self{Handle: "w-1", Brief: "x", Branch: testBranch, Agent: protocol.AgentSelection{Agent: "script"}}, "w-1.another-token")
	t.Cleanup(f.Close)
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code == 0 {
		t.Fatal("the harness succeeded with a refused token")
	}
	if s := f.Snapshot(); len(s.Calls) != 0 || s.Refused == 0 {
		t.Errorf("calls %+v, refused %d", s.Calls, s.Refused)
	}
	if strings.Contains(p.stderr.String(), "agent started") {
		t.Error("the agent started")
	}
	p.checkNoToken(t)
}

// An exit report answered 409 (galley has one already: this report's
// first attempt, its answer lost) leaves the harness nothing to owe: it
// ends with code 0, not as a failure.
func TestExitAlreadyReportedIsDone(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := newFake(t, "#!galley-script\nexit 3")
	f.FailNext(workerapi.PathExited, http.StatusConflict)
	p := startHarness(t, f, procOpts{})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("harness exit code %d after a 409 to its exit report", code)
	}
	if n := f.Snapshot().Count(workerapi.PathExited); n != 0 {
		t.Fatalf("the exit report was sent again after its 409 (%d more)", n)
	}
}

// roundTrip sends req on c, one request, and reads its answer.
func roundTrip(c net.Conn, req *http.Request) (*http.Response, error) {
	req.Close = true
	if err := req.Write(c); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(c), req)
}
