package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// workerBin is the galley-worker binary, built once for all tests.
var workerBin string

// envTestWorkerBin gives a child test process its parent's workerBin.
const envTestWorkerBin = "GALLEY_TEST_WORKER_BIN"

// beforeMain, when set (caps_linux_test.go), runs first in TestMain.
var beforeMain func()

func TestMain(m *testing.M) {
	if beforeMain != nil {
		beforeMain()
	}
	if bin := os.Getenv(envTestWorkerBin); bin != "" {
		workerBin = bin // a child test process reuses its parent's build
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "galley-worker-bin-")
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

const (
	testToken  = "w-1.9f8e7d6c5b4a-the-worker-secret"
	testBranch = "kitchen/issue-195"
)

// testCtx bounds a test's waits; no assertion depends on how long anything
// takes.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// git runs git in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		// The test reads, as root, worktrees the agent's uid owns.
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// bareRepo makes a bare repository with an initial commit on main and the
// worker's branch, as galley creates it before a worker starts.
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

// newFake serves a worker with brief.
func newFake(t *testing.T, brief string) *fakeapi.Server {
	t.Helper()
	f := fakeapi.New(workerapi.Self{
		Handle: "w-1", Run: "run-1", Task: "issue-195", Role: "station-cook",
		Brief: brief, Branch: testBranch, Agent: protocol.AgentSelection{Agent: "script"},
	}, testToken)
	t.Cleanup(f.Close)
	return f
}

// syncBuffer is a bytes.Buffer safe for a process's writer goroutine and a
// test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running galley-worker harness process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error
	bare   string
	ws     string
}

type procOpts struct {
	tokenInEnv bool          // pass the token as GALLEY_WORKER_TOKEN rather than a file
	heartbeat  time.Duration // default 1h: no harness heartbeat interferes
	env        []string      // more of the harness's settings, NAME=value
	// bare and ws are the repository and workspace (default: fresh), as
	// another harness of the same worker had them.
	bare, ws string
}

// startHarness runs the galley-worker binary as the harness, in a process
// group of its own (as a runtime starts it), against f and a fresh bare
// repository.
func startHarness(t *testing.T, f *fakeapi.Server, o procOpts) *proc {
	t.Helper()
	if o.heartbeat == 0 {
		o.heartbeat = time.Hour
	}
	p := &proc{stderr: &syncBuffer{}, done: make(chan struct{}), bare: o.bare, ws: o.ws}
	if p.bare == "" {
		p.bare = bareRepo(t)
	}
	if p.ws == "" {
		p.ws = filepath.Join(t.TempDir(), "ws")
	}
	env := []string{
		"GALLEY_WORKER_ENDPOINT=" + f.URL,
		"GALLEY_WORKSPACE=" + p.ws,
		"GALLEY_REPOSITORY=" + p.bare,
		"GALLEY_HEARTBEAT_INTERVAL=" + o.heartbeat.String(),
	}
	env = append(env, o.env...)
	if o.tokenInEnv {
		env = append(env, "GALLEY_WORKER_TOKEN="+testToken)
	} else {
		file := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(file, []byte(testToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "GALLEY_WORKER_TOKEN_FILE="+file)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GALLEY_") {
			env = append(env, kv)
		}
	}
	p.cmd = exec.Command(workerBin)
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() || os.Getenv("GALLEY_TEST_LOGS") != "" {
			t.Logf("harness stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// wait waits for the harness to exit and returns its exit code.
func (p *proc) wait(t *testing.T, ctx context.Context) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-ctx.Done():
		t.Fatalf("the harness did not exit: %v", ctx.Err())
		return -1
	}
}

// waitFor waits until cond holds of the fake's state.
func waitFor(t *testing.T, ctx context.Context, f *fakeapi.Server, what string, cond func(fakeapi.Snapshot) bool) fakeapi.Snapshot {
	t.Helper()
	s, err := f.Wait(ctx, cond)
	if err != nil {
		t.Fatalf("waiting for %s: %v\ncalls: %+v", what, err, s.Calls)
	}
	return s
}

// agentPID finds the agent's pid in the harness's log.
func (p *proc) agentPID(t *testing.T) int {
	t.Helper()
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !strings.Contains(line, `"msg":"agent started"`) {
			continue
		}
		var pid int
		i := strings.Index(line, `"pid":`)
		if i >= 0 {
			if _, err := fmt.Sscanf(line[i+len(`"pid":`):], "%d", &pid); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no agent pid in the harness log:\n%s", p.stderr.String())
	return 0
}

// kinds lists the kinds of posted rows, in order.
func kinds(posts []workerapi.PostRequest) []string {
	var out []string
	for _, p := range posts {
		out = append(out, p.Kind)
	}
	return out
}

// checkReadyFirst asserts the first accepted call was ready, once.
func checkReadyFirst(t *testing.T, s fakeapi.Snapshot) {
	t.Helper()
	if len(s.Calls) == 0 || s.Calls[0].Path != workerapi.PathReady {
		t.Errorf("the first call is not ready: %+v", s.Calls)
	}
	if n := s.Count(workerapi.PathReady); n != 1 {
		t.Errorf("ready reported %d times", n)
	}
}

// checkNoToken asserts the worker token is nowhere in the harness's log.
func (p *proc) checkNoToken(t *testing.T) {
	t.Helper()
	secret := testToken[strings.LastIndex(testToken, ".")+1:]
	if strings.Contains(p.stderr.String(), secret) {
		t.Error("the harness log holds the worker token")
	}
}

// withoutClientIDs checks every post carries a client id, distinct from
// the others, and returns the posts without them for comparison.
func withoutClientIDs(t *testing.T, posts []workerapi.PostRequest) []workerapi.PostRequest {
	t.Helper()
	seen := map[string]bool{}
	out := make([]workerapi.PostRequest, len(posts))
	for i, p := range posts {
		if p.ClientID == "" || seen[p.ClientID] {
			t.Errorf("post %d has client id %q (missing or repeated)", i, p.ClientID)
		}
		seen[p.ClientID] = true
		p.ClientID = ""
		out[i] = p
	}
	return out
}
