package harness_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// mcpClient plays a hostile agent at its harness's MCP server, with the URL
// and secret it finds in its own environment, speaking raw HTTP.
type mcpClient struct {
	url, secret string
	hc          *http.Client
	dial        func(addr string) (net.Conn, error) // from the agent's network
}

// mcpOf starts a harness (a galley-worker process) with an idle scripted
// agent and the given settings, and finds its MCP server in the agent's
// environment.
func mcpOf(t *testing.T, ctx context.Context, env ...string) (*proc, *fakeapi.Server, *mcpClient) {
	t.Helper()
	f := newFake(t, "Idle until stopped.")
	p := startHarness(t, f, procOpts{env: env})
	waitFor(t, ctx, f, "ready", func(s fakeapi.Snapshot) bool { return s.Count(workerapi.PathReady) > 0 })
	pid := p.agentPID(t)
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	// Its connections are made where the agent is: in its network.
	dial := func(addr string) (net.Conn, error) { return dialIn(pid, addr) }
	c := &mcpClient{dial: dial, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64,
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return dial(addr) }}}}
	for _, kv := range strings.Split(string(environ), "\x00") {
		if v, ok := strings.CutPrefix(kv, contract.EnvMCPURL+"="); ok {
			c.url = v
		}
		if v, ok := strings.CutPrefix(kv, contract.EnvMCPSecret+"="); ok {
			c.secret = v
		}
	}
	if c.url == "" || c.secret == "" {
		t.Fatal("no MCP server in the agent's environment")
	}
	t.Cleanup(func() {
		f.Settle(protocol.OutcomeCancelled)
		p.wait(t, ctx)
	})
	return p, f, c
}

// post sends one JSON-RPC message (in session, when not "") and returns
// the status, the session the answer names, and its body.
func (c *mcpClient) post(ctx context.Context, session, msg string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(msg))
	if err != nil {
		return 0, "", "", err
	}
	c.headers(req, session)
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b), nil
}

