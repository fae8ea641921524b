package awslocal_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/ecsstandin"
)

// The adversarial test's helpers for the container shape: where a worker
// task's files are on the host and in its container, what its processes
// hold, and what a refusal from the stack's network looks like.

// workerTask waits for the ECS stand-in's task of a worker, launched, with
// its worktree.
func workerTask(t *testing.T, s *awslocal.Stack, handle string) ecsstandin.TaskInfo {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, task := range s.ECS().Tasks() {
			if task.Env["GALLEY_WORKER_HANDLE"] == handle && task.Workspace != "" {
				return task
			}
		}
	}
	t.Fatalf("no task for worker %s", handle)
	return ecsstandin.TaskInfo{}
}

// processEnv reads (as root, for the test alone: no value is logged) the
// environment of the process that a container knows as pid ctrPid and
// that works in the worktree at hostWS: a process of that worktree's
// container, found by its pid in its own namespace (NSpid) and its
// working folder.
func processEnv(t *testing.T, ctrPid int, hostWS string) map[string]string {
	t.Helper()
	ws, err := os.Stat(hostWS)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var nspid []string
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid = strings.Fields(v)
			}
		}
		if len(nspid) < 2 || nspid[len(nspid)-1] != strconv.Itoa(ctrPid) {
			continue
		}
		cwd, err := os.Stat("/proc/" + e.Name() + "/cwd")
		if err != nil || !os.SameFile(cwd, ws) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			t.Fatalf("reading the environment of process %s: %v", e.Name(), err)
		}
		out := map[string]string{}
		for _, kv := range strings.Split(string(env), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
		return out
	}
	t.Fatalf("no process is pid %d of the container working in %s", ctrPid, hostWS)
	return nil
}

// hangingPid reads the pid of a "hanging pid <pid> child <pid>" status.
func hangingPid(t *testing.T, body string) int {
	t.Helper()
	var pid, child int
	if _, err := fmt.Sscanf(body, "hanging pid %d child %d", &pid, &child); err != nil {
		t.Fatalf("the hang status %q: %v", body, err)
	}
	return pid
}

// startDNSRelay relays DNS over UDP and TCP from a port of ip to the
// server at upstream, until the test ends, and returns its address: the
// house's DNS server (which listens on loopback) served where a worker
// container would reach it if the stack's network let it.
func startDNSRelay(t *testing.T, ip net.IP, upstream string) string {
	t.Helper()
	var udp net.PacketConn
	var tcp net.Listener
	var err error
	for range 20 {
		if udp, err = net.ListenPacket("udp", net.JoinHostPort(ip.String(), "0")); err != nil {
			t.Fatal(err)
		}
		if tcp, err = net.Listen("tcp", udp.LocalAddr().String()); err == nil {
			break
		}
		udp.Close()
	}
	if err != nil {
		t.Fatalf("no port of %s free for UDP and TCP: %v", ip, err)
	}
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			q := append([]byte(nil), buf[:n]...)
			go func() {
				c, err := net.Dial("udp", upstream)
				if err != nil {
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(q); err != nil {
					return
				}
				a := make([]byte, 64<<10)
				if n, err := c.Read(a); err == nil {
					_, _ = udp.WriteTo(a[:n], from)
				}
			}()
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer u.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				_ = u.SetDeadline(time.Now().Add(10 * time.Second))
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return udp.LocalAddr().String()
}

// lookupVia resolves name through the DNS server at server over network
// (udp or tcp).
func lookupVia(server, network, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		return d.DialContext(ctx, network, server)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	return r.LookupHost(ctx, name)
}

// setEnv sets name to value in a container definition's environment,
// replacing an entry of that name.
func setEnv(c map[string]any, name string, value any) {
	env, _ := c["Environment"].([]any)
	for _, kv := range env {
		if kv, ok := kv.(map[string]any); ok && kv["Name"] == name {
			kv["Value"] = value
			return
		}
	}
	c["Environment"] = append(env, map[string]any{"Name": name, "Value": value})
}

// envOf is the value a container definition's environment gives name, or
// nil.
func envOf(c map[string]any, name string) any {
	env, _ := c["Environment"].([]any)
	for _, kv := range env {
		if kv, ok := kv.(map[string]any); ok && kv["Name"] == name {
			return kv["Value"]
		}
	}
	return nil
}

// refusals are the "<addr>: <why>" parts of a dial verdict's refusals
// ("attack <name>: blocked (<addr>: <why>; ...)"), by address.
func refusals(v string, addrs []string) map[string]string {
	out := map[string]string{}
	if _, rest, ok := strings.Cut(v, ": blocked ("); ok {
		v = strings.TrimSuffix(rest, ")")
	}
	for _, part := range strings.Split(v, "; ") {
		for _, a := range addrs {
			if why, ok := strings.CutPrefix(part, a+": "); ok {
				out[a] = why
			}
		}
	}
	return out
}
