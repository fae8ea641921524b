package modelproxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/modelproxy"
	"github.com/galley-run/galley/pkg/protocol"
)

const (
	houseKey    = "sk-house-key-never-in-the-agent"
	workerToken = "galley-model-worker-token-0123456789"
	claudeModel = "claude-sonnet-5-5" // $2 in, $10 out, $0.10 cache read, $2.50 cache write
	openaiModel = "gpt-5.5"           // $5 in, $30 out, $0.50 cached
)

// Each stand-in call's cost at the table: Messages 100×2 + 20×10 + 50×0.10
// + 30×2.50 µ$; Responses 100×5 + 20×30 + 50×0.50 µ$.
const (
	messagesCallMicroUSD  = 480
	responsesCallMicroUSD = 1125
)

// rig is a stand-in provider behind a proxy, each on a real socket.
type rig struct {
	fam   modelproxy.Family
	prov  *providerstandin.Server
	proxy *modelproxy.Proxy
	url   string // the agent's base URL

	mu      sync.Mutex
	usages  []modelproxy.Totals
	refusal []modelproxy.Refusal
}

func newRig(t *testing.T, fam modelproxy.Family, opts ...modelproxy.Option) *rig {
	t.Helper()
	r := &rig{fam: fam, prov: providerstandin.New(houseKey, nil)}
	t.Cleanup(r.prov.Close)
	up := r.prov.URL
	if fam == modelproxy.OpenAI {
		up += "/v1"
	}
	opts = append([]modelproxy.Option{modelproxy.WithUpstream(up),
		modelproxy.OnUsage(func(t modelproxy.Totals) { r.mu.Lock(); r.usages = append(r.usages, t); r.mu.Unlock() }),
		modelproxy.OnCapReached(func(f modelproxy.Refusal) { r.mu.Lock(); r.refusal = append(r.refusal, f); r.mu.Unlock() }),
	}, opts...)
	p, err := modelproxy.New(fam, houseKey, workerToken, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.proxy = p
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	r.url = modelproxy.AgentBaseURL(fam, strings.TrimPrefix(srv.URL, "http://"))
	return r
}

// request is a model call as the CLI makes it.
func request(fam modelproxy.Family, base, token, model string, stream bool) *http.Request {
	var req *http.Request
	if fam == modelproxy.Anthropic {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":1024,"stream":%v,"messages":[{"role":"user","content":"hello"}]}`, model, stream)
		req, _ = http.NewRequest(http.MethodPost, base+"/v1/messages?beta=true", strings.NewReader(body))
		req.Header.Set("x-api-key", token)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"input":[{"type":"message","role":"user","content":"hello"}]}`, model, stream)
		req, _ = http.NewRequest(http.MethodPost, base+"/responses", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func (r *rig) call(t *testing.T, model string, stream bool) (*http.Response, []byte) {
	t.Helper()
	return do(t, request(r.fam, r.url, workerToken, model, stream))
}

func modelOf(fam modelproxy.Family) string {
	if fam == modelproxy.Anthropic {
		return claudeModel
	}
	return openaiModel
}

func callUsage(fam modelproxy.Family) (modelproxy.Tokens, int64) {
	if fam == modelproxy.Anthropic {
		u := providerstandin.MessagesUsage
		return modelproxy.Tokens{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}, messagesCallMicroUSD
	}
	u := providerstandin.ResponsesUsage
	return modelproxy.Tokens{Input: u.Input, Output: u.Output, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite}, responsesCallMicroUSD
}

func times(t modelproxy.Tokens, n int64) modelproxy.Tokens {
	return modelproxy.Tokens{Input: t.Input * n, Output: t.Output * n, CacheRead: t.CacheRead * n, CacheWrite: t.CacheWrite * n}
}

// capStatus is the status each family's CLI does not retry
// (local/realcli's TestRealCLIsAtTheCap shows it).
func capStatus(fam modelproxy.Family) int {
	if fam == modelproxy.Anthropic {
		return http.StatusPaymentRequired
	}
	return http.StatusBadRequest
}

var ids = regexp.MustCompile(`standin_\d+`)

// The proxy forwards each family's calls, streaming and not, byte for
// byte; the provider sees the house key and never the worker's token; the
// totals are the provider's own usage, per model, priced.
func TestForwardsAndCounts(t *testing.T) {
	for _, fam := range []modelproxy.Family{modelproxy.Anthropic, modelproxy.OpenAI} {
		t.Run(string(fam), func(t *testing.T) {
			r := newRig(t, fam)
			direct := r.prov.URL
			if fam == modelproxy.OpenAI {
				direct += "/v1"
			}
			n := int64(0)
			for _, stream := range []bool{false, true} {
				_, want := do(t, request(fam, direct, houseKey, modelOf(fam), stream))
				resp, got := r.call(t, modelOf(fam), stream)
				n++
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("stream %v: %d %s", stream, resp.StatusCode, got)
				}
				if g, w := ids.ReplaceAll(got, []byte("standin_N")), ids.ReplaceAll(want, []byte("standin_N")); !bytes.Equal(g, w) {
					t.Errorf("stream %v: the proxied answer differs from the direct one:\n%s\nwant\n%s", stream, g, w)
				}
				if ct := resp.Header.Get("Content-Type"); stream != strings.HasPrefix(ct, "text/event-stream") {
					t.Errorf("stream %v: content type %q", stream, ct)
				}
			}
			if r.prov.SawSecret(workerToken) || r.prov.SawWrongKey() || len(r.prov.Refused()) != 0 {
				t.Errorf("the provider saw the token %v, a wrong key %v, refused %v", r.prov.SawSecret(workerToken), r.prov.SawWrongKey(), r.prov.Refused())
			}
			if !r.prov.SawSecret(houseKey) {
				t.Error("the provider never saw the house key")
			}
			per, cost := callUsage(fam)
			tot := r.proxy.Totals()
			if tot.Calls != n || tot.Tokens != times(per, n) || !tot.Priced || tot.MicroUSD != n*cost || tot.Unmetered != 0 {
				t.Errorf("totals %+v, want %d calls of %+v at %d µ$", tot, n, per, cost)
			}
			if m := tot.Models[modelOf(fam)]; m.Calls != n || m.Tokens != tot.Tokens || m.MicroUSD != tot.MicroUSD {
				t.Errorf("model totals %+v", tot.Models)
			}
			r.mu.Lock()
			if len(r.usages) != int(n) || r.usages[0].Calls != 1 || r.usages[1].Tokens != tot.Tokens {
				t.Errorf("OnUsage saw %+v", r.usages)
			}
			r.mu.Unlock()
			rep := tot.Report()
			if err := protocol.ValidUsageReport(protocol.UsageReport{Source: "w-1", Model: rep.Model, Tokens: rep.Tokens, Cost: rep.Cost}); err != nil {
				t.Errorf("report %+v: %v", rep, err)
			}
			if rep.Model != modelOf(fam) || *rep.Tokens.Input != per.Input*n || *rep.Tokens.CacheRead != per.CacheRead*n ||
				rep.Cost == nil || rep.Cost.Amount != cost*n || rep.Cost.Basis != protocol.BasisComputed {
				t.Errorf("report %+v", rep)
			}
			if (fam == modelproxy.OpenAI) != (rep.Tokens.CacheWrite == nil) {
				t.Errorf("cache writes: %v (OpenAI states none)", rep.Tokens.CacheWrite)
			}
		})
	}
}

// An OpenAI upstream with a path (a gateway's) gets the path after the
// agent's /v1.
func TestUpstreamPath(t *testing.T) {
	prov := providerstandin.New(houseKey, nil)
	t.Cleanup(prov.Close)
	gw := httptest.NewServer(http.StripPrefix("/gateway/openai", prov.Config.Handler))
	t.Cleanup(gw.Close)
	p, err := modelproxy.New(modelproxy.OpenAI, houseKey, workerToken, modelproxy.WithUpstream(gw.URL+"/gateway/openai/v1/"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	resp, body := do(t, request(modelproxy.OpenAI, srv.URL+"/v1", workerToken, openaiModel, true))
	if resp.StatusCode != http.StatusOK || len(prov.Calls()) != 1 || p.Totals().Calls != 1 {
		t.Fatalf("%d %s; provider calls %v", resp.StatusCode, body, prov.Calls())
	}
}

// errorBody is either family's error shape.
type errorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, fam modelproxy.Family, b []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || (fam == modelproxy.Anthropic) != (e.Type == "error") {
		t.Fatalf("not %s's error shape: %s", fam, b)
	}
	return e
}

// A request without the worker's token is refused 401 in the provider's
// shape and never reaches the provider; so is every request after Close.
func TestToken(t *testing.T) {
	for _, fam := range []modelproxy.Family{modelproxy.Anthropic, modelproxy.OpenAI} {
		t.Run(string(fam), func(t *testing.T) {
			r := newRig(t, fam)
			for _, tok := range []string{"", "wrong-" + workerToken, workerToken[:len(workerToken)-1], houseKey, workerToken + "x"} {
				resp, b := do(t, request(fam, r.url, tok, modelOf(fam), false))
				e := decodeError(t, fam, b)
				if resp.StatusCode != http.StatusUnauthorized || (tok != "" && strings.Contains(string(b), tok)) {
					t.Errorf("token %q: %d %s", tok, resp.StatusCode, b)
				}
				if fam == modelproxy.Anthropic && e.Error.Type != "authentication_error" || fam == modelproxy.OpenAI && e.Error.Code != "invalid_api_key" {
					t.Errorf("error %+v", e)
				}
			}
			if fam == modelproxy.Anthropic {
				// claude's ANTHROPIC_AUTH_TOKEN: a bearer token.
				req := request(fam, r.url, "", claudeModel, false)
				req.Header.Del("x-api-key")
				req.Header.Set("Authorization", "Bearer "+workerToken)
				if resp, b := do(t, req); resp.StatusCode != http.StatusOK {
					t.Errorf("bearer: %d %s", resp.StatusCode, b)
				}
			}
			if resp, b := r.call(t, modelOf(fam), false); resp.StatusCode != http.StatusOK {
				t.Fatalf("with the token: %d %s", resp.StatusCode, b)
			}
			calls := len(r.prov.Calls())
			r.proxy.Close()
			if resp, b := r.call(t, modelOf(fam), false); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("after Close: %d %s", resp.StatusCode, b)
			}
			if len(r.prov.Calls()) != calls || r.prov.SawWrongKey() || r.prov.SawSecret(workerToken) {
				t.Errorf("the provider saw a refused request: %d calls, wrong key %v", len(r.prov.Calls()), r.prov.SawWrongKey())
			}
		})
	}
}

// Only the family's API is served: other paths, and codex's WebSocket,
// are 404 in the provider's shape; count_tokens goes through uncounted.
func TestRoutes(t *testing.T) {
	a := newRig(t, modelproxy.Anthropic)
	req, _ := http.NewRequest(http.MethodPost, a.url+"/v1/messages/count_tokens", strings.NewReader(`{"model":"claude-sonnet-5-5","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("x-api-key", workerToken)
	req.Header.Set("anthropic-version", "2023-06-01")
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"input_tokens"`) {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, b)
	}
	for _, path := range []string{"/v1/complete", "/v1/messages/batches", "/../v1/messages", "/api/hello"} {
		req, _ := http.NewRequest(http.MethodPost, a.url+path, strings.NewReader("{}"))
		req.Header.Set("x-api-key", workerToken)
		resp, b := do(t, req)
		if e := decodeError(t, modelproxy.Anthropic, b); resp.StatusCode != http.StatusNotFound || e.Error.Type != "not_found_error" {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if a.proxy.Totals().Calls != 0 || len(a.prov.Refused()) != 0 {
		t.Errorf("totals %+v; provider refused %v", a.proxy.Totals(), a.prov.Refused())
	}

	o := newRig(t, modelproxy.OpenAI)
	for _, tc := range []struct{ method, path string }{{"POST", "/v1/chat/completions"}, {"GET", "/v1/responses"}, {"POST", "/responses"}, {"GET", "/v1/files"}} {
		req, _ := http.NewRequest(tc.method, strings.TrimSuffix(o.url, "/v1")+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+workerToken)
		if tc.path == "/v1/responses" {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		resp, b := do(t, req)
		decodeError(t, modelproxy.OpenAI, b)
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
		}
	}
	if len(o.prov.Calls()) != 0 || len(o.prov.Refused()) != 0 {
		t.Errorf("the provider got %v, refused %v", o.prov.Calls(), o.prov.Refused())
	}
}

// At the token cap the next call is refused before it reaches the
// provider, with galley's message, a status the CLIs do not retry, and the
// first-refusal hook called once.
func TestTokenCap(t *testing.T) {
	for _, fam := range []modelproxy.Family{modelproxy.Anthropic, modelproxy.OpenAI} {
		t.Run(string(fam), func(t *testing.T) {
			per, _ := callUsage(fam)
			all := per.Input + per.Output + per.CacheRead + per.CacheWrite
			r := newRig(t, fam, modelproxy.WithBudget(modelproxy.Budget{Tokens: 2 * all}))
			for i := range 2 {
				if resp, b := r.call(t, modelOf(fam), i == 1); resp.StatusCode != http.StatusOK {
					t.Fatalf("call %d under the cap: %d %s", i, resp.StatusCode, b)
				}
			}
			want := fmt.Sprintf("galley: this worker has used its model budget (%d of %d tokens); ask the coordinator", 2*all, 2*all)
			for i := range 3 {
				resp, b := r.call(t, modelOf(fam), i%2 == 0)
				e := decodeError(t, fam, b)
				if resp.StatusCode != capStatus(fam) || e.Error.Message != want || resp.Header.Get("X-Should-Retry") != "false" {
					t.Errorf("at the cap: %d %s", resp.StatusCode, b)
				}
			}
			// Refusals at once: each refused, the hook still called once.
			var wg sync.WaitGroup
			for range modelproxy.DefaultMaxConcurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := http.DefaultClient.Do(request(fam, r.url, workerToken, modelOf(fam), true))
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
					if resp.StatusCode != capStatus(fam) {
						t.Errorf("a concurrent call at the cap: %d", resp.StatusCode)
					}
				}()
			}
			wg.Wait()
			if got := len(r.prov.Calls()); got != 2 {
				t.Errorf("the provider got %d calls, want 2", got)
			}
			tot := r.proxy.Totals()
			r.mu.Lock()
			defer r.mu.Unlock()
			if tot.Refused != 3+modelproxy.DefaultMaxConcurrent || tot.All() != 2*all || len(r.refusal) != 1 || r.refusal[0].Message != want || r.refusal[0].Totals.Calls != 2 {
				t.Errorf("totals %+v, refusals %+v", tot, r.refusal)
			}
		})
	}
}

// A dollar cap refuses at the cost reached, refuses a model without a
// price before it runs, and refuses everything once a model without a
// price has run.
func TestDollarCap(t *testing.T) {
	r := newRig(t, modelproxy.Anthropic, modelproxy.WithBudget(modelproxy.Budget{MicroUSD: 1000}))
	for i := range 3 { // 480, 960 (under 1000), 1440
		if resp, b := r.call(t, claudeModel, true); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := r.call(t, claudeModel, false)
	if e := decodeError(t, modelproxy.Anthropic, b); resp.StatusCode != http.StatusPaymentRequired ||
		e.Error.Message != "galley: this worker has used its model budget ($0.001440 of $0.001000); ask the coordinator" || e.Error.Type != "billing_error" {
		t.Errorf("past the dollar cap: %d %s", resp.StatusCode, b)
	}

	r = newRig(t, modelproxy.OpenAI, modelproxy.WithBudget(modelproxy.Budget{MicroUSD: 1_000_000}))
	resp, b = r.call(t, "gpt-6.2-sol", true)
	if e := decodeError(t, modelproxy.OpenAI, b); resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error.Message, "no price for model gpt-6.2-sol") ||
		!strings.HasPrefix(e.Error.Message, "galley: ") || len(r.prov.Calls()) != 0 {
		t.Errorf("an unpriced model under a dollar cap: %d %s (provider calls %d)", resp.StatusCode, b, len(r.prov.Calls()))
	}
	if len(r.refusal) != 1 {
		t.Errorf("refusals %+v", r.refusal)
	}

	// A request whose model the proxy could not read first (past its
	// peek) runs once; its answer names an unpriced model, and the next
	// call is refused.
	r = newRig(t, modelproxy.OpenAI, modelproxy.WithBudget(modelproxy.Budget{MicroUSD: 1_000_000}))
	body := `{"input":[{"type":"message","role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}],"model":"gpt-6.2-sol"}`
	req, _ := http.NewRequest(http.MethodPost, r.url+"/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+workerToken)
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if tot := r.proxy.Totals(); tot.Priced || tot.Report().Cost != nil {
		t.Errorf("an unpriced model's totals: %+v", tot)
	}
	resp, b = r.call(t, openaiModel, false)
	if e := decodeError(t, modelproxy.OpenAI, b); resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error.Message, "no price for gpt-6.2-sol, which it used") {
		t.Errorf("after an unpriced model ran: %d %s", resp.StatusCode, b)
	}
}

// gate is an upstream that forwards to the stand-in only when released
// (or, with firstEvent, sends the stream's first event and then waits).
type gate struct {
	next    http.Handler
	arrived chan struct{}
	release chan struct{}
}

func newGate(next http.Handler) *gate {
	return &gate{next: next, arrived: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.arrived <- struct{}{}
	<-g.release
	g.next.ServeHTTP(w, r)
}

// Calls past the concurrency bound are refused 429 (the CLIs retry it)
// while the others are in flight; afterwards calls go again.
func TestConcurrencyBound(t *testing.T) {
	prov := providerstandin.New(houseKey, nil)
	t.Cleanup(prov.Close)
	g := newGate(prov.Config.Handler)
	up := httptest.NewServer(g)
	t.Cleanup(up.Close)
	p, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.WithUpstream(up.URL), modelproxy.WithMaxConcurrent(2))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(request(modelproxy.Anthropic, srv.URL, workerToken, claudeModel, true))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}
		}()
	}
	<-g.arrived
	<-g.arrived
	resp, b := do(t, request(modelproxy.Anthropic, srv.URL, workerToken, claudeModel, true))
	if e := decodeError(t, modelproxy.Anthropic, b); resp.StatusCode != http.StatusTooManyRequests || e.Error.Type != "rate_limit_error" {
		t.Errorf("a third call in flight: %d %s", resp.StatusCode, b)
	}
	close(g.release)
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Errorf("a call in flight ended %d", c)
		}
	}
	if resp, b := do(t, request(modelproxy.Anthropic, srv.URL, workerToken, claudeModel, false)); resp.StatusCode != http.StatusOK {
		t.Errorf("after: %d %s", resp.StatusCode, b)
	}
	if got := p.Totals().Calls; got != 3 {
		t.Errorf("%d calls counted, want 3", got)
	}
}

