package modelproxy

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Family is a provider API the proxy serves.
type Family string

const (
	// Anthropic is the Messages API (claude): the agent's base URL is the
	// proxy's root (ANTHROPIC_BASE_URL), its token an x-api-key
	// (ANTHROPIC_API_KEY) or a bearer token (ANTHROPIC_AUTH_TOKEN).
	Anthropic Family = "anthropic"
	// OpenAI is the Responses API (codex): the agent's base URL is the
	// proxy's /v1 (openai_base_url), its token a bearer token.
	OpenAI Family = "openai"
)

// DefaultUpstream is each family's public API, where calls go unless the
// house names its gateway.
var DefaultUpstream = map[Family]string{
	Anthropic: "https://api.anthropic.com",
	OpenAI:    "https://api.openai.com/v1",
}

// AgentBaseURL is the base URL to give the agent's CLI for a proxy
// listening on hostport.
func AgentBaseURL(f Family, hostport string) string {
	if f == OpenAI {
		return "http://" + hostport + "/v1"
	}
	return "http://" + hostport
}

// route is what the proxy does with one agent-facing path.
type route struct {
	upstreamPath string // appended to the upstream base URL
	billed       bool   // a model call: capped before, counted after
}

// routeOf maps an agent's request to its route, or false: every other
// path is refused 404.
func (f Family) routeOf(r *http.Request) (route, bool) {
	p := r.URL.Path
	switch f {
	case Anthropic:
		switch {
		case r.Method == http.MethodPost && p == "/v1/messages":
			return route{upstreamPath: p, billed: true}, true
		case r.Method == http.MethodPost && p == "/v1/messages/count_tokens":
			return route{upstreamPath: p}, true
		case r.Method == http.MethodGet && (p == "/v1/models" || strings.HasPrefix(p, "/v1/models/") && !strings.Contains(p[len("/v1/models/"):], "/")):
			return route{upstreamPath: p}, true
		}
	case OpenAI:
		if isWebSocket(r) {
			// codex's Responses WebSocket is not served: codex is
			// configured for HTTP (and falls back to it on a 404).
			return route{}, false
		}
		switch {
		case r.Method == http.MethodPost && p == "/v1/responses":
			return route{upstreamPath: "/responses", billed: true}, true
		case r.Method == http.MethodGet && p == "/v1/models":
			return route{upstreamPath: "/models"}, true
		}
	}
	return route{}, false
}

func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// agentToken is the credential the agent sent.
func (f Family) agentToken(h http.Header) string {
	if f == Anthropic {
		if k := h.Get("X-Api-Key"); k != "" {
			return k
		}
	}
	auth := h.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// credentialHeaders are dropped from every forwarded request: the agent's
// credentials (and account selectors, which are the house's to choose).
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Proxy-Authorization", "Cookie",
	"Openai-Organization", "Openai-Project", "Chatgpt-Account-Id", "Anthropic-Organization-Id"}

// accountHeaders are dropped from every answer: the house's account
// details and cookies are not the agent's business.
var accountHeaders = []string{"Set-Cookie", "Anthropic-Organization-Id", "Openai-Organization", "Openai-Project"}

func (f Family) setHouseKey(h http.Header, key string) {
	for _, k := range credentialHeaders {
		h.Del(k)
	}
	if f == Anthropic {
		h.Set("X-Api-Key", key)
		return
	}
	h.Set("Authorization", "Bearer "+key)
}

// capStatus is the status of a call refused at the cap: one the family's
// CLI does not retry, found by trying the pinned CLIs (claude 2.1.332,
// codex 0.171.0; local/realcli's TestRealCLIsAtTheCap holds it):
//
//   - claude: 402 (billing_error), one request, then "API Error: 402
//     galley: ..."; 403 is not retried either but claude words it "Failed
//     to authenticate"; a 400 it sent 6 times in one trial; 429 and 500 it
//     retries (8 requests in 90 s, still going).
//   - codex: 400, one request, then the turn fails with the message; 402
//     and 403 it sends 6 times (5 reconnects); 500, 30 times; 429 once, but
//     it reports only "exceeded retry limit".
func (f Family) capStatus() int {
	if f == Anthropic {
		return http.StatusPaymentRequired
	}
	return http.StatusBadRequest
}