func (c *mcpClient) headers(req *http.Request, session string) {
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`

// open makes an initialized session.
func (c *mcpClient) open(t *testing.T, ctx context.Context) string {
	t.Helper()
	status, id, body, err := c.post(ctx, "", initialize)
	if err != nil || status != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %v %.200s", status, err, body)
	}
	if status, _, body, err := c.post(ctx, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil || status != http.StatusAccepted {
		t.Fatalf("initialized: %d %v %.200s", status, err, body)
	}
	return id
}

// alive reports whether session still answers a ping.
func (c *mcpClient) alive(t *testing.T, ctx context.Context, session string) bool {
	t.Helper()
	status, _, body, err := c.post(ctx, session, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	switch {
	case err != nil:
		t.Fatal(err)
	case status == http.StatusOK:
		return true
	case status != http.StatusNotFound:
		t.Fatalf("ping: %d %.200s", status, body)
	}
	return false
}

// memory reads a process's resident set and its peak, in bytes.
func memory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		for name, to := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if v, ok := strings.CutPrefix(line, name); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				*to = kb << 10
			}
		}
	}
	return rss, peak
}

// rawPost starts a POST on a connection of its own, declaring length bytes
// of body, and sends first of them; answer gives the status line the
// server answers, whenever it does.
func (c *mcpClient) rawPost(t *testing.T, length int, first string) (net.Conn, <-chan string) {
	t.Helper()
	return c.rawPostAs(t, c.secret, length, first)
}

// rawPostAs is rawPost with secret as the bearer.
func (c *mcpClient) rawPostAs(t *testing.T, secret string, length int, first string) (net.Conn, <-chan string) {
	t.Helper()
	u, err := url.Parse(c.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.dial(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", u.Path, u.Host, secret, length, first)
	answer := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answer <- "no answer: " + err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		answer <- resp.Status + " " + string(b)
	}()
	return conn, answer
}

// mcpFloodPeak bounds how much the harness's peak resident memory may grow
// through TestMCPFloodWithinBudget's floods (docs/security.md, "Budgets").
const mcpFloodPeak = 64 << 20

// TestMCPFloodWithinBudget (issue 28, item 6) floods a real harness's MCP
// server as a hostile agent would, from outside its process: sessions
// opened and never closed, sessions each holding a request, bodies sent a
// byte a second, bodies over the limit, the largest bodies allowed, in
// numbers. The live sessions stay at their bound, every refused request is
// answered with its status and a reason the agent can read, and the
// harness's peak memory grows by less than mcpFloodPeak. Before, the
// sessions and the slow bodies had no bound: an agent took its harness
// from 15 MiB to over 1.2 GiB.
func TestMCPFloodWithinBudget(t *testing.T) {
	ctx := testCtx(t)
	const sessions, requests = harness.DefaultMCPSessions, harness.DefaultMCPRequests
	p, _, c := mcpOf(t, ctx, contract.EnvMCPBodyTimeout+"=5s")
	pid := p.cmd.Process.Pid
	rss0, peak0 := memory(t, pid)

	// Sessions opened and left: the live ones stay at the bound, the
	// latest taking the places of those idle longest.
	var ids []string
	for i := 0; i < 200; i++ {
		ids = append(ids, c.open(t, ctx))
	}
	live := 0
	for _, id := range ids[len(ids)-2*sessions:] {
		if c.alive(t, ctx, id) {
			live++
		}
	}
	if live != sessions || !c.alive(t, ctx, ids[len(ids)-1]) || c.alive(t, ctx, ids[0]) {
		t.Errorf("after 200 sessions, %d of the last %d live; want the last %d", live, 2*sessions, sessions)
	}

	// Sessions that each hold a request (the server's event stream) are
	// not taken over: a new one is refused, saying why.
	streamCtx, endStreams := context.WithCancel(ctx)
	var streams sync.WaitGroup
	for _, id := range ids[len(ids)-sessions:] {
		req, _ := http.NewRequestWithContext(streamCtx, http.MethodGet, c.url, nil)
		c.headers(req, id)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.hc.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("event stream: %v %v", resp, err)
		}
		streams.Add(1)
		go func() { defer streams.Done(); io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	}
	status, _, body, err := c.post(ctx, "", initialize)
	if err != nil || status != http.StatusTooManyRequests || !strings.Contains(body, fmt.Sprintf("at most %d MCP sessions", sessions)) {
		t.Errorf("a session beyond %d busy ones: %d %v %.200s", sessions, status, err, body)
	}
	endStreams()
	streams.Wait()

	// Bodies a byte a second: those within the requests in flight are cut
	// at the body time (408), the rest refused at once (429).
	var slow []<-chan string
	for i := 0; i < 3*requests; i++ {
		conn, answer := c.rawPost(t, 100_000, "{")
		slow = append(slow, answer)
		go func() {
			for range 120 {
				time.Sleep(time.Second)
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
	}
	cut, refused := 0, 0
	for _, answer := range slow {
		select {
		case a := <-answer:
			switch {
			case strings.HasPrefix(a, "408 ") && strings.Contains(a, "must arrive within 5s"):
				cut++
			case strings.HasPrefix(a, "429 ") && strings.Contains(a, fmt.Sprintf("at most %d MCP requests", requests)):
				refused++
			default:
				t.Errorf("a slow body was answered %.200q", a)
			}
		case <-ctx.Done():
			t.Fatal("a slow body was never cut")
		}
	}
	if cut == 0 || cut > requests || cut+refused != 3*requests {
		t.Errorf("%d slow bodies: %d cut at the body time, %d refused at once", 3*requests, cut, refused)
	}

	// Bodies over the limit, declared or sent chunked: 413.
	over := strings.Repeat("x", harness.DefaultMCPMaxBody+1)
	for _, chunked := range []bool{false, true} {
		var r io.Reader = strings.NewReader(over)
		if chunked {
			r = struct{ io.Reader }{r}
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, r)
		c.headers(req, "")
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), fmt.Sprintf("at most %d bytes", harness.DefaultMCPMaxBody)) {
			t.Errorf("an oversize body (chunked %v): %d %.200s", chunked, resp.StatusCode, b)
		}
	}
	// A batch: refused, as it would start a tool call a message.
	if status, _, body, _ := c.post(ctx, ids[len(ids)-1], `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`); status != http.StatusBadRequest || !strings.Contains(body, "batches") {
		t.Errorf("a batch: %d %.200s", status, body)
	}

	// The largest bodies allowed, a tool call each, as many at once as the
	// server takes, in rounds: what each holds is bounded.
	session := ids[len(ids)-1]
	text := strings.Repeat("\\u0001", (harness.DefaultMCPMaxBody-200)/6)
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"post_status","arguments":{"body":"` + text + `"}}}`
	for round := 0; round < 8; round++ {
		var wg sync.WaitGroup
		for i := 0; i < requests; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, _, body, err := c.post(ctx, session, strings.Replace(call, `"id":3`, `"id":`+strconv.Itoa(100*round+i+10), 1))
				if err == nil && status != http.StatusOK && status != http.StatusTooManyRequests {
					t.Errorf("a large tool call: %d %.200s", status, body)
				}
			}()
		}
		wg.Wait()
	}
	if status, _, body, _ := c.post(ctx, session, strings.Replace(call, text, "a status", 1)); status != http.StatusOK || strings.Contains(body, "isError\":true") {
		t.Errorf("an honest tool call after the floods: %d %.300s", status, body)
	}

	rss, peak := memory(t, pid)
	t.Logf("harness memory: resident %d KiB before the floods, %d KiB after; peak %d KiB before, %d KiB after (+%d KiB)",
		rss0>>10, rss>>10, peak0>>10, peak>>10, (peak-peak0)>>10)
	if peak-peak0 > mcpFloodPeak {
		t.Errorf("the harness's peak memory grew by %d MiB through the floods, over %d MiB", (peak-peak0)>>20, mcpFloodPeak>>20)
	}
	if live := bytes.Count([]byte(p.stderr.String()), []byte("MCP session closed to make room")); live == 0 {
		t.Error("the harness logged no session taken over")
	}
}