// A body over the bound is refused 413, whether it states its length or
// streams past the bound.
func TestBodyBound(t *testing.T) {
	const bound = 100 << 10
	r := newRig(t, modelproxy.OpenAI, modelproxy.WithMaxBody(bound))
	big := `{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"` + strings.Repeat("x", 2*bound) + `"}]}`
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(big)
		if chunked {
			body = io.MultiReader(body) // no length: sent chunked
		}
		req, _ := http.NewRequest(http.MethodPost, r.url+"/responses", body)
		req.Header.Set("Authorization", "Bearer "+workerToken)
		resp, b := do(t, req)
		if e := decodeError(t, modelproxy.OpenAI, b); resp.StatusCode != http.StatusRequestEntityTooLarge || e.Error.Code != "request_too_large" {
			t.Errorf("chunked %v: %d %s", chunked, resp.StatusCode, b)
		}
	}
	if len(r.prov.Calls()) != 0 || r.proxy.Totals().Calls != 0 {
		t.Errorf("an oversized request was answered: %v", r.prov.Calls())
	}
	// Just under the bound goes through.
	small := `{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"` + strings.Repeat("x", bound-200) + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, r.url+"/responses", strings.NewReader(small))
	req.Header.Set("Authorization", "Bearer "+workerToken)
	if resp, b := do(t, req); resp.StatusCode != http.StatusOK {
		t.Errorf("under the bound: %d %s", resp.StatusCode, b)
	}
}

