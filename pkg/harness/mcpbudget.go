package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxHeaderBytes bounds the request headers the harness's servers read
// (the MCP server, the push gate, the model proxy): a CLI's or git's are a
// few hundred bytes to a few KiB, and net/http's default, 1 MiB, on each
// of the agent's connections would be far more than the rest of a
// request.
const maxHeaderBytes = 16 << 10

// sessionHeader is the streamable HTTP transport's session header.
const sessionHeader = "Mcp-Session-Id"

// mcpGuard keeps the harness's MCP server within its Budgets. Every
// request that carries the server's secret (checked before the guard)
// takes one of MCPRequests places or is refused (429), and a POST's
// body is read whole before the SDK sees it: at most MCPMaxBody bytes
// (413) within MCPBodyTimeout (408), one JSON-RPC message (a batch is
// refused: the protocol's current versions have none, and one would start
// a tool call a message). The SDK then reads the body from memory, so no
// request holds the server on a slow client for longer than the body time.
//
// Sessions are counted as the SDK makes them: at most MCPSessions live at
// once, and a session with no request in flight for MCPSessionIdle is
// closed. A session that holds a request (a blocking tool call waiting
// hours for the coordinator, with progress notifications; the server's
// event stream) is never idle. At the bound a new session takes the place
// of the one idle longest (a CLI started again for its next turn leaves its
// last turn's session behind); when every session holds a request, the new
// one is refused (429).
type mcpGuard struct {
	b        Budgets
	server   *mcp.Server
	log      *slog.Logger
	requests chan struct{} // a token for each request in flight

	mu       sync.Mutex
	opening  int // requests in flight that may make a session
	sessions map[string]*sessionUse
}

// sessionUse is what the guard knows of one live session.
type sessionUse struct {
	busy  int       // its requests in flight
	idle  time.Time // when its last request ended
	timer *time.Timer
}

// stop stops u's idle clock, if it runs.
func (u *sessionUse) stop() {
	if u.timer != nil {
		u.timer.Stop()
	}
}

func newMCPGuard(b Budgets, server *mcp.Server, log *slog.Logger) *mcpGuard {
	return &mcpGuard{b: b, server: server, log: log, requests: make(chan struct{}, b.MCPRequests), sessions: map[string]*sessionUse{}}
}

// limitRequests bounds the requests in flight and reads each POST's body
// whole, within its bounds, before next sees it.
func (g *mcpGuard) limitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.requests <- struct{}{}:
			defer func() { <-g.requests }()
		default:
			refuseRequest(w, http.StatusTooManyRequests, fmt.Sprintf(
				"galley: the harness serves at most %d MCP requests of this agent at once; retry when one has ended", g.b.MCPRequests))
			return
		}
		if r.Method != http.MethodPost {
			if r.ContentLength != 0 {
				refuseRequest(w, http.StatusBadRequest, "galley: only a POST to the MCP server carries a body")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		body, status, msg := g.readBody(w, r)
		if status != 0 {
			refuseRequest(w, status, msg)
			return
		}
		r.Body, r.ContentLength = &heldBody{b: body}, int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// readBody reads a POST's body whole, or says why not: the status and
// message of the refusal.
func (g *mcpGuard) readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, string) {
	tooLarge := fmt.Sprintf("galley: an MCP request's body may hold at most %d bytes", g.b.MCPMaxBody)
	if r.ContentLength > g.b.MCPMaxBody {
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	}
	// The deadline is lifted once the body is in: what the SDK does after
	// (a tool call that waits hours, its stream of progress) is not timed.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.b.MCPBodyTimeout))
	body, err := readAll(http.MaxBytesReader(w, r.Body, g.b.MCPMaxBody), r.ContentLength)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, tooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, http.StatusRequestTimeout, fmt.Sprintf("galley: an MCP request's body must arrive within %s", g.b.MCPBodyTimeout)
	case err != nil:
		return nil, http.StatusBadRequest, "galley: the request's body could not be read"
	}
	_ = rc.SetReadDeadline(time.Time{})
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		return nil, http.StatusBadRequest, "galley: JSON-RPC batches are not accepted; send one message a request"
	}
	return body, 0, ""
}

// readAll reads a body whole: into a buffer of the length the request
// declared (within the bound, checked before), which net/http's body ends
// at, so that reading it leaves no garbage of outgrown buffers.
func readAll(r io.Reader, length int64) ([]byte, error) {
	if length < 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, length)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// refuseRequest answers a request the guard refuses. Whatever is left of
// its body is not read: the connection closes after the answer, and the
// server's own reading of the rest (up to 256 KiB, at the client's pace)
// ends at once.
func refuseRequest(w http.ResponseWriter, status int, msg string) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	w.Header().Set("Connection", "close")
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, msg, status)
}

// heldBody is a request body read into memory; it lets go of it at its
// end, so that a tool call that runs for hours does not keep it.
type heldBody struct{ b []byte }

func (h *heldBody) Read(p []byte) (int, error) {
	if len(h.b) == 0 {
		h.b = nil
		return 0, io.EOF
	}
	n := copy(p, h.b)
	h.b = h.b[n:]
	return n, nil
}

func (h *heldBody) Close() error {
	h.b = nil
	return nil
}

// limitSessions counts the sessions and the requests each holds, and
// keeps the sessions within their bounds.
func (g *mcpGuard) limitSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionHeader)
		switch {
		case id != "":
			g.serveInSession(id, next, w, r)
		case r.Method == http.MethodPost:
			g.serveNewSession(next, w, r)
		default:
			next.ServeHTTP(w, r) // the SDK refuses it
		}
	})
}

