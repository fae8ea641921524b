package drive

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// GalleyServer runs `galley serve` as a process of its own on a fixed
// address and data directory, so a takeover run can kill it with SIGKILL
// and start it again on the same data, as a crashed host would be.
type GalleyServer struct {
	Bin    string   // the galley binary (galley-worker beside it)
	Listen string   // host:port on loopback, the same for every start
	Data   string   // the data directory, the same for every start
	Args   []string // more flags after `serve --listen --data`
	Env    []string // the process's environment (default this one's)

	mu     sync.Mutex
	cmd    *exec.Cmd
	out    *lockedBuffer
	errOut *lockedBuffer
	exited chan struct{}
	// Outputs keeps what each incarnation printed on stdout (the AWS fault
	// counts come there at shutdown), and Logs what it wrote on stderr (its
	// JSON log, the counts' log line among it), one entry per incarnation
	// that ended, in order.
	Outputs []string
	Logs    []string
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start starts an incarnation with args in place of Args when args is not
// nil, and waits until it prints its endpoint.
func (g *GalleyServer) Start(args []string) (endpoint string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd != nil {
		return "", errors.New("galley serve is already running")
	}
	if args == nil {
		args = g.Args
	}
	full := append([]string{"serve", "--listen", g.Listen, "--data", g.Data}, args...)
	cmd := exec.Command(g.Bin, full...)
	cmd.Env = g.Env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("galley serve: %w", err)
	}
	out := &lockedBuffer{}
	found := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(out, line)
			if i := strings.Index(line, " at http://"); i >= 0 && strings.HasPrefix(line, "galley serving") {
				select {
				case found <- strings.TrimSpace(line[i+len(" at "):]):
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case ep := <-found:
		g.cmd, g.out, g.errOut, g.exited = cmd, out, stderr, exited
		return ep, nil
	case <-exited:
		return "", fmt.Errorf("galley serve exited at start: %s", lastLines(stderr.String(), 5))
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return "", errors.New("galley serve did not print its endpoint within 60 s")
	}
}

// Kill ends the running incarnation with SIGKILL: nothing it held is
// released or finished.
func (g *GalleyServer) Kill() { g.end(syscall.SIGKILL) }

// Stop ends the running incarnation with SIGTERM (it finishes the calls
// in progress and logs its AWS fault counts).
func (g *GalleyServer) Stop() { g.end(syscall.SIGTERM) }

func (g *GalleyServer) end(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.exited:
	case <-time.After(45 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
	g.Outputs = append(g.Outputs, g.out.String())
	g.Logs = append(g.Logs, g.errOut.String())
	g.cmd = nil
}

// KillWorkers ends every worker process group the server started under
// its data directory (they outlive the server by design), and waits a few
// seconds for them to be gone.
func (g *GalleyServer) KillWorkers() {
	pids, _ := filepath.Glob(filepath.Join(g.Data, "workers", "*", "pid"))
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

// WithoutFaults is args without --inject-aws-faults and its value.
func WithoutFaults(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--inject-aws-faults" || a == "-inject-aws-faults":
			i++
		case strings.HasPrefix(a, "--inject-aws-faults=") || strings.HasPrefix(a, "-inject-aws-faults="):
		default:
			out = append(out, a)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

var _ io.Writer = (*lockedBuffer)(nil)
