package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// EmulatorConfig says how to run one function under the Runtime Interface
// Emulator.
type EmulatorConfig struct {
	RIE       string // the aws-lambda-rie binary
	Bootstrap string // the function, built for the emulator's platform
	// Env is the function's environment; the emulator passes its own to the
	// function, and gets only this (plus PATH, HOME and TMPDIR), so nothing
	// else of the caller's environment reaches a function.
	Env []string
	// Timeout is the function's timeout (AWS_LAMBDA_FUNCTION_TIMEOUT).
	Timeout time.Duration
	// Name is the function's name (AWS_LAMBDA_FUNCTION_NAME).
	Name string
	// Output receives the emulator's and the function's output.
	Output io.Writer
}

// EmulatorProcess is a running emulator with its function.
type EmulatorProcess struct {
	*Emulator
	cmd  *exec.Cmd
	done chan struct{}
	err  error

	closeOnce sync.Once
}

// StartEmulator starts the emulator on two free loopback ports (always
// both addresses: the emulator otherwise listens on 0.0.0.0:8080) and
// returns once it is the one listening on its port (another program can
// take a port picked free before the emulator binds it; then it tries
// again on other ports). The function itself starts on the
// first invocation: that is the cold start.
func StartEmulator(ctx context.Context, c EmulatorConfig) (*EmulatorProcess, error) {
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
	boot, err := filepath.Abs(c.Bootstrap)
	if err != nil {
		return nil, err
	}
	for attempt := 0; ; attempt++ {
		p, err := startEmulator(ctx, c, boot)
		if err == nil || attempt == 3 || ctx.Err() != nil {
			return p, err
		}
	}
}

func startEmulator(ctx context.Context, c EmulatorConfig, boot string) (*EmulatorProcess, error) {
	apiPort, err := freePort()
	if err != nil {
		return nil, err
	}
	rtPort, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(apiPort)
	cmd := exec.Command(c.RIE,
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(rtPort),
		boot)
	cmd.Dir = filepath.Dir(boot)
	env := []string{"AWS_LAMBDA_FUNCTION_TIMEOUT=" + strconv.Itoa(int(c.Timeout.Round(time.Second)/time.Second))}
	if c.Name != "" {
		env = append(env, "AWS_LAMBDA_FUNCTION_NAME="+c.Name)
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	cmd.Env = append(env, c.Env...)
	out := c.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	setGroup(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", c.RIE, err)
	}
	p := &EmulatorProcess{cmd: cmd, done: make(chan struct{}),
		Emulator: &Emulator{URL: "http://" + addr, Client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}},
			MaxDuration: c.Timeout + 10*time.Second}}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ours, err := listensOn(cmd.Process.Pid, apiPort); err == nil && ours {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("the emulator exited before it listened: %v", p.err)
		case <-ctx.Done():
			p.Close()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Close()
			return nil, fmt.Errorf("the emulator did not listen on %s within 10 s", addr)
		}
	}
}

// Close stops the emulator and its function (the whole process group):
// SIGTERM, then SIGKILL after two seconds.
func (p *EmulatorProcess) Close() error {
	p.closeOnce.Do(func() {
		signalGroup(p.cmd, false)
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
			signalGroup(p.cmd, true)
			<-p.done
		}
	})
	return nil
}

// Done is closed when the emulator has exited.
func (p *EmulatorProcess) Done() <-chan struct{} { return p.done }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
