package harness

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Tool names the agent sees.
const (
	ToolAsk         = "ask_coordinator"
	ToolStatus      = "post_status"
	ToolEscalate    = "escalate"
	ToolHeartbeat   = "heartbeat"
	ToolWaitMessage = "wait_message"
	ToolFinish      = "finish"
	ToolUsage       = "report_usage"
)

// MCPPath is the MCP endpoint's path on the harness's loopback server.
const MCPPath = "/mcp"

const maxText = 64 << 10

type askArgs struct {
	Subject string `json:"subject" jsonschema:"a short subject line for the question"`
	Body    string `json:"body" jsonschema:"the question itself"`
}

type statusArgs struct {
	Body string `json:"body" jsonschema:"a short status note for the coordinator"`
}

type finishArgs struct {
	Outcome string `json:"outcome" jsonschema:"succeeded, failed or cancelled"`
	Body    string `json:"body,omitempty" jsonschema:"a summary of what was done"`
}

type usageArgs struct {
	Input  int64  `json:"input" jsonschema:"input tokens used so far"`
	Output int64  `json:"output" jsonschema:"output tokens used so far"`
	Cost   *int64 `json:"cost,omitempty" jsonschema:"cost so far in millionths of a US dollar"`
}

type noArgs struct{}

// mcpServer is the harness's MCP endpoint on 127.0.0.1, open only to a
// request carrying its per-session secret.
type mcpServer struct {
	url    string
	secret string
	srv    *http.Server
}

func (s *mcpServer) close() { _ = s.srv.Close() }

func (h *harness) startMCP() (*mcpServer, error) {
	b := h.cfg.Budgets.withDefaults()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	secret := hex.EncodeToString(raw)

	server := mcp.NewServer(&mcp.Implementation{Name: "galley-harness", Version: "1"}, &mcp.ServerOptions{
		Instructions: "Tools to talk to your coordinator through galley: ask questions, post status, escalate, " +
			"wait for messages, report usage, and call finish exactly once when the work is done.",
	})
	h.addTools(server)
	h.calls.limitCalls(b.MCPRequests)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{MaxRequestBodyBytes: b.MCPMaxBody})
	guard := newMCPGuard(b, server, h.log)

	mux := http.NewServeMux()
	mux.Handle(MCPPath, guard.limitSessions(h.calls.track(handler)))
	ln, err := h.listenForAgent("mcp")
	if err != nil {
		return nil, err
	}
	// The secret is checked first: a request without it takes none of the
	// agent's places, and its body is never read.
	srv := &http.Server{Handler: requireSecret(secret, guard.limitRequests(mux)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: maxHeaderBytes}
	go func() { _ = srv.Serve(limitConns(ln, srv, h.log)) }()
	return &mcpServer{url: "http://" + ln.Addr().String() + MCPPath, secret: secret, srv: srv}, nil
}

// requestHeader carries the harness's id of the HTTP request a tool call
// came in, so that its handler can tell when that request is gone.
const requestHeader = "X-Galley-Request"

// liveRequests holds the contexts of the MCP server's HTTP requests in
// flight. The MCP SDK does not end a tool call's handler when the client
// drops the request that carries it (older protocol versions, which the
// CLIs speak), and a handler that then takes a reply would return it to
// nobody: a blocking handler ends with its request instead.
type liveRequests struct {
	mu sync.Mutex
	n  uint64
	m  map[string]context.Context
	// callsInFlight are the tool calls running, at most maxCalls
	// (mcpbudget.go).
	callsInFlight, maxCalls int
}

func (l *liveRequests) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		if l.m == nil {
			l.m = map[string]context.Context{}
		}
		l.n++
		id := strconv.FormatUint(l.n, 10)
		l.m[id] = r.Context()
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			delete(l.m, id)
			l.mu.Unlock()
		}()
		r.Header.Set(requestHeader, id) // the client's own value, if any, is replaced
		next.ServeHTTP(w, r)
	})
}

