//go:build unix

package localproc

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/runtime/runtimetest"
	"github.com/galley-run/galley/pkg/service"
)

// fakeHarness is the path of testdata/fakeharness, built by TestMain.
var fakeHarness string

const (
	testEndpoint = "http://127.0.0.1:9/"
	// patience bounds every wait: a guard against hangs, not a speed check.
	patience = 30 * time.Second
	pollStep = 10 * time.Millisecond

	// These variables make the test binary act as a galley server that a
	// test kills with SIGKILL.
	serverDirEnv     = "LOCALPROC_TEST_SERVER_DIR"
	serverModeEnv    = "LOCALPROC_TEST_SERVER_MODE"
	serverHarnessEnv = "LOCALPROC_TEST_SERVER_HARNESS"
)

func TestMain(m *testing.M) {
	if os.Getenv(serverDirEnv) != "" {
		serveForTest()
		return
	}
	tmp, err := os.MkdirTemp("", "localproc-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fakeHarness = filepath.Join(tmp, "fakeharness")
	out, err := exec.Command("go", "build", "-o", fakeHarness, "./testdata/fakeharness").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the fake harness: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmp)
	os.Exit(code)
}

// newRuntime returns a Runtime over dir (a fresh one if empty) with the fake
// harness. At cleanup it kills every worker of dir and closes.
func newRuntime(t *testing.T, dir string, opts ...Option) *Runtime {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	base := []Option{WithDir(dir), WithHarness(fakeHarness), WithEndpoint(testEndpoint), WithGrace(2 * time.Second)}
	r, err := New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		killAll(t, r)
		r.Close()
	})
	return r
}

// killAll kills the process group of every worker r's directory recorded,
// whichever Runtime started it, so no test leaves a process behind.
func killAll(t *testing.T, r *Runtime) {
	hs, err := r.Handles()
	if err != nil {
		t.Error(err)
	}
	for _, h := range hs {
		b, err := os.ReadFile(r.pidFile(h))
		if err != nil {
			continue
		}
		start, _ := os.ReadFile(r.pidStartFile(h))
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		w := &worker{pid: pid, start: strings.TrimSpace(string(start))}
		if pid > 0 && !pidReused(w) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// fakeSpec returns a spec whose fake harness behaves as mode (see
// testdata/fakeharness) and works in WorkspacesDir/<handle>.
func fakeSpec(r *Runtime, handle, mode string) service.WorkerSpec {
	return service.WorkerSpec{
		Handle:           handle,
		Token:            handle + "." + rand.Text(),
		IdempotencyToken: "idem-" + handle,
		Workspace:        "ws-" + handle,
		WorkspacePath:    filepath.Join(r.WorkspacesDir(), handle),
		Branch:           "galley/test/" + mode,
		Agent:            "script",
		Run:              "run-1",
		Task:             "task-" + handle,
		Key:              "key-" + handle,
	}
}

// starts counts the fake harness's start lines for handle.
func starts(r *Runtime, handle string) int {
	b, err := os.ReadFile(filepath.Join(r.WorkspacesDir(), handle, "starts"))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

func TestSuite(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) runtimetest.Subject {
		dir := t.TempDir()
		r := newRuntime(t, dir)
		return runtimetest.Subject{
			Runtime: r,
			// A second Runtime over the same directory: its workers are
			// not its children, as after a server restart.
			Restart: func() service.Runtime { return newRuntime(t, dir) },
			Spec: func(handle string, b runtimetest.Behavior) service.WorkerSpec {
				mode := "run"
				if b == runtimetest.ExitsByItself {
					mode = "exit"
				}
				return fakeSpec(r, handle, mode)
			},
			Starts:     func(handle string) int { return starts(r, handle) },
			Workspaces: r.WorkspacesDir(),
		}
	})
}

// record is what the fake harness writes about itself.
type record struct {
	Pid           int      `json:"pid"`
	Pgid          int      `json:"pgid"`
	Cwd           string   `json:"cwd"`
	Env           []string `json:"env"`
	TokenReadable bool     `json:"tokenReadable"`
}

// awaitFile polls until name exists and returns its content.
func awaitFile(t *testing.T, name string) []byte {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		b, err := os.ReadFile(name)
		if err == nil {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear: %v", name, err)
		}
		time.Sleep(pollStep)
	}
}