// Error kinds, mapped to each family's error type.
const (
	errAuth     = "auth"
	errBadBody  = "bad_body"
	errNotFound = "not_found"
	errTooLarge = "too_large"
	errBusy     = "busy"
	errBudget   = "budget"
	errUpstream = "upstream"
)

// writeError answers in the family's error shape.
func (f Family) writeError(w http.ResponseWriter, status int, kind, msg string) {
	var body any
	if f == Anthropic {
		typ := map[string]string{errAuth: "authentication_error", errBadBody: "invalid_request_error", errNotFound: "not_found_error",
			errTooLarge: "request_too_large", errBusy: "rate_limit_error", errBudget: "billing_error",
			errUpstream: "api_error"}[kind]
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	} else {
		typ, code := "invalid_request_error", any(nil)
		switch kind {
		case errAuth:
			code = "invalid_api_key"
		case errNotFound:
			code = "not_found"
		case errTooLarge:
			code = "request_too_large"
		case errBusy:
			typ, code = "rate_limit_error", "rate_limit_exceeded"
		case errBudget:
			code = "galley_budget_exhausted"
		case errUpstream:
			typ = "server_error"
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", itoa(len(b)))
	if kind == errBudget {
		// The Anthropic SDK honours this over its status rules.
		w.Header().Set("X-Should-Retry", "false")
	}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// answerPaths are where a family's answers carry the model and its usage:
// a JSON answer at the top, a streamed one in its events.
func (f Family) answerPaths(stream bool) []string {
	switch {
	case !stream:
		return []string{"model", "usage"}
	case f == Anthropic:
		// message_start carries message.usage; message_delta carries
		// usage (output cumulative; newer API versions input and cache
		// too).
		return []string{"message.model", "message.usage", "usage"}
	default:
		// response.completed (and .incomplete, .failed) carry the
		// response with its usage.
		return []string{"response.model", "response.usage"}
	}
}

// usage is one call's counts as they arrive: each field the latest the
// provider stated.
type usage struct {
	model                                *string
	input, output, cacheRead, cacheWrite *int64
}

func (u *usage) seen() bool {
	return u.input != nil || u.output != nil || u.cacheRead != nil || u.cacheWrite != nil
}

func (u *usage) tokens() Tokens {
	v := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return 0
		}
		return *p
	}
	return Tokens{Input: v(u.input), Output: v(u.output), CacheRead: v(u.cacheRead), CacheWrite: v(u.cacheWrite)}
}

// take reads what one JSON answer or event holds into u.
func (f Family) take(u *usage, s *fieldScanner, stream bool) {
	for _, p := range f.answerPaths(stream) {
		raw := s.value(p)
		if raw == nil {
			continue
		}
		if strings.HasSuffix(p, "model") {
			var m string
			if json.Unmarshal(raw, &m) == nil && m != "" {
				u.model = &m
			}
			continue
		}
		if f == Anthropic {
			var a struct {
				Input      *int64 `json:"input_tokens"`
				Output     *int64 `json:"output_tokens"`
				CacheWrite *int64 `json:"cache_creation_input_tokens"`
				CacheRead  *int64 `json:"cache_read_input_tokens"`
			}
			if json.Unmarshal(raw, &a) != nil {
				continue
			}
			for _, x := range []struct{ from, to **int64 }{{&a.Input, &u.input}, {&a.Output, &u.output},
				{&a.CacheWrite, &u.cacheWrite}, {&a.CacheRead, &u.cacheRead}} {
				if *x.from != nil {
					*x.to = *x.from
				}
			}
			continue
		}
		// OpenAI counts cached input inside input_tokens; galley's input
		// is the rest (as pkg/agents maps codex's totals).
		var o struct {
			Input   *int64 `json:"input_tokens"`
			Output  *int64 `json:"output_tokens"`
			Details *struct {
				Cached *int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		}
		if json.Unmarshal(raw, &o) != nil || (o.Input == nil && o.Output == nil) {
			continue
		}
		cached := int64(0)
		if o.Details != nil && o.Details.Cached != nil && *o.Details.Cached > 0 {
			cached = *o.Details.Cached
		}
		in := int64(0)
		if o.Input != nil {
			in = max(*o.Input-cached, 0)
		}
		u.input, u.output, u.cacheRead = &in, o.Output, &cached
	}
}

func jsonString(raw []byte, s *string) error { return json.Unmarshal(raw, s) }