// TestMCPUnauthenticatedTakesNoPlace: requests without the MCP server's
// secret, their bodies never sent, are refused at once (401) and take
// none of the agent's places among the requests in flight: the agent's
// own request is served meanwhile. Before, the places were taken before
// the secret was checked, so whoever reached the port could hold them all.
func TestMCPUnauthenticatedTakesNoPlace(t *testing.T) {
	ctx := testCtx(t)
	const requests = 2
	_, _, c := mcpOf(t, ctx, contract.EnvMCPRequests+"="+strconv.Itoa(requests))
	var answers []<-chan string
	for range 3 * requests {
		_, answer := c.rawPostAs(t, "not-the-secret", 100_000, "{")
		answers = append(answers, answer)
	}
	for _, answer := range answers {
		select {
		case a := <-answer:
			if !strings.HasPrefix(a, "401 ") {
				t.Errorf("a request without the secret was answered %.200q", a)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request without the secret was not refused at once")
		}
	}
	if status, id, body, err := c.post(ctx, "", initialize); err != nil || status != http.StatusOK || id == "" {
		t.Errorf("the agent's request beside them: %d %v %.200s", status, err, body)
	}
}

// TestMCPSessionIdle: a session without a request in flight ends after the
// idle time, while one whose blocking tool call waits longer than that for
// the coordinator stays, and the call gets its answer.
func TestMCPSessionIdle(t *testing.T) {
	ctx := testCtx(t)
	const idle = 2 * time.Second
	_, f, c := mcpOf(t, ctx, contract.EnvMCPSessionIdle+"="+idle.String(), contract.EnvMCPProgressInterval+"=500ms")
	idler, waiter := c.open(t, ctx), c.open(t, ctx)

	waited := make(chan string, 1)
	go func() {
		_, _, body, err := c.post(ctx, waiter, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"wait_message","_meta":{"progressToken":"p"}}}`)
		if err != nil {
			body = err.Error()
		}
		waited <- body
	}()
	// The idle one ends: the agent's next request in it is answered 404.
	// A ping of ours before its end starts its idle time again, so each
	// try leaves it alone for twice the idle time first.
	ended := false
	for try := 0; try < 10 && !ended; try++ {
		time.Sleep(2 * idle)
		ended = !c.alive(t, ctx, idler)
	}
	if !ended {
		t.Fatal("an idle session did not end")
	}
	if !c.alive(t, ctx, waiter) {
		t.Fatal("the session of a blocking tool call ended while the call waited")
	}
	f.Message("the coordinator's answer")
	select {
	case body := <-waited:
		if !strings.Contains(body, "the coordinator's answer") {
			t.Fatalf("the blocking call answered %.300s", body)
		}
	case <-ctx.Done():
		t.Fatal("the blocking call got no answer")
	}
}