// An answer the agent stops reading is still read to its end for its
// usage: the provider bills it all the same.
func TestCountsAnAbandonedStream(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-api-key") != houseKey {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":1000,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4000}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	t.Cleanup(up.Close)
	counted := make(chan modelproxy.Totals, 1)
	p, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.WithUpstream(up.URL),
		modelproxy.OnUsage(func(t modelproxy.Totals) { counted <- t }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	resp, err := http.DefaultClient.Do(request(modelproxy.Anthropic, srv.URL, workerToken, "claude-opus-5", true))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	resp.Body.Close() // the agent goes away mid-stream
	close(release)
	select {
	case tot := <-counted:
		if tot.Tokens != (modelproxy.Tokens{Input: 1000, Output: 4000}) {
			t.Errorf("counted %+v", tot.Tokens)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the abandoned call was never counted")
	}
}

// A silence inside an answer past the idle timeout ends the call; what
// was stated is counted.
func TestIdleTimeout(t *testing.T) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(up.Close)
	p, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.WithUpstream(up.URL),
		modelproxy.WithTimeouts(time.Minute, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	resp, err := http.DefaultClient.Do(request(modelproxy.Anthropic, srv.URL, workerToken, "claude-opus-5", true))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // ends when the proxy cuts the call
	resp.Body.Close()
	if tot := p.Totals(); tot.Calls != 1 || tot.Tokens.Input != 10 {
		t.Errorf("totals %+v", tot)
	}
}

func TestNewRefuses(t *testing.T) {
	for name, f := range map[string]func() (*modelproxy.Proxy, error){
		"unknown family": func() (*modelproxy.Proxy, error) { return modelproxy.New("gemini", houseKey, workerToken) },
		"no house key":   func() (*modelproxy.Proxy, error) { return modelproxy.New(modelproxy.OpenAI, "", workerToken) },
		"short token":    func() (*modelproxy.Proxy, error) { return modelproxy.New(modelproxy.OpenAI, houseKey, "abc") },
		"token is key":   func() (*modelproxy.Proxy, error) { return modelproxy.New(modelproxy.OpenAI, houseKey, houseKey) },
		"upstream query": func() (*modelproxy.Proxy, error) {
			return modelproxy.New(modelproxy.OpenAI, houseKey, workerToken, modelproxy.WithUpstream("https://x/v1?a=b"))
		},
		"upstream scheme": func() (*modelproxy.Proxy, error) {
			return modelproxy.New(modelproxy.OpenAI, houseKey, workerToken, modelproxy.WithUpstream("ftp://x"))
		},
		"negative budget": func() (*modelproxy.Proxy, error) {
			return modelproxy.New(modelproxy.OpenAI, houseKey, workerToken, modelproxy.WithBudget(modelproxy.Budget{Tokens: -1}))
		},
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), houseKey) {
			t.Errorf("%s: the error holds the key: %v", name, err)
		}
	}
	tok, err := modelproxy.NewToken()
	if err != nil || len(tok) < 40 {
		t.Fatalf("NewToken: %q %v", tok, err)
	}
	if tok2, _ := modelproxy.NewToken(); tok2 == tok {
		t.Error("two tokens alike")
	}
}

