package harness_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// progressClient is an MCP client of the harness that counts the progress
// notifications it gets, by token.
type progressClient struct {
	cs *mcp.ClientSession
	mu sync.Mutex
	n  map[any]int
	ch chan struct{}
}

func connectProgress(t *testing.T, ctx context.Context, ep chan [2]string) *progressClient {
	t.Helper()
	var e [2]string
	select {
	case e = <-ep:
	case <-ctx.Done():
		t.Fatal("no agent command")
	}
	pc := &progressClient{n: map[any]int{}, ch: make(chan struct{}, 100)}
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		pc.mu.Lock()
		pc.n[r.Params.ProgressToken]++
		pc.mu.Unlock()
		pc.ch <- struct{}{}
	}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1"}, opts).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e[0], HTTPClient: &http.Client{Transport: bearerRT{e[1]}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	pc.cs = cs
	return pc
}

func (pc *progressClient) count(token any) int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.n[token]
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		parts = append(parts, c.(*mcp.TextContent).Text)
	}
	return strings.Join(parts, "|")
}

// lastQuestion is the id of the newest question posted.
func lastQuestion(s fakeapi.Snapshot) string {
	id := ""
	for _, c := range s.Calls {
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			id = c.PostID
		}
	}
	return id
}

// A blocking tool call sends progress notifications while it waits, so a
// CLI that aborts a silent call (Claude Code after 300 s) keeps waiting;
// the reply that comes after several intervals is the call's result.
func TestBlockingCallSendsProgress(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Agent: protocol.AgentSelection{Agent: "script"}})
	ep := make(chan [2]string, 1)
	runInProcess(t, ctx, f, "script", shellDriver{script: "exec sleep 600", mcp: ep, needs: harness.AgentNeeds{AppendMessages: true}},
		func(c *harness.Config) { c.Progress = 20 * time.Millisecond; c.StopGrace = 100 * time.Millisecond })
	pc := connectProgress(t, ctx, ep)

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	got := make(chan result, 1)
	go func() {
		p := &mcp.CallToolParams{Name: harness.ToolAsk, Arguments: map[string]any{"subject": "which db", "body": "postgres?"}}
		p.SetProgressToken("ask-1")
		res, err := pc.cs.CallTool(ctx, p)
		got <- result{res, err}
	}()
	s := waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool { return lastQuestion(s) != "" })
	// The reply comes only after three notifications: without them a CLI
	// with an idle limit of two intervals would have aborted the call.
	for pc.count("ask-1") < 3 {
		select {
		case <-pc.ch:
		case <-ctx.Done():
			t.Fatalf("only %d progress notifications", pc.count("ask-1"))
		}
	}
	f.Reply(lastQuestion(s), "yes, postgres")
	r := <-got
	if r.err != nil || r.res.IsError || text(r.res) != "yes, postgres" {
		t.Fatalf("ask_coordinator = %+v, %v", r.res, r.err)
	}
	// A call that sent no token gets no progress, and still its result.
	f.Message("go on")
	res, err := pc.cs.CallTool(ctx, &mcp.CallToolParams{Name: harness.ToolWaitMessage, Arguments: map[string]any{}})
	if err != nil || text(res) != "go on" {
		t.Fatalf("wait_message = %+v, %v", res, err)
	}
	if n := pc.count(nil); n != 0 {
		t.Errorf("%d notifications without a token", n)
	}
}

// A question whose ask_coordinator call ended before its reply (the CLI
// gave up on it, or its connection dropped) still gets its reply to the
// agent: as a message on its next tool result.
func TestAbandonedQuestionReplyBecomesMessage(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Brief: "x", Branch: testBranch, Agent: protocol.AgentSelection{Agent: "script"}})
	ep := make(chan [2]string, 1)
	p := runInProcess(t, ctx, f, "script", shellDriver{script: "exec sleep 600", mcp: ep, needs: harness.AgentNeeds{AppendMessages: true}},
		func(c *harness.Config) { c.StopGrace = 100 * time.Millisecond })
	pc := connectProgress(t, ctx, ep)

	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := pc.cs.CallTool(callCtx, &mcp.CallToolParams{Name: harness.ToolAsk,
			Arguments: map[string]any{"subject": "which db", "body": "postgres?"}})
		done <- err
	}()
	q := lastQuestion(waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool { return lastQuestion(s) != "" }))
	cancel() // the CLI gives up on the call
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	waitForLog(t, ctx, p, "the reply will come as a message", 1)
	f.Reply(q, "yes, postgres")
	want := "Reply to your question " + q + " (\"which db\"), which came after your ask_coordinator call had ended: yes, postgres"
	// The reply rides on the next tool result once the harness holds it.
	var all string
	for !strings.Contains(all, want) {
		res, err := pc.cs.CallTool(ctx, &mcp.CallToolParams{Name: harness.ToolHeartbeat, Arguments: map[string]any{}})
		if err != nil || res.IsError {
			t.Fatalf("heartbeat: %+v %v", res, err)
		}
		all += text(res)
		select {
		case <-ctx.Done():
			t.Fatalf("the late reply never reached the agent; results: %q", all)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waitForLog waits until the harness log holds want n times.
func waitForLog(t *testing.T, ctx context.Context, p *inproc, want string, n int) {
	t.Helper()
	for strings.Count(p.log.String(), want) < n {
		select {
		case <-ctx.Done():
			t.Fatalf("the harness never logged %q", want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