// awaitRecord waits for the first record a fake harness wrote in ws.
func awaitRecord(t *testing.T, ws string) record {
	t.Helper()
	// The starts file exists a moment before its first line does.
	var line string
	deadline := time.Now().Add(patience)
	for {
		b, _ := os.ReadFile(filepath.Join(ws, "starts"))
		if first, _, ok := strings.Cut(string(b), "\n"); ok {
			line = first
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start recorded in %s", ws)
		}
		time.Sleep(pollStep)
	}
	var rec record
	if err := json.Unmarshal(awaitFile(t, filepath.Join(ws, "record-"+line+".json")), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func awaitLiveness(t *testing.T, r *Runtime, handle string, want service.Liveness) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		got, err := r.Liveness(context.Background(), handle)
		if err != nil {
			t.Fatalf("Liveness(%s): %v", handle, err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Liveness(%s) = %d, want %d", handle, got, want)
		}
		time.Sleep(pollStep)
	}
}

// gone reports whether pid no longer runs (a zombie has ended).
func gone(pid int) bool {
	info, ok := procStat(pid)
	return !ok || info.zombie
}

func awaitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(pollStep)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

func TestHarnessEnvironment(t *testing.T) {
	// What a galley server might hold that no worker may see.
	t.Setenv("GALLEY_TOKEN_SECRET", "xyz")
	t.Setenv("GALLEY_KITCHN_TOKEN", "kitchn-bearer-test-value")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-test-value")
	t.Setenv("HTTPS_PROXY", "http://user:pw@127.0.0.1:3128")
	// What a worker should see.
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("PROVIDER_KEY_FOR_TEST", "provider-test-value")

	var logs syncBuffer
	r := newRuntime(t, "",
		WithRepository("file:///srv/house.git"),
		WithPassEnv("PROVIDER_KEY_FOR_TEST"),
		WithEnv("EXTRA_FOR_TEST", "extra-value"),
		WithEnv("GALLEY_HEARTBEAT_INTERVAL", "1s"),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	spec := fakeSpec(r, "w-env", "run")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, spec.WorkspacePath)

	allowed := map[string]bool{"PROVIDER_KEY_FOR_TEST": true, "EXTRA_FOR_TEST": true, "GALLEY_HEARTBEAT_INTERVAL": true}
	for _, k := range slices.Concat(AllowedEnv(), []string{contract.EnvWorkerTokenFile, contract.EnvWorkerEndpoint, contract.EnvWorkspace, contract.EnvRepository, contract.EnvBranch, contract.EnvWorkerHandle, contract.EnvAgentConfine, contract.EnvAgentNetwork, contract.EnvLogLimit}) {
		allowed[k] = true
	}
	env := map[string]string{}
	for _, kv := range rec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
		if !allowed[k] {
			t.Errorf("the harness got %s, which is not on the allow-list", k)
		}
		if v == "xyz" || strings.Contains(v, spec.Token) {
			t.Errorf("the harness got a secret in %s", k)
		}
	}
	want := map[string]string{
		contract.EnvWorkerTokenFile: r.tokenFile(spec.Handle),
		contract.EnvWorkerEndpoint:  testEndpoint,
		contract.EnvWorkspace:       spec.WorkspacePath,
		contract.EnvRepository:      "file:///srv/house.git",
		contract.EnvBranch:          spec.Branch,
		contract.EnvWorkerHandle:    spec.Handle,
		"LANG":                      "C.UTF-8",
		"PROVIDER_KEY_FOR_TEST":     "provider-test-value",
		"EXTRA_FOR_TEST":            "extra-value",
		"GALLEY_HEARTBEAT_INTERVAL": "1s",
		contract.EnvLogLimit:        strconv.Itoa(harness.DefaultLogLimit),
		contract.EnvAgentNetwork:    string(r.Network().Mode),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("harness %s = %q, want %q", k, env[k], v)
		}
	}
	if !rec.TokenReadable {
		t.Error("the harness could not read its token file")
	}
	if rec.Pgid != rec.Pid || rec.Pgid == syscall.Getpgrp() {
		t.Errorf("harness pid %d pgid %d (ours %d): want its own process group", rec.Pid, rec.Pgid, syscall.Getpgrp())
	}

	wdir := r.workerDir(spec.Handle)
	checkMode(t, wdir, 0o700)
	checkMode(t, r.tokenFile(spec.Handle), 0o600)
	if b, err := os.ReadFile(r.tokenFile(spec.Handle)); err != nil || string(b) != spec.Token {
		t.Errorf("token file holds %d bytes (err %v), want the token", len(b), err)
	}
	if b, _ := os.ReadFile(filepath.Join(wdir, "pid")); strings.TrimSpace(string(b)) != strconv.Itoa(rec.Pid) {
		t.Errorf("pid file %q, want %d", b, rec.Pid)
	}
	if b, _ := os.ReadFile(filepath.Join(wdir, "harness.log")); !strings.Contains(string(b), "fakeharness started") {
		t.Errorf("harness.log = %q, want the harness's output", b)
	}

	if err := r.Stop(context.Background(), spec.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, spec.Handle, service.LivenessExited)
	if _, err := os.Stat(r.tokenFile(spec.Handle)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the token file outlived its worker: %v", err)
	}

	// The token was in its file and nowhere else: not in logs, records,
	// meta.json or the workspace.
	if !strings.Contains(logs.String(), "worker started") {
		t.Fatalf("the runtime logged nothing, so the next check proves nothing: %q", logs.String())
	}
	if strings.Contains(logs.String(), spec.Token) {
		t.Error("the token appears in the runtime's log")
	}
	err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == r.tokenFile(spec.Handle) {
			return err
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(spec.Token)) {
			t.Errorf("the token appears in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkMode(t *testing.T, name string, want fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s has mode %v, want %v", name, fi.Mode().Perm(), want)
	}
}

