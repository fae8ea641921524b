package realcli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// parkAfter is the shortened park after of these tests.
const parkAfter = "3s"

// TestRealCLIParks parks each real CLI while it waits on its coordinator
// (issue 30, item 2): the harness saves the CLI's session files, reports
// the parking and ends with the CLI; the reply comes afterwards, to a
// new harness (galley's resume: the parking's state in self), which
// restores the files and resumes the same CLI session with the reply as
// its prompt. The provider stand-in sees the turns from before the
// parking in the resumed CLI's requests, the branch holds the commits of
// both, and the usage reports are the totals of both harnesses' proxies.
func TestRealCLIParks(t *testing.T) {
	bin := clisBin(t)
	confine := harness.ConfineLandlock
	if ok, _ := harness.CanSwitchUser(); ok {
		confine = harness.ConfineUser
	}
	for _, name := range []string{"claude", "codex"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			parkAndResume(t, bin, name, confine)
		})
	}
}

// worker is one run of the harness.
type worker struct {
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *syncBuffer
}

func startWorker(t *testing.T, env []string) *worker {
	t.Helper()
	w := &worker{cmd: exec.Command(workerBin), done: make(chan struct{}), stderr: &syncBuffer{}}
	w.cmd.Env = env
	w.cmd.Stderr = w.stderr
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); close(w.done) }()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			<-w.done
		}
		if t.Failed() || os.Getenv("GALLEY_TEST_LOGS") != "" {
			t.Logf("harness stderr:\n%s", w.stderr.String())
		}
	})
	return w
}

// exit waits for the harness to end and answers its exit code.
func (w *worker) exit(t *testing.T, ctx context.Context) int {
	t.Helper()
	select {
	case <-w.done:
		return w.cmd.ProcessState.ExitCode()
	case <-ctx.Done():
		t.Fatal("the harness did not exit")
		return -1
	}
}

