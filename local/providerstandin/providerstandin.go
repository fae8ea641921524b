// Package providerstandin is a model provider for tests of the real agent
// CLIs: it answers the Anthropic Messages API (POST /v1/messages, and
// POST /v1/messages/count_tokens) and the
// OpenAI Responses API (POST /v1/responses), streaming (server-sent events)
// or not, as the CLIs call them, and plays a script of tool calls instead
// of a model. Point claude at it with ANTHROPIC_BASE_URL=<URL> and codex
// with OPENAI_BASE_URL=<URL>/v1 (galley gives codex openai_base_url).
//
// It is as strict as the providers on what a CLI could get wrong: a request
// without the configured key is refused 401 with the provider's error
// shape (and the stand-in remembers it saw a wrong key), the Messages API
// needs anthropic-version, a body that is not the API's JSON is refused
// 400, and so is a conversation with a tool call left without its result
// (a Messages tool_use whose tool_result does not follow it at once, a
// Responses function or custom tool call without its output), as a
// session resumed after its CLI was killed in a call could send.
//
// Every model call reports usage as the providers do, with fixed numbers a
// test can predict (MessagesUsage, ResponsesUsage), in each API's own
// shape, streaming or not, cache counts included. Codex's Responses WebSocket is not
// served (404): codex falls back to HTTPS, as against a gateway without
// WebSockets.
//
// The script is a list of steps. The step a request gets is the number of
// model turns already in its conversation (assistant messages; function
// calls and assistant messages in a Responses input), so a resumed session
// goes on where it left off. A step either calls a tool (with the family's
// own name for it, and arguments as JSON) or answers text, which ends the
// CLI's turn. Requests that are not the agent's main loop (claude's side
// queries: no tools) are answered with a short text and take no step.
package providerstandin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
)

// Step is one scripted model turn: a tool call (Tool set) or a text answer
// that ends the CLI's turn.
type Step struct {
	Tool  string         // the tool's name as the CLI offers it
	Input map[string]any // its arguments
	// Code, with Tool, makes a freeform (custom) tool call whose input is
	// Code: codex's code-mode exec tool, which runs JavaScript that calls
	// the nested tools (exec_command, the MCP tools) on its tools object.
	Code string
	Text string
}

// Call records one request the stand-in answered.
type Call struct {
	API     string // "messages" or "responses"
	Model   string
	Stream  bool
	Step    int // the step played; -1 for a side query
	Tools   []string
	Results []string // tool results in the conversation, in order
	// Called are the tools the conversation's assistant turns called, in
	// order, and Prompts the user's text in it (claude's reminders
	// included): what of the conversation the request carried.
	Called    []string
	Prompts   []string
	Effort    string // reasoning effort, when the request states one
	UserAgent string
}

// Server is the provider stand-in.
type Server struct {
	*httptest.Server
	key   string
	steps []Step

	mu    sync.Mutex
	calls []Call
	bad   []string // refusals, for a test to show
	// websockets counts Responses WebSocket attempts (answered 404).
	websockets int
	wrongKeys  int
	// seen holds a hash of every header value of every request, for
	// SawSecret.
	seen map[[32]byte]bool
}

// Usage is what the stand-in reports for each model call, in galley's
// categories (input excludes cache reads and writes).
type Usage struct{ Input, Output, CacheRead, CacheWrite int64 }

var (
	// MessagesUsage is every Messages call's usage: input_tokens 100,
	// output_tokens 20, cache_read_input_tokens 50,
	// cache_creation_input_tokens 30. A stream states it in message_start
	// (output_tokens 1 there) and again, cumulative, in message_delta.
	MessagesUsage = Usage{Input: 100, Output: 20, CacheRead: 50, CacheWrite: 30}
	// ResponsesUsage is every Responses call's usage: input_tokens 150 of
	// which input_tokens_details.cached_tokens 50, output_tokens 20 (5 of
	// them reasoning). OpenAI states no cache writes.
	ResponsesUsage = Usage{Input: 100, Output: 20, CacheRead: 50}
)

// New starts a stand-in that accepts only key and plays steps.
func New(key string, steps []Step) *Server {
	s := &Server{key: key, steps: steps, seen: map[[32]byte]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/messages", s.messages)
	mux.HandleFunc("/v1/messages/count_tokens", s.countTokens)
	mux.HandleFunc("/v1/responses", s.responses)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.refuse(r, "no such endpoint "+r.Method+" "+r.URL.Path)
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
	})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		for _, vs := range r.Header {
			for _, v := range vs {
				s.seen[sha256.Sum256([]byte(v))] = true
				if _, rest, ok := strings.Cut(v, " "); ok {
					s.seen[sha256.Sum256([]byte(rest))] = true // a credential after its scheme
				}
			}
		}
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	return s
}

// SawWrongKey reports whether any request came with a key other than the
// configured one (or none).
func (s *Server) SawWrongKey() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wrongKeys > 0
}

// SawSecret reports whether any request carried secret as a header's
// value (or as the credential after its scheme, as in "Bearer <secret>").
func (s *Server) SawSecret(secret string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[sha256.Sum256([]byte(secret))]
}

// Calls returns the requests answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Refused returns why requests were refused (no secrets in them).
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bad...)
}

func (s *Server) refuse(r *http.Request, why string) {
	s.mu.Lock()
	s.bad = append(s.bad, why)
	s.mu.Unlock()
}

// record keeps c and returns its number (from 1).
func (s *Server) record(c Call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	return len(s.calls)
}

func (s *Server) keyOK(got string) bool {
	ok := got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.key)) == 1
	if !ok {
		s.mu.Lock()
		s.wrongKeys++
		s.mu.Unlock()
	}
	return ok
}

func (s *Server) step(n int) Step {
	if n < len(s.steps) {
		return s.steps[n]
	}
	return Step{Text: "The script is over."}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events as the providers do.
type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (e *sse) event(name string, data any) {
	b, _ := json.Marshal(data)
	fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, b)
	if e.f != nil {
		e.f.Flush()
	}
}

func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if d := os.Getenv("PROVIDERSTANDIN_DUMP"); d != "" {
		// A debugging aid: each request body in a file of its own.
		f, ferr := os.CreateTemp(d, "req-*.json")
		if ferr == nil {
			_, _ = f.Write(b)
			_ = f.Close()
		}
	}
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return false
	}
	return true
}

// textOf flattens a tool result's content (a string or content blocks).
func textOf(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, "\n")
	}
	return string(raw)
}

// WebSockets counts the Responses WebSocket attempts (each answered 404).
func (s *Server) WebSockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.websockets
}