func TestOptionsRefused(t *testing.T) {
	dir := t.TempDir()
	ok := []Option{WithDir(dir), WithHarness(fakeHarness), WithEndpoint(testEndpoint)}
	tests := []struct {
		name string
		opts []Option
	}{
		{"no dir", []Option{WithHarness(fakeHarness), WithEndpoint(testEndpoint)}},
		{"no harness", []Option{WithDir(dir), WithEndpoint(testEndpoint)}},
		{"no endpoint", []Option{WithDir(dir), WithHarness(fakeHarness)}},
		{"missing harness", append(slices.Clone(ok), WithHarness(filepath.Join(dir, "nope")))},
		{"zero grace", append(slices.Clone(ok), WithGrace(0))},
		{"pass a GALLEY_ variable", append(slices.Clone(ok), WithPassEnv("GALLEY_TOKEN"))},
		{"set a runtime variable", append(slices.Clone(ok), WithEnv("GALLEY_WORKER_TOKEN_FILE", "/etc/passwd"))},
		{"set a token variable", append(slices.Clone(ok), WithEnv("GALLEY_WORKER_TOKEN", "x"))},
		{"name with =", append(slices.Clone(ok), WithEnv("A=B", "c"))},
		{"empty name", append(slices.Clone(ok), WithPassEnv(""))},
		{"NUL in value", append(slices.Clone(ok), WithEnv("A", "b\x00c"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.opts...)
			if err == nil {
				r.Close()
			}
			if !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("New = %v, want an invalid error", err)
			}
		})
	}
}