// serveNewSession serves a POST without a session, which makes one (an
// initialize; for anything else the SDK makes one and ends it with the
// request). The session is counted from the moment the SDK names it in
// its answer's header, before the client can use it.
func (g *mcpGuard) serveNewSession(next http.Handler, w http.ResponseWriter, r *http.Request) {
	evicted, ok := g.admit()
	if !ok {
		refuseRequest(w, http.StatusTooManyRequests, fmt.Sprintf(
			"galley: the harness holds at most %d MCP sessions of this agent, and each has a request in flight; end one (DELETE) before opening another", g.b.MCPSessions))
		return
	}
	if evicted != "" {
		g.closeSession(evicted, "MCP session closed to make room for a new one (the one idle longest)")
	}
	var id string
	var u *sessionUse
	sw := &headerWatch{ResponseWriter: w, onHeader: func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.opening--
		if id = w.Header().Get(sessionHeader); id != "" {
			u = &sessionUse{busy: 1} // this request is in flight
			g.sessions[id] = u
		}
	}}
	next.ServeHTTP(sw, r)
	sw.header() // an answer without a body
	g.mu.Lock()
	defer g.mu.Unlock()
	if u == nil {
		return
	}
	u.busy--
	switch {
	case g.sessions[id] != u:
	case !g.live(id): // its initialize failed
		delete(g.sessions, id)
	case u.busy == 0:
		g.idleLocked(id, u)
	}
}

// headerWatch calls onHeader once, when the answer's header is about to
// go out (or the handler has ended). The SDK writes an event stream from
// its session's goroutines as well as the request's.
type headerWatch struct {
	http.ResponseWriter
	onHeader func()
	once     sync.Once
}

func (h *headerWatch) header() { h.once.Do(h.onHeader) }

func (h *headerWatch) WriteHeader(code int) {
	h.header()
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerWatch) Write(b []byte) (int, error) {
	h.header()
	return h.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (the SDK
// flushes its event streams through one).
func (h *headerWatch) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// admit takes a place for a new session: a free one, or the place of the
// session idle longest, whose id it returns to be closed.
func (g *mcpGuard) admit() (evict string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pruneLocked()
	if len(g.sessions)+g.opening >= g.b.MCPSessions {
		var oldest *sessionUse
		for id, u := range g.sessions {
			if u.busy == 0 && (oldest == nil || u.idle.Before(oldest.idle)) {
				evict, oldest = id, u
			}
		}
		if oldest == nil {
			return "", false
		}
		oldest.stop()
		delete(g.sessions, evict)
	}
	g.opening++
	return evict, true
}

// serveInSession serves a request of session id: while it runs, the
// session is not idle.
func (g *mcpGuard) serveInSession(id string, next http.Handler, w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	u := g.sessions[id]
	if u != nil {
		u.busy++
		u.stop()
	}
	g.mu.Unlock()
	next.ServeHTTP(w, r) // an unknown session is the SDK's to refuse (404)
	if u == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	u.busy--
	switch {
	case g.sessions[id] != u:
	case r.Method == http.MethodDelete:
		delete(g.sessions, id)
	case u.busy == 0:
		g.idleLocked(id, u)
	}
}

// idleLocked starts u's idle clock.
func (g *mcpGuard) idleLocked(id string, u *sessionUse) {
	u.idle = time.Now()
	u.timer = time.AfterFunc(g.b.MCPSessionIdle, func() {
		g.mu.Lock()
		expired := g.sessions[id] == u && u.busy == 0 && time.Since(u.idle) >= g.b.MCPSessionIdle
		if expired {
			delete(g.sessions, id)
		}
		g.mu.Unlock()
		if expired {
			g.closeSession(id, "MCP session closed after "+g.b.MCPSessionIdle.String()+" without a request")
		}
	})
}

// pruneLocked forgets the sessions the SDK has ended (a DELETE, a failed
// initialize, a closed connection).
func (g *mcpGuard) pruneLocked() {
	live := map[string]bool{}
	for ss := range g.server.Sessions() {
		live[ss.ID()] = true
	}
	for id, u := range g.sessions {
		if !live[id] {
			u.stop()
			delete(g.sessions, id)
		}
	}
}

func (g *mcpGuard) live(id string) bool {
	for ss := range g.server.Sessions() {
		if ss.ID() == id {
			return true
		}
	}
	return false
}

// closeSession ends session id in the SDK: its next request is answered
// 404, upon which a client starts a new session.
func (g *mcpGuard) closeSession(id, why string) {
	for ss := range g.server.Sessions() {
		if ss.ID() == id {
			_ = ss.Close()
			g.log.Info(why, "sessions", g.count())
			return
		}
	}
}

func (g *mcpGuard) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

// startCall takes a place for a tool call, or says why there is none:
// MCPRequests calls are in flight. A call whose request has gone on runs on
// to its end (a post to galley), so requests alone would not bound the
// calls.
func (l *liveRequests) startCall() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxCalls > 0 && l.callsInFlight >= l.maxCalls {
		return errors.New("galley: " + strconv.Itoa(l.maxCalls) +
			" tool calls of this agent are in flight, the most the harness serves at once; call again when one has ended")
	}
	l.callsInFlight++
	return nil
}

func (l *liveRequests) endCall() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.callsInFlight--
}

func (l *liveRequests) limitCalls(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxCalls = n
}