// An agent that stops reading a stream holds its call no longer than the
// idle timeout: the proxy's write to it times out, the rest of the answer
// is read (to its bound) for the usage, and the provider's call ends.
func TestAgentStopsReading(t *testing.T) {
	ended := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
		ping := []byte(strings.Repeat("event: ping\ndata: {\"type\": \"ping\"}\n\n", 1000))
		for {
			if _, err := w.Write(ping); err != nil {
				return
			}
		}
	}))
	t.Cleanup(up.Close)
	p, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.WithUpstream(up.URL),
		modelproxy.WithTimeouts(time.Minute, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	resp, err := http.DefaultClient.Do(request(modelproxy.Anthropic, srv.URL, workerToken, "claude-opus-5", true))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // read nothing
	select {
	case <-ended:
	case <-time.After(time.Minute): // a bound against a hang, not a time to meet
		t.Fatal("the provider's call never ended")
	}
	deadline := time.Now().Add(time.Minute)
	for p.Totals().Calls == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tot := p.Totals(); tot.Calls != 1 || tot.Tokens.Input != 10 {
		t.Errorf("totals %+v", tot)
	}
}

// A proxy that counts on from an earlier one's totals (a parked worker,
// resumed) reports totals over both, prices on from the earlier cost, and
// holds the cap against both; a count it cannot go on from is refused.
func TestCountingFrom(t *testing.T) {
	first := newRig(t, modelproxy.Anthropic)
	for i := range 2 {
		if resp, b := first.call(t, claudeModel, i == 0); resp.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
	}
	// The count as a parking keeps it: through JSON.
	raw, err := json.Marshal(first.proxy.Totals())
	if err != nil {
		t.Fatal(err)
	}
	var kept modelproxy.Totals
	if err := json.Unmarshal(raw, &kept); err != nil {
		t.Fatal(err)
	}
	per, _ := callUsage(modelproxy.Anthropic)
	all := per.Input + per.Output + per.CacheRead + per.CacheWrite
	second := newRig(t, modelproxy.Anthropic, modelproxy.CountingFrom(kept), modelproxy.WithBudget(modelproxy.Budget{Tokens: 3 * all}))
	if resp, b := second.call(t, claudeModel, true); resp.StatusCode != http.StatusOK {
		t.Fatalf("the resumed call: %d %s", resp.StatusCode, b)
	}
	tot := second.proxy.Totals()
	if tot.Calls != 3 || tot.Tokens != times(per, 3) || !tot.Priced || tot.MicroUSD != 3*messagesCallMicroUSD || tot.Models[claudeModel].Calls != 3 {
		t.Errorf("totals after the resume %+v, want 3 calls' worth", tot)
	}
	second.mu.Lock()
	if n := len(second.usages); n == 0 || second.usages[n-1].Calls != 3 {
		t.Errorf("the usage hook saw %+v", second.usages)
	}
	second.mu.Unlock()
	if resp, b := second.call(t, claudeModel, false); resp.StatusCode != capStatus(modelproxy.Anthropic) {
		t.Errorf("past the cap counted over both proxies: %d %s", resp.StatusCode, b)
	}
	for name, bad := range map[string]modelproxy.Totals{
		"another family": {Family: modelproxy.OpenAI},
		"negative":       {Calls: -1},
		"negative model": {Models: map[string]modelproxy.ModelTotals{"m": {Tokens: modelproxy.Tokens{Input: -5}}}},
	} {
		if _, err := modelproxy.New(modelproxy.Anthropic, houseKey, workerToken, modelproxy.CountingFrom(bad)); err == nil {
			t.Errorf("%s: a count to go on from was taken", name)
		}
	}
}