func TestInvalidHandles(t *testing.T) {
	r := newRuntime(t, "")
	for _, h := range []string{"", ".", "..", "../escape", "a/b", ".hidden", "nul\x00", strings.Repeat("x", 129)} {
		spec := fakeSpec(r, "w", "run")
		spec.Handle = h
		if err := r.Start(context.Background(), spec); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Start(%q) = %v, want an invalid error", h, err)
		}
		if err := r.Stop(context.Background(), h); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Stop(%q) = %v, want an invalid error", h, err)
		}
		if _, err := r.Liveness(context.Background(), h); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Liveness(%q) = %v, want an invalid error", h, err)
		}
	}
	if hs, _ := r.Handles(); len(hs) != 0 {
		t.Errorf("invalid handles left workers %v", hs)
	}
	spec := fakeSpec(r, "w-no-token", "run")
	spec.Token = ""
	if err := r.Start(context.Background(), spec); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Errorf("Start without a token = %v, want an invalid error", err)
	}
	for _, p := range []string{"", "relative", r.WorkspacesDir(), t.TempDir(), filepath.Join(r.WorkspacesDir(), "..", "x")} {
		spec := fakeSpec(r, "w-bad-workspace", "run")
		spec.WorkspacePath = p
		if err := r.Start(context.Background(), spec); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Start with workspace %q = %v, want an invalid error", p, err)
		}
	}
}

func TestStopSignals(t *testing.T) {
	tests := []struct {
		mode     string
		wantExit string // what the exit file says
	}{
		{"run", "exit status 0"},       // ends on SIGTERM
		{"stubborn", "signal: killed"}, // ignores SIGTERM until SIGKILL
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			r := newRuntime(t, "", WithGrace(300*time.Millisecond))
			spec := fakeSpec(r, "w-"+tc.mode, tc.mode)
			if err := r.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			rec := awaitRecord(t, spec.WorkspacePath)
			if err := r.Stop(context.Background(), spec.Handle); err != nil {
				t.Fatal(err)
			}
			awaitLiveness(t, r, spec.Handle, service.LivenessExited)
			if _, err := os.Stat(filepath.Join(spec.WorkspacePath, "sigterm-"+strconv.Itoa(rec.Pid))); err != nil {
				t.Errorf("the harness never saw SIGTERM: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(r.workerDir(spec.Handle), "exit")); strings.TrimSpace(string(b)) != tc.wantExit {
				t.Errorf("exit file = %q, want %q", b, tc.wantExit)
			}
		})
	}
}

func TestStopKillsTheWholeGroup(t *testing.T) {
	r := newRuntime(t, "", WithGrace(300*time.Millisecond))
	spec := fakeSpec(r, "w-family", "family")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(string(awaitFile(t, filepath.Join(spec.WorkspacePath, "child-pid"))))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(context.Background(), spec.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, spec.Handle, service.LivenessExited)
	// The harness went at SIGTERM; its child ignores SIGTERM and must go at
	// the grace's SIGKILL.
	awaitGone(t, child)
}

// countLeaders counts the process group leaders whose environment names
// handle's token file: the harnesses started for it.
func countLeaders(t *testing.T, r *Runtime, handle string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte("\x00" + contract.EnvWorkerTokenFile + "=" + r.tokenFile(handle) + "\x00")
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if info, ok := procStat(pid); err == nil && ok && info.pgid == pid && bytes.Contains(append([]byte{0}, b...), needle) {
			n++
		}
	}
	return n
}

func TestConcurrentStartsOneProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	r := newRuntime(t, "")
	spec := fakeSpec(r, "w-once", "run")
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			if err := r.Start(context.Background(), spec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Start returns after exec, so every process it made is visible now.
	if n := countLeaders(t, r, spec.Handle); n != 1 {
		t.Errorf("%d harness processes for one handle, want 1", n)
	}
}

func TestFailedStartCanBeRetried(t *testing.T) {
	harness := filepath.Join(t.TempDir(), "harness")
	copyFile(t, fakeHarness, harness)
	r := newRuntime(t, "", WithHarness(harness))
	spec := fakeSpec(r, "w-retry", "run")
	if err := os.Remove(harness); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), spec); err == nil {
		t.Fatal("Start with a missing harness succeeded")
	}
	if l, err := r.Liveness(context.Background(), spec.Handle); err != nil || l != service.LivenessUnknown {
		t.Errorf("Liveness after a failed start = %d, %v; want unknown: nothing started", l, err)
	}
	copyFile(t, fakeHarness, harness)
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatalf("retried Start: %v", err)
	}
	awaitLiveness(t, r, spec.Handle, service.LivenessLive)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// A closed Runtime leaves its workers running, and another Runtime on the
