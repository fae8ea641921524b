package harness

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPGuardSessionsAtOnce opens, uses and ends sessions from many
// clients at once: the SDK never holds more sessions than the bound, at
// any moment a sampler sees, and the guard's count agrees with the SDK's
// once they stop. (Run with -race: the guard's bookkeeping is shared by
// every request.)
func TestMCPGuardSessionsAtOnce(t *testing.T) {
	t.Parallel()
	const max = 4
	server := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	b := Budgets{MCPSessions: max, MCPSessionIdle: 50 * time.Millisecond}.withDefaults()
	g := newMCPGuard(b, server, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(g.limitRequests(g.limitSessions(mcp.NewStreamableHTTPHandler(
		func(*http.Request) *mcp.Server { return server }, nil))))
	defer srv.Close()
	do := func(method, session, msg string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL, strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set(sessionHeader, session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(sessionHeader)
	}

	var most atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			n := int64(0)
			for range server.Sessions() {
				n++
			}
			if n > most.Load() {
				most.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				status, id := do(http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
				if status == http.StatusTooManyRequests || id == "" {
					continue
				}
				do(http.MethodPost, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				do(http.MethodPost, id, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
				switch (c + i) % 3 {
				case 0:
					do(http.MethodDelete, id, "")
				case 1:
					time.Sleep(2 * b.MCPSessionIdle) // left idle: the guard ends it
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("the SDK held at most %d sessions at once", most.Load())
	if most.Load() > max {
		t.Errorf("the SDK held %d sessions at once, over %d", most.Load(), max)
	}
	live := func() (sdk, guard int) {
		for range server.Sessions() {
			sdk++
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		g.pruneLocked()
		return sdk, len(g.sessions)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		sdk, guard := live()
		if sdk == 0 && guard == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the clients stopped, the SDK holds %d sessions and the guard counts %d; idle ones should end", sdk, guard)
		}
	}
}
