package localserver

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
)

// TestMain lets the test binary act as the flooding agent (floodMain) or
// as an agent probing galley's secrets (probeMain).
func TestMain(m *testing.M) {
	if spec := os.Getenv("GALLEY_TEST_PROBE"); spec != "" {
		probeMain(spec)
		return
	}
	if addr := os.Getenv("GALLEY_TEST_FLOOD"); addr != "" {
		floodMain(addr)
		return
	}
	os.Exit(m.Run())
}

// floodMain opens idle and half-sent connections to addr until told to
// stop (its stdin closes), reopening those galley closes, and prints how
// many it made once it has made its first N.
func floodMain(addr string) {
	n, _ := strconv.Atoi(os.Getenv("GALLEY_TEST_FLOOD_N"))
	made := 0
	stop := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stop) }()
	var held []net.Conn
	for {
		select {
		case <-stop:
			for _, c := range held {
				c.Close()
			}
			return
		default:
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		if made%2 == 1 {
			_, _ = io.WriteString(c, "GET /v1/descriptor HTTP/1.1\r\nHost: galley\r\n") // headers that never end
		}
		held = append(held, c)
		if made++; made == n {
			fmt.Println("flooded", made)
		}
	}
}

// agentCopy is this test binary where another uid may run it (go test's
// build folder is its owner's only).
func agentCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "galley-flood-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	exe := filepath.Join(dir, "agent")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting descriptors: %v", err)
	}
	return len(ents)
}

// An agent under a uid of its own floods galley's port with idle and
// half-sent connections (issue 21, item 4) while kitchn calls as its
// client does, a new connection per call: galley holds at most the
// per-peer bound of the agent's connections, every kitchn call succeeds,
// and once the flood ends galley's descriptors are back where they were.
func TestConnectionFloodLeavesKitchnServed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to flood from another uid as a confined agent does")
	}
	const perPeer, flood = 64, 3000
	srv := startLimited(t, Options{Conns: connlimit.Limits{PerPeer: perPeer, Total: 2 * perPeer},
		Logger: slog.New(slog.DiscardHandler)})
	tok := token(t, srv)
	kitchn := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	call := func() error {
		req, _ := http.NewRequest("GET", srv.Endpoint+"/v1/descriptor", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := kitchn.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)

	exe := agentCopy(t)
	agent := exec.Command(exe)
	agent.Env = []string{"GALLEY_TEST_FLOOD=" + srv.listener.Addr().String(), "GALLEY_TEST_FLOOD_N=" + strconv.Itoa(flood)}
	agent.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	agent.Stderr = os.Stderr
	stdin, _ := agent.StdinPipe()
	stdout, _ := agent.StdoutPipe()
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Wait()
	defer stdin.Close()
	flooded := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		flooded <- strings.TrimSpace(line)
	}()

	calls, failures := 0, 0
	for done := false; !done || calls < 50; calls++ {
		if err := call(); err != nil {
			failures++
			t.Errorf("kitchn's call %d failed during the flood: %v", calls, err)
		}
		select {
		case line := <-flooded:
			if line == "" {
				t.Fatal("the flooding agent ended early")
			}
			done = true
		default:
		}
	}
	// The flood goes on while kitchn calls 50 more times.
	for i := range 50 {
		if err := call(); err != nil {
			t.Errorf("kitchn's call %d failed during the flood: %v", calls+i, err)
		}
	}
	st := srv.ConnStats()
	t.Logf("flood: %d kitchn calls, %d failed; galley accepted %d, evicted %d, refused %d, held at most %d",
		calls+50, failures, st.Accepted, st.Evicted, st.Refused, st.MaxOpen)
	if st.Accepted < flood {
		t.Fatalf("galley accepted %d connections: the flood of %d did not happen", st.Accepted, flood)
	}
	if st.MaxOpen > perPeer+1 { // the flood's share, and kitchn's call in flight
		t.Fatalf("galley held %d connections, the agent's bound %d", st.MaxOpen, perPeer)
	}

	stdin.Close()
	if err := agent.Wait(); err != nil {
		t.Fatalf("the flooding agent: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for srv.ConnStats().Open > 0 || openFDs(t) > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("after the flood: %d connections held, %d descriptors open (before: %d)",
				srv.ConnStats().Open, openFDs(t), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