// same directory (a restarted server) sees and stops them.
func TestNewRuntimeStopsWorkersOfAClosedOne(t *testing.T) {
	dir := t.TempDir()
	a := newRuntime(t, dir)
	spec := fakeSpec(a, "w-handover", "run")
	if err := a.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, spec.WorkspacePath)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if gone(rec.Pid) {
		t.Fatal("Close stopped the worker")
	}
	b := newRuntime(t, dir)
	if l, err := b.Liveness(context.Background(), spec.Handle); err != nil || l != service.LivenessLive {
		t.Fatalf("Liveness on the new runtime = %d, %v; want live", l, err)
	}
	if err := b.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(context.Background(), spec.Handle); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, b, spec.Handle, service.LivenessExited)
	awaitGone(t, rec.Pid)
	if n := starts(b, spec.Handle); n != 1 {
		t.Errorf("%d starts, want 1", n)
	}
}

// startKilledServer runs the test binary as a galley server (serveForTest)
// in mode, waits until it says ready, and kills it with SIGKILL.
func startKilledServer(t *testing.T, dir, mode string) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serverDirEnv+"="+dir, serverModeEnv+"="+mode, serverHarnessEnv+"="+fakeHarness)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("server said %q (%v), want ready", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// serveForTest is the killed server: it starts one worker, w-orphan, and
// for mode stop-pending also stops it with an hour's grace, which its
// stubborn harness sits out.
func serveForTest() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "test server:", err)
		os.Exit(1)
	}
	mode := os.Getenv(serverModeEnv)
	grace, harnessMode := DefaultGrace, "run"
	if mode == "stop-pending" {
		grace, harnessMode = time.Hour, "stubborn"
	}
	r, err := New(WithDir(os.Getenv(serverDirEnv)), WithHarness(os.Getenv(serverHarnessEnv)),
		WithEndpoint(testEndpoint), WithGrace(grace))
	if err != nil {
		fail(err)
	}
	spec := fakeSpec(r, "w-orphan", harnessMode)
	if err := r.Start(context.Background(), spec); err != nil {
		fail(err)
	}
	if mode == "stop-pending" {
		// Wait until the harness handles SIGTERM, so that it sits out the
		// grace.
		for {
			if _, err := os.Stat(filepath.Join(spec.WorkspacePath, "starts")); err == nil {
				break
			}
			time.Sleep(pollStep)
		}
		if err := r.Stop(context.Background(), spec.Handle); err != nil {
			fail(err)
		}
	}
	fmt.Println("ready")
	select {}
}

func TestKilledServerWorkerIsStopped(t *testing.T) {
	dir := t.TempDir()
	startKilledServer(t, dir, "start")
	r := newRuntime(t, dir)
	rec := awaitRecord(t, filepath.Join(r.WorkspacesDir(), "w-orphan"))
	if l, err := r.Liveness(context.Background(), "w-orphan"); err != nil || l != service.LivenessLive {
		t.Fatalf("Liveness of the orphan = %d, %v; want live", l, err)
	}
	if err := r.Stop(context.Background(), "w-orphan"); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, "w-orphan", service.LivenessExited)
	awaitGone(t, rec.Pid)
}

// fixedClock is a clock that reads one time.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// A stop whose server died during the grace is finished by the next
// Runtime, at the recorded deadline: here long past, by its clock.
func TestKilledServerPendingStopIsFinished(t *testing.T) {
	dir := t.TempDir()
	startKilledServer(t, dir, "stop-pending")
	ws := filepath.Join(dir, "workspaces", "w-orphan")
	rec := awaitRecord(t, ws)
	awaitFile(t, filepath.Join(ws, "sigterm-"+strconv.Itoa(rec.Pid)))
	if gone(rec.Pid) {
		t.Fatal("the stubborn harness ended at SIGTERM")
	}
	r := newRuntime(t, dir, WithClock(fixedClock(time.Now().Add(2*time.Hour))))
	awaitGone(t, rec.Pid)
	awaitLiveness(t, r, "w-orphan", service.LivenessExited)
}