func parkAndResume(t *testing.T, bin, fam string, confine harness.Confinement) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	key := random(t, "sk-test-")
	commit := func(file, msg string) string {
		return fmt.Sprintf("printf '%s\\n' > %s && git add %s && git -c user.name=agent -c user.email=agent@example.com commit -qm '%s' && git push -q origin HEAD",
			msg, file, file, msg)
	}
	prov := providerstandin.New(key, providerstandin.ParkSteps(fam, commit("before.txt", "before parking"), commit("after.txt", "after resuming")))
	t.Cleanup(prov.Close)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("GALLEY_TEST_LOGS") != "" {
			for _, c := range prov.Calls() {
				t.Logf("provider call: api=%s step=%d called=%v results=%q", c.API, c.Step, c.Called, c.Results)
			}
			t.Logf("provider refusals: %v", prov.Refused())
		}
	})
	handle := "w-park-" + fam
	token := handle + "." + random(t, "")
	brief := "Add two files around a question to the coordinator, push both, and finish."
	self := workerapi.Self{Handle: handle, Run: "run-1", Task: "real-cli-park", Role: "commis",
		Brief: brief, Branch: testBranch, Agent: protocol.AgentSelection{Agent: fam}}
	f := fakeapi.New(self, token)
	t.Cleanup(f.Close)

	bare := bareRepo(t)
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
	parked := filepath.Join(root, "parked")
	env := func(endpoint string) []string {
		e := []string{
			"GALLEY_WORKER_ENDPOINT=" + endpoint,
			"GALLEY_WORKER_TOKEN=" + token,
			"GALLEY_WORKER_HANDLE=" + handle,
			"GALLEY_WORKSPACE=" + filepath.Join(root, "ws"),
			"GALLEY_REPOSITORY=" + bare,
			"GALLEY_AGENT_BIN_DIR=" + bin,
			"GALLEY_PARK_AFTER=" + parkAfter,
			"GALLEY_PARK_DIR=" + parked,
			harness.EnvConfine + "=" + string(confine),
			"GALLEY_HEARTBEAT_INTERVAL=1h",
			"GALLEY_MCP_PROGRESS_INTERVAL=" + progressEvery,
			"PATH=" + os.Getenv("PATH"),
			"HOME=" + home,
			"LANG=C.UTF-8",
			"DISABLE_AUTOUPDATER=1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			harness.EnvAnthropicBaseURL + "=" + prov.URL,
			harness.EnvOpenAIBaseURL + "=" + prov.URL + "/v1",
		}
		if fam == "claude" {
			return append(e, "GALLEY_ANTHROPIC_API_KEY="+key)
		}
		return append(e, "GALLEY_OPENAI_API_KEY="+key)
	}

	// Before: the CLI commits, asks and waits; the harness parks it.
	first := startWorker(t, env(f.URL))
	if code := first.exit(t, ctx); code != 0 {
		t.Fatalf("the parking harness's exit code %d", code)
	}
	s := f.Snapshot()
	var park *workerapi.ParkRequest
	var question string
	for _, c := range s.Calls {
		if c.Park != nil {
			park = c.Park
		}
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			question = c.PostID
		}
	}
	if park == nil || park.Parking != 1 || question == "" {
		t.Fatalf("no parking in a question: parking %+v, question %q", park, question)
	}
	if s.State != protocol.StateAwaitingReply || s.Count(workerapi.PathExited) != 0 {
		t.Fatalf("the parked worker: state %s, exit reports %d", s.State, s.Count(workerapi.PathExited))
	}
	// Gone while parked: the harness has exited and nothing holds the
	// house key any more (the CLI and its supervisor ended with it).
	if pids := holders(t, key); len(pids) != 0 {
		t.Errorf("processes still holding the house key while parked: %v", pids)
	}
	archives, _ := os.ReadDir(parked)
	if len(archives) == 0 {
		t.Errorf("no session archive in %s", parked)
	}
	if got := git(t, bare, "show", testBranch+":before.txt"); got != "before parking" {
		t.Fatalf("before.txt on the branch = %q", got)
	}
	parkedCalls := len(prov.Calls())
	usage1 := lastUsage(s)
	if usage1 == nil || usage1.Report.Tokens == nil {
		t.Fatalf("no usage reported before the parking")
	}

	// The reply comes later; galley's resume starts a new harness with
	// the parking's state (as pkg/service does).
	time.Sleep(2 * time.Second)
	self.Parked, self.Resume = 1, &workerapi.Resume{Parking: 1, State: park.State}
	f2 := fakeapi.New(self, token)
	t.Cleanup(f2.Close)
	f2.Reply(question, "hello, please")
	second := startWorker(t, env(f2.URL))
	if code := second.exit(t, ctx); code != 0 {
		t.Fatalf("the resumed harness's exit code %d", code)
	}
	s2 := f2.Snapshot()
	if s2.State != protocol.StateSettled || s2.Outcome != protocol.OutcomeSucceeded {
		t.Errorf("the resumed worker: %s/%s", s2.State, s2.Outcome)
	}
	if !slices.ContainsFunc(s2.Calls, func(c fakeapi.Call) bool { return c.Ready != nil }) {
		t.Errorf("the resumed worker never reported ready")
	}
	for _, c := range s2.Calls {
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			t.Errorf("the resumed worker asked again: %+v", c.Post)
		}
	}

	// The same conversation: the resumed CLI's first scripted request
	// holds the turns from before the parking (the step it plays counts
	// them), the brief, the question's call and the reply as its prompt.
	calls := prov.Calls()
	if err := providerstandin.CheckResumed(calls, parkedCalls, fam, brief, "hello, please"); err != nil {
		t.Error(err)
	}
	if got := git(t, bare, "show", testBranch+":after.txt"); got != "after resuming" {
		t.Errorf("after.txt on the branch = %q", got)
	}
	if got := git(t, bare, "show", testBranch+":before.txt"); got != "before parking" {
		t.Errorf("before.txt on the branch after the resume = %q", got)
	}
	if len(prov.Refused()) != 0 || prov.SawWrongKey() {
		t.Errorf("the provider refused: %v", prov.Refused())
	}

	// Usage stays the worker's totals: the resumed proxy counted on from
	// the parked one's count, so the last report covers every call the
	// provider answered, before and after.
	u := providerstandin.MessagesUsage
	if fam == "codex" {
		u = providerstandin.ResponsesUsage
	}
	usage := lastUsage(s2)
	n := int64(len(calls))
	if usage == nil || usage.Report.Tokens == nil || usage.Report.Tokens.Output == nil || *usage.Report.Tokens.Output != n*u.Output ||
		*usage.Report.Tokens.Input != n*u.Input {
		t.Errorf("the resumed worker's last usage %s is not the total of %d calls of %+v", jsonOf(usage), n, u)
	}
	if *usage1.Report.Tokens.Output != int64(parkedCalls)*u.Output {
		t.Errorf("the parked worker's last usage %s is not the total of its %d calls", jsonOf(usage1), parkedCalls)
	}
}

func lastUsage(s fakeapi.Snapshot) *workerapi.UsageRequest {
	var u *workerapi.UsageRequest
	for _, c := range s.Calls {
		if c.Usage != nil {
			u = c.Usage
		}
	}
	return u
}
