package harness

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkMCPLargeCall measures what one tool call of the largest body
// the MCP server takes (DefaultMCPMaxBody, a text of escapes) costs the
// harness, through the guard and the SDK: the SDK decodes a call several
// times over, so its allocations are many times the body's size, and the
// body bound is the main factor of the MCP server's memory bound
// (docs/security.md, "Budgets").
//
//	go test -run '^$' -bench MCPLargeCall -benchmem ./pkg/harness/
func BenchmarkMCPLargeCall(b *testing.B) {
	server := mcp.NewServer(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: ToolStatus}, func(ctx context.Context, _ *mcp.CallToolRequest, in statusArgs) (*mcp.CallToolResult, any, error) {
		_ = toolArgs(in)
		return nil, nil, checkText("body", in.Body)
	})
	bud := Budgets{}.withDefaults()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{MaxRequestBodyBytes: bud.MCPMaxBody})
	g := newMCPGuard(bud, server, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(g.limitRequests(g.limitSessions(handler)))
	defer srv.Close()
	post := func(session, msg string) string {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(msg))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set(sessionHeader, session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode >= 300 {
			b.Fatalf("%s: %v", resp.Status, err)
		}
		return resp.Header.Get(sessionHeader)
	}
	id := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	post(id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	text := strings.Repeat(`\u0001`, int(bud.MCPMaxBody-200)/6)
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"post_status","arguments":{"body":"` + text + `"}}}`
	b.SetBytes(int64(len(call)))
	b.ResetTimer()
	for range b.N {
		post(id, call)
	}
}