// bind returns ctx, ended also when the HTTP request that carried req ends.
func (l *liveRequests) bind(ctx context.Context, req *mcp.CallToolRequest) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if req == nil || req.Extra == nil || req.Extra.Header == nil {
		return ctx, cancel
	}
	l.mu.Lock()
	rctx, ok := l.m[req.Extra.Header.Get(requestHeader)]
	l.mu.Unlock()
	if !ok {
		return ctx, cancel
	}
	stop := context.AfterFunc(rctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// requireSecret answers 401 to any request without "Bearer <secret>".
func requireSecret(secret string, next http.Handler) http.Handler {
	want := []byte("Bearer " + secret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			refuseRequest(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *harness) addTools(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: ToolAsk, Description: "Ask the coordinator a question and wait for the reply, which this returns."},
		tool(h, ToolAsk, func(ctx context.Context, a askArgs) (string, error) {
			if err := checkText("subject", a.Subject, "body", a.Body); err != nil {
				return "", err
			}
			digest := askDigest(a.Subject, a.Body)
			ans := workerapi.PostAnswer{}
			if q, ok := h.reattach(a.Subject, a.Body); ok {
				// A resumed agent asks the question it was parked in
				// again: it gets that question's reply.
				ans.ID = q
				h.log.Info("the resumed agent's question was asked before it parked; awaiting its reply", "question", q)
			} else {
				// The question is posted even if the agent drops the call
				// meanwhile (with the harness's own context): its id is
				// then known, so its reply can still be delivered as a
				// message.
				var err error
				if ans, err = h.api.Post(h.ctx, workerapi.PostRequest{Kind: protocol.MsgQuestion, Subject: a.Subject, Body: a.Body}); err != nil {
					return "", err
				}
				h.log.Info("question posted, awaiting the reply", "question", ans.ID)
			}
			wait := h.parks.wait(ToolAsk, ans.ID, a.Subject, digest)
			defer h.parks.done(wait)
			reply, err := h.box.reply(ctx, ans.ID)
			if err != nil {
				if !errors.Is(err, errStopping) {
					// The call ended without its reply: the CLI gave up on it or
					// the connection dropped (a parking that stops the agent
					// ends it too: its harness then ends, or, had the parking
					// failed, needs the abandon). The reply, when it comes, is
					// delivered as a message: on the agent's next tool result,
					// or as its next turn's prompt.
					h.box.abandon(ans.ID, a.Subject)
					h.log.Warn("the agent's wait for a reply ended early; the reply will come as a message", "question", ans.ID, "err", err)
				}
				return "", fmt.Errorf("no reply to question %s: %w", ans.ID, err)
			}
			return reply, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolStatus, Description: "Post a short status note to the coordinator."},
		tool(h, ToolStatus, func(ctx context.Context, a statusArgs) (string, error) {
			return h.post(ctx, workerapi.PostRequest{Kind: protocol.MsgStatus, Body: a.Body}, "body", a.Body)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolEscalate, Description: "Escalate a problem that needs a person's attention."},
		tool(h, ToolEscalate, func(ctx context.Context, a askArgs) (string, error) {
			return h.post(ctx, workerapi.PostRequest{Kind: protocol.MsgEscalation, Subject: a.Subject, Body: a.Body},
				"subject", a.Subject, "body", a.Body)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolHeartbeat, Description: "Tell the coordinator you are still working."},
		tool(h, ToolHeartbeat, func(ctx context.Context, _ noArgs) (string, error) {
			return h.post(ctx, workerapi.PostRequest{Kind: protocol.MsgHeartbeat})
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolWaitMessage, Description: "Wait for the next message from the coordinator and return it."},
		tool(h, ToolWaitMessage, func(ctx context.Context, _ noArgs) (string, error) {
			wait := h.parks.wait(ToolWaitMessage, "", "", "")
			defer h.parks.done(wait)
			return h.box.nextMessage(ctx)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolFinish, Description: "Report the outcome (succeeded, failed or cancelled) once the work is over, then exit."},
		tool(h, ToolFinish, func(ctx context.Context, a finishArgs) (string, error) {
			switch a.Outcome {
			case protocol.OutcomeSucceeded, protocol.OutcomeFailed, protocol.OutcomeCancelled:
			default:
				return "", fmt.Errorf("outcome must be succeeded, failed or cancelled")
			}
			if a.Body != "" {
				if err := checkText("body", a.Body); err != nil {
					return "", err
				}
			}
			h.finishing.Store(true)
			h.model.flush() // the count so far, before the report settles the worker
			if _, err := h.api.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: a.Outcome, Body: a.Body}); err != nil {
				return "", err
			}
			h.finished.Store(true)
			h.log.Info("agent finished", "outcome", a.Outcome)
			return "reported " + a.Outcome + "; exit now", nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: ToolUsage, Description: "Report token usage (and cost, if known) so far."},
		tool(h, ToolUsage, func(ctx context.Context, a usageArgs) (string, error) {
			if a.Input < 0 || a.Output < 0 || (a.Cost != nil && *a.Cost < 0) {
				return "", fmt.Errorf("usage counts may not be negative")
			}
			if h.model != nil {
				// What the provider said at the model proxy is reported,
				// not what the agent says.
				return "galley counts this worker's usage at its model proxy; nothing to report", nil
			}
			rep := protocol.UsageReport{Source: h.self.Handle, Tokens: &protocol.Tokens{Input: &a.Input, Output: &a.Output}}
			if fam := h.self.Agent.Agent; fam == "claude" || fam == "codex" {
				rep.Agent, rep.Model = fam, h.self.Agent.Model
			}
			if a.Cost != nil {
				rep.Cost = &protocol.Cost{Amount: *a.Cost, Basis: "reported"}
			}
			if err := h.api.Usage(ctx, rep); err != nil {
				return "", err
			}
			return "usage reported", nil
		}))
}

// blocking are the tools whose call waits for the coordinator, for as long
// as the coordinator takes.
var blocking = map[string]bool{ToolAsk: true, ToolWaitMessage: true}

// tool adapts a handler: it refuses calls after finish, takes any call as
// evidence that the agent runs, keeps a blocking call alive with progress
// notifications, and appends waiting messages when asked to.
func tool[In any](h *harness, name string, f func(context.Context, In) (string, error)) mcp.ToolHandlerFor[In, any] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		if h.finished.Load() {
			return nil, nil, errors.New("the worker already reported its outcome; exit now")
		}
		// The call counts itself before it looks at parking, so that a
		// parking either sees it (and gives up) or it sees the parking.
		if err := h.calls.startCall(); err != nil {
			return nil, nil, err
		}
		defer h.calls.endCall()
		if h.parks.isParking() {
			return nil, nil, errors.New("the worker is being parked while it waits on its coordinator; try again")
		}
		h.ensureReady(ctx, "agent called "+name)
		if blocking[name] {
			var cancel context.CancelFunc
			ctx, cancel = h.calls.bind(ctx, req)
			defer cancel()
			stop := h.keepAlive(ctx, req, name)
			defer stop()
		}
		text, err := f(ctx, in)
		if err != nil {
			h.log.Warn("tool failed", "tool", name, "err", err)
			h.rep.report(workerapi.EventTool, "tool failed: "+err.Error(), "tool", name, "args", toolArgs(in))
			return nil, nil, err
		}
		h.rep.report(workerapi.EventTool, "", "tool", name, "args", toolArgs(in), "resultBytes", strconv.Itoa(len(text)))
		res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
		if h.needs.AppendMessages && name != ToolWaitMessage {
			for _, m := range h.box.drainMessages() {
				res.Content = append(res.Content, &mcp.TextContent{Text: "Message from the coordinator: " + m})
			}
		}
		return res, nil, nil
	}
}

// keepAlive sends an MCP progress notification for the call every
// h.cfg.Progress until stop is called. A CLI aborts a tool call that sends
// nothing for its idle limit (Claude Code: 300 s) and may drop a silent
// connection, while a question may wait an hour for its reply. Progress
// needs the client's progress token; a call without one gets none (the CLI
// then asked for no progress, and its own timeout rules).
func (h *harness) keepAlive(ctx context.Context, req *mcp.CallToolRequest, name string) (stop func()) {
	if req == nil || req.Session == nil || req.Params == nil {
		return func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		h.log.Info("blocking tool call without a progress token: no keep-alive", "tool", name)
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(h.cfg.Progress)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			msg := "waiting for the coordinator's reply"
			if name == ToolWaitMessage {
				msg = "waiting for a message from the coordinator"
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("%s (%s so far)", msg, time.Since(start).Round(time.Second)),
			})
			if err != nil && ctx.Err() == nil {
				h.log.Warn("cannot send a progress notification", "tool", name, "err", err)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (h *harness) post(ctx context.Context, req workerapi.PostRequest, fields ...string) (string, error) {
	if err := checkText(fields...); err != nil {
		return "", err
	}
	ans, err := h.api.Post(ctx, req)
	if err != nil {
		return "", err
	}
	return "posted " + ans.ID, nil
}

// checkText checks name/value pairs against the protocol's text limits.
func checkText(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, v := pairs[i], pairs[i+1]
		switch {
		case strings.TrimSpace(v) == "":
			return fmt.Errorf("%s may not be empty", name)
		case len(v) > maxText:
			return fmt.Errorf("%s is longer than 64 KiB", name)
		case strings.ContainsRune(v, 0):
			return fmt.Errorf("%s may not contain NUL", name)
		}
	}
	return nil
}