// A server that died between starting a harness and writing its pid file
// leaves a claimed folder without a pid: the next Runtime finds the harness
// by its environment.
func TestUnrecordedWorkerIsFound(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the harness through /proc")
	}
	r := newRuntime(t, "")
	spec := fakeSpec(r, "w-unrecorded", "run")
	if err := os.Mkdir(r.workerDir(spec.Handle), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeNew(r.tokenFile(spec.Handle), []byte(spec.Token)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(fakeHarness)
	cmd.Env = r.harnessEnv(spec.Handle, r.tokenFile(spec.Handle), spec.WorkspacePath, spec.Branch)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	awaitRecord(t, spec.WorkspacePath)

	if l, err := r.Liveness(context.Background(), spec.Handle); err != nil || l != service.LivenessLive {
		t.Fatalf("Liveness = %d, %v; want live", l, err)
	}
	if b, _ := os.ReadFile(r.pidFile(spec.Handle)); strings.TrimSpace(string(b)) != strconv.Itoa(cmd.Process.Pid) {
		t.Errorf("pid file %q, want %d", b, cmd.Process.Pid)
	}
	if err := r.Stop(context.Background(), spec.Handle); err != nil {
		t.Fatal(err)
	}
	<-exited
	awaitLiveness(t, r, spec.Handle, service.LivenessExited)
}

// A server killed between claiming a worker's folder and spawning its
// harness leaves the folder (perhaps with the token and meta files spawn
// writes first) and nothing running. The fault test's SIGKILL found it: the
// retried launch's Start found the folder, did nothing, and its worker
// stayed starting for ever. It reads exited until a Start (the retried
// launch's) finishes the start; once finished, it starts no more.
func TestInterruptedStartIsFinished(t *testing.T) {
	for _, left := range []string{"the claim alone", "the claim, token and meta"} {
		t.Run(left, func(t *testing.T) {
			r := newRuntime(t, "")
			spec := fakeSpec(r, "w-interrupted", "run")
			if err := os.Mkdir(r.workerDir(spec.Handle), 0o700); err != nil {
				t.Fatal(err)
			}
			if left != "the claim alone" {
				if err := writeNew(r.tokenFile(spec.Handle), []byte(spec.Token)); err != nil {
					t.Fatal(err)
				}
				if err := writeNew(filepath.Join(r.workerDir(spec.Handle), "meta.json"), []byte("{}\n")); err != nil {
					t.Fatal(err)
				}
			}
			if l, err := r.Liveness(context.Background(), spec.Handle); err != nil || l != service.LivenessExited {
				t.Errorf("Liveness before the retried Start = %d, %v; want exited", l, err)
			}
			if err := r.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			awaitRecord(t, spec.WorkspacePath)
			awaitLiveness(t, r, spec.Handle, service.LivenessLive)
			if err := r.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			if runtime.GOOS == "linux" {
				if n := countLeaders(t, r, spec.Handle); n != 1 {
					t.Errorf("%d harness processes for one handle, want 1", n)
				}
			}
			if n := starts(r, spec.Handle); n != 1 {
				t.Errorf("the harness started %d times, want 1", n)
			}
		})
	}
}

// A claimed folder whose harness was spawned (its start time recorded) and
// has ended, or whose worker a stop was asked for, is never started again.
func TestEndedOrStoppedClaimIsNotStarted(t *testing.T) {
	for _, file := range []string{"pidstart", "stop"} {
		t.Run(file, func(t *testing.T) {
			r := newRuntime(t, "")
			spec := fakeSpec(r, "w-claimed", "run")
			if err := os.Mkdir(r.workerDir(spec.Handle), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(r.workerDir(spec.Handle), file), []byte("1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := r.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(r.pidFile(spec.Handle)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Start started the worker: pid file %v", err)
			}
			if n := starts(r, spec.Handle); n != 0 {
				t.Errorf("the harness started %d times, want 0", n)
			}
		})
	}
}

// A pid file whose process was replaced by another (same pid, another start
// time) is not that worker: it reads exited, and Stop leaves it alone.
func TestPidReuseIsNoticed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("start times come from /proc")
	}
	r := newRuntime(t, "")
	// The stranger: a process that is no worker of r.
	ws := t.TempDir()
	cmd := exec.Command(fakeHarness)
	cmd.Env = []string{"GALLEY_WORKSPACE=" + ws, "GALLEY_BRANCH=x/run"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	awaitFile(t, filepath.Join(ws, "starts"))

	const h = "w-reused"
	if err := os.Mkdir(r.workerDir(h), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"pidstart": "1\n", "pid": strconv.Itoa(cmd.Process.Pid) + "\n"} {
		if err := os.WriteFile(filepath.Join(r.workerDir(h), name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := r.Liveness(context.Background(), h); err != nil || l != service.LivenessExited {
		t.Errorf("Liveness = %d, %v; want exited", l, err)
	}
	if err := r.Stop(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.stopFile(h)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stop went for the stranger: stop file %v", err)
	}
	select {
	case <-exited:
		t.Error("the stranger ended")
	default:
	}
}

func TestStartAfterClose(t *testing.T) {
	r := newRuntime(t, "")
	r.Close()
	if err := r.Start(context.Background(), fakeSpec(r, "w-closed", "run")); !galleyerr.Is(galleyerr.Unavailable, err) {
		t.Errorf("Start after Close = %v, want unavailable", err)
	}
}

// TestConfinementChosen: the runtime tells each harness the confinement it
// chose, and as root (which can switch users) the data folder is opened to
// traversal only while its other entries are closed to other users.
func TestConfinementChosen(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "worker-secret")
	if err := os.WriteFile(secret, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, dir)
	e := r.Confinement()
	if e.Mode == "" {
		t.Fatal("no confinement chosen")
	}
	spec := fakeSpec(r, "w-conf", "run")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	rec := awaitRecord(t, spec.WorkspacePath)
	if !slices.Contains(rec.Env, contract.EnvAgentConfine+"="+string(e.Mode)) {
		t.Errorf("the harness was not told %s=%s: %v", contract.EnvAgentConfine, e.Mode, rec.Env)
	}
	if ok, _ := harness.CanSwitchUser(); ok {
		for path, want := range map[string]os.FileMode{dir: 0o711, r.WorkspacesDir(): 0o711, secret: 0o600} {
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
				t.Errorf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), want, err)
			}
		}
	}
}

// A harness a killed server started, which ends later without a report, is
// noticed by the next server's runtime (WatchInherited), once: its exit
// callback fires, and a runtime after that one does not call it again.
func TestInheritedHarnessExitIsNoticed(t *testing.T) {
	dir := t.TempDir()
	startKilledServer(t, dir, "start")
	exits := make(chan string, 4)
	r := newRuntime(t, dir, WithOnExit(func(h string) { exits <- h }))
	rec := awaitRecord(t, filepath.Join(r.WorkspacesDir(), "w-orphan"))
	r.WatchInherited(20 * time.Millisecond)
	select {
	case h := <-exits:
		t.Fatalf("exit of %s noticed while its harness runs", h)
	case <-time.After(200 * time.Millisecond):
	}
	if err := syscall.Kill(-rec.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-exits:
		if h != "w-orphan" {
			t.Fatalf("exit noticed for %s", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the inherited harness's exit was never noticed")
	}
	r.Close()
	again := newRuntime(t, dir, WithOnExit(func(h string) { exits <- h }))
	again.WatchInherited(20 * time.Millisecond)
	select {
	case h := <-exits:
		t.Fatalf("exit of %s noticed a second time", h)
	case <-time.After(300 * time.Millisecond):
	}
}
