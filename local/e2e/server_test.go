package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol/client"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "galley-e2e-bin")
	if err != nil {
		panic(err)
	}
	for _, pkg := range []string{"./cmd/galley", "./cmd/galley-worker", "./local/cmd/galley-dev"} {
		cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/galley-run/galley/"+strings.TrimPrefix(pkg, "./"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", pkg, err)
			os.Exit(1)
		}
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one `galley serve` process.
type server struct {
	cmd      *exec.Cmd
	Endpoint string
	Token    string
	Data     string
	Env      serveEnv // what it got over the test process's environment
	stderr   *bytes.Buffer
}

func startServer(t *testing.T, data string, flags ...string) *server {
	t.Helper()
	return startServerEnv(t, nil, data, flags...)
}

// serveEnv is what one galley serve (and so its workers) gets in its
// environment over the test process's own: a home, the stand-in CLIs on
// PATH, the provider keys. It is given per server, not by t.Setenv, so
// that tests run in parallel.
type serveEnv map[string]string

// environ is the test process's environment with env's values in place.
func (env serveEnv) environ() []string {
	if env == nil {
		return nil // exec: the process's own
	}
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); env[k] == "" {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// withStandinCLIs is env with the stand-in CLIs first on PATH.
func withStandinCLIs(t *testing.T, env serveEnv) serveEnv {
	env["PATH"] = standins(t) + string(os.PathListSeparator) + os.Getenv("PATH")
	return env
}

func startServerEnv(t *testing.T, env serveEnv, data string, flags ...string) *server {
	t.Helper()
	s, err := tryStartServer(t, env, data, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// restartServer starts galley serve again on the address a stopped server
// listened on (its workers call back there). For a moment after the kill
// another program can hold that port (an outgoing connection takes its
// port from the same range), so it tries again for a while; a port that
// stays taken fails the test.
func restartServer(t *testing.T, data, addr string, flags ...string) *server {
	t.Helper()
	flags = append([]string{"--listen", addr}, flags...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := tryStartServer(t, nil, data, flags...)
		if err == nil {
			return s
		}
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// serverOn starts galley serve on *addr, or, when *addr is empty, on a
// port it binds itself, and keeps that address in *addr for the restarts.
func serverOn(t *testing.T, data string, addr *string, flags ...string) *server {
	t.Helper()
	if *addr != "" {
		return restartServer(t, data, *addr, flags...)
	}
	s := startServer(t, data, flags...)
	*addr = strings.TrimPrefix(s.Endpoint, "http://")
	return s
}

func tryStartServer(t *testing.T, env serveEnv, data string, flags ...string) (*server, error) {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data, "--house", "origin89",
		"--backend", "galley", "--default-agent", "script"}, flags...)
	cmd := exec.Command(filepath.Join(binDir, serveBinary(flags)), args...)
	cmd.Env = env.environ()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, Data: data, Env: env, stderr: &stderr}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for s.Endpoint == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				return nil, fmt.Errorf("galley serve exited: %s", stderr.String())
			}
			if i := strings.Index(line, " at http://"); i >= 0 && strings.HasPrefix(line, "galley serving") {
				s.Endpoint = strings.TrimSpace(line[i+len(" at "):])
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			return nil, fmt.Errorf("galley serve did not print its endpoint")
		}
	}
	go func() {
		for range lines {
		}
	}()
	tok, err := os.ReadFile(filepath.Join(data, "private", "token"))
	if err != nil {
		s.kill()
		return nil, err
	}
	s.Token = strings.TrimSpace(string(tok))
	t.Cleanup(func() {
		s.stop(t)
		killWorkers(data)
		keepOnFailure(t, s)
	})
	return s, nil
}

// keepOnFailure copies a failed test's server log and data directory
// (the store, each worker's harness log; no credential) under
// GALLEY_E2E_KEEP, for a closer look at a failure that does not come back
// on demand.
func keepOnFailure(t *testing.T, s *server) {
	root := os.Getenv("GALLEY_E2E_KEEP")
	if root == "" || !t.Failed() {
		return
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Logf("keep: %v", err)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("server-%d.log", s.cmd.Process.Pid)), s.stderr.Bytes(), 0o600)
	// Every incarnation keeps its log; the data once, by the last one
	// stopped (cleanups run last first).
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		return
	}
	kept := filepath.Join(dir, "data")
	if out, err := exec.Command("cp", "-a", s.Data, kept).CombinedOutput(); err != nil {
		t.Logf("keep: copy %s: %v %s", s.Data, err, out)
	}
	// No credential is kept: kitchn's token, the operator token, the worker secret, the
	// workers' tokens.
	secrets, _ := filepath.Glob(filepath.Join(kept, "workers", "*", "token"))
	for _, f := range append(secrets, filepath.Join(kept, "private", "token"), filepath.Join(kept, "private", "operator-token"), filepath.Join(kept, "private", "worker-secret")) {
		_ = os.Remove(f)
	}
	t.Logf("kept the server log and data under %s", dir)
}

// stop ends the server with SIGTERM and checks it shut down cleanly.
func (s *server) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("galley serve exited with %v: %s", err, s.stderr.String())
		}
	case <-time.After(40 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Error("galley serve did not stop on SIGTERM")
	}
}

// serveBinary is the binary that serves with flags: the development
// binary, galley-dev, for the fault flag (the product does not link the
// fault injector), else the product's galley.
func serveBinary(flags []string) string {
	for _, f := range flags {
		if f == "--inject-aws-faults" || strings.HasPrefix(f, "--inject-aws-faults=") {
			return "galley-dev"
		}
	}
	return "galley"
}

// kill ends the server with SIGKILL, in the middle of whatever it does.
func (s *server) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// call makes one call of method and path as kitchn's client does and
// returns the status and body (kitchn).
func (s *server) call(t *testing.T, method, path string, body any, header ...string) (int, []byte) {
	t.Helper()
	return s.kitchn(t, contract.Route{Method: method, Path: path}, body, header...)
}

// kitchn makes one call of route as kitchn's client does (package client)
// and returns the status and body. body is a string, bytes, or a value to
// encode; header may name the Idempotency-Key.
func (s *server) kitchn(t *testing.T, route contract.Route, body any, header ...string) (int, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		j, err := client.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		raw = j
	}
	var key string
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] != "Idempotency-Key" {
			t.Fatalf("kitchn sends no header %s", header[i])
		}
		key = header[i+1]
	}
	a, err := client.New(s.Endpoint, s.Token, client.WithTimeout(30*time.Second)).Call(context.Background(), route, raw, key, 0)
	if err != nil {
		t.Fatalf("%s: %v", route.Pattern(), err)
	}
	return a.Status, a.Body
}

// killWorkers ends every worker process group a test's server started
// under data: workers outlive their server by design (a restarted server
// finds them), so a test must end them itself.
func killWorkers(data string) {
	pids, _ := filepath.Glob(filepath.Join(data, "workers", "*", "pid"))
	var groups []int
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			groups = append(groups, pid)
		}
	}
	// A killed process still writes until it is gone (a clone in
	// progress): wait for every group to end before the test's folders
	// are removed, a few seconds at most.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		alive := false
		for _, pid := range groups {
			alive = alive || syscall.Kill(-pid, 0) == nil
		}
		if !alive {
			return
		}
	}
}
