package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/service/servicetest"
)

const token = "test-token-5f1c9a"

type harness struct {
	srv  *httptest.Server
	env  *servicetest.Env
	logs *bytes.Buffer
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	env := servicetest.New(t, nil)
	logs := &bytes.Buffer{}
	h := api.New(api.WithService(env.Service), api.WithAuthenticator(api.StaticToken(token)),
		api.WithLogger(slog.New(slog.NewJSONHandler(logs, nil))))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &harness{srv: srv, env: env, logs: logs}
}

func (h *harness) do(t *testing.T, method, path string, body io.Reader, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func envelope(key, effect string) string {
	return fmt.Sprintf(`{"run":"run-1","request":{"house":"origin89","backend":"galley","credential":"galley-token","task":"issue-1","attempt":1,"key":%q,"effect":{"executor":"worker","effect":%s}}}`, key, effect)
}

const launch = `{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"go"}`

func TestAuthComesFirst(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		auth string
		want int
	}{{"", 401}, {"Basic abc", 401}, {"Bearer wrong", 401}, {"Bearer " + token + "x", 401}} {
		for _, route := range []struct{ method, path, body string }{
			{"GET", "/v1/descriptor", ""}, {"POST", "/v1/effects", envelope("k-auth", launch)},
			{"POST", "/v1/deliveries/next", `{"run":"r","coordinator":"c"}`},
		} {
			req, _ := http.NewRequest(route.method, h.srv.URL+route.path, strings.NewReader(route.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s with %q: %d, want %d", route.method, route.path, tc.auth, resp.StatusCode, tc.want)
			}
		}
	}
	if h.env.Runtime.StartCount() != 0 {
		t.Fatal("an unauthenticated effect started a worker")
	}
	if strings.Contains(h.logs.String(), token) || strings.Contains(h.logs.String(), "wrong") {
		t.Fatal("a token reached the log")
	}
}

// TestBadInputGetsDefiniteAnswers: malformed JSON is 400, everything
// well-formed but invalid is 200 not-applied rejected, oversized bodies are
// refused early, and the server keeps serving.
func TestBadInputGetsDefiniteAnswers(t *testing.T) {
	h := newHarness(t)
	long := strings.Repeat("a", 257)
	cases := []struct {
		name, body string
		status     int
		reason     string
	}{
		{"not json", `{"run":`, 400, ""},
		{"json array", `[1,2]`, 400, ""},
		{"unknown envelope field", strings.Replace(envelope("k-1", launch), `"run":"run-1"`, `"run":"run-1","extra":1`, 1), 200, "rejected"},
		{"key too long", envelope(long, launch), 200, "rejected"},
		{"key with space", envelope("k 1", launch), 200, "rejected"},
		{"bad house id", strings.Replace(envelope("k-2", launch), `"house":"origin89"`, `"house":"or igin"`, 1), 200, "rejected"},
		{"other house", strings.Replace(envelope("k-3", launch), `"house":"origin89"`, `"house":"other"`, 1), 200, "cross-house"},
		{"other backend", strings.Replace(envelope("k-4", launch), `"backend":"galley"`, `"backend":"sandbox"`, 1), 200, "foreign-backend"},
		{"github executor", strings.Replace(envelope("k-5", launch), `"executor":"worker"`, `"executor":"github"`, 1), 200, "unsupported"},
		{"bad role", envelope("k-6", strings.Replace(launch, "commis", "captain", 1)), 200, "rejected"},
		{"empty brief", envelope("k-7", strings.Replace(launch, `"brief":"go"`, `"brief":""`, 1)), 200, "rejected"},
		{"brief over 64 KiB", envelope("k-8", strings.Replace(launch, `"brief":"go"`, `"brief":"`+strings.Repeat("x", 64<<10+1)+`"`, 1)), 200, "rejected"},
		{"bad branch", envelope("k-9", strings.Replace(launch, `"brief":"go"`, `"brief":"go","branch":"a..b"`, 1)), 200, "rejected"},
		{"model with space", envelope("k-10", strings.Replace(launch, `"brief":"go"`, `"brief":"go","agent":{"agent":"codex","model":"a b"}`, 1)), 200, "rejected"},
		{"unknown effect field", envelope("k-11", strings.Replace(launch, `"brief":"go"`, `"brief":"go","color":"red"`, 1)), 200, "rejected"},
		{"message without body", envelope("k-12", `{"type":"message-worker","worker":{"kind":"worker","backend":"galley","handle":"w-1"}}`), 200, "rejected"},
		{"resource of unknown kind", envelope("k-13", `{"type":"release-resource","resource":{"kind":"volume","backend":"galley","handle":"v"}}`), 200, "rejected"},
		{"brief with NUL", envelope("k-14", strings.Replace(launch, `"brief":"go"`, `"brief":"a\u0000b"`, 1)), 200, "rejected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, body := h.do(t, "POST", "/v1/effects", strings.NewReader(tc.body))
			if st != tc.status {
				t.Fatalf("status %d, want %d: %s", st, tc.status, body)
			}
			if tc.reason != "" {
				var out struct{ Status, Reason string }
				if err := json.Unmarshal([]byte(body), &out); err != nil || out.Status != "not-applied" || out.Reason != tc.reason {
					t.Fatalf("answer %s, want not-applied %s", body, tc.reason)
				}
			}
		})
	}
	// Header and body keys differ: rejected.
	st, body := h.do(t, "POST", "/v1/effects", strings.NewReader(envelope("k-h", launch)), "Idempotency-Key", "k-other")
	if st != 200 || !strings.Contains(body, `"reason":"rejected"`) {
		t.Fatalf("differing Idempotency-Key: %d %s", st, body)
	}
	if n := h.env.Runtime.StartCount(); n != 0 {
		t.Fatalf("bad input started %d workers", n)
	}
	// Still serving, and a good request applies.
	st, body = h.do(t, "POST", "/v1/effects", strings.NewReader(envelope("k-good", launch)), "Idempotency-Key", "k-good")
	if st != 200 || !strings.Contains(body, `"status":"applied"`) {
		t.Fatalf("good launch after bad input: %d %s", st, body)
	}
}

// TestOversizedBodyRefusedEarly sends a body far over the bound and checks
// the answer is 413 and the server did not need to read it whole.
func TestOversizedBodyRefusedEarly(t *testing.T) {
	h := newHarness(t)
	// Declared length over the bound: refused before reading.
	st, _ := h.do(t, "POST", "/v1/effects", bytes.NewReader(make([]byte, api.MaxBody+1)))
	if st != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared oversized body: %d", st)
	}
	// Chunked, undeclared length: cut at the bound. The reader counts what
	// the server pulled.
	r := &countingReader{left: 64 << 20}
	req, _ := http.NewRequest("POST", h.srv.URL+"/v1/deliveries/next", r)
	req.Header.Set("Authorization", "Bearer "+token)
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked oversized body: %d", resp.StatusCode)
		}
	}
	if n := r.read.Load(); n > 8<<20 {
		t.Fatalf("server read %d bytes of an oversized body", n)
	}
	if st, _ := h.do(t, "GET", "/v1/descriptor", nil); st != 200 {
		t.Fatal("server stopped serving")
	}
}

type countingReader struct {
	left int
	read atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.left)
	for i := range p[:n] {
		p[i] = ' '
	}
	c.left -= n
	c.read.Add(int64(n))
	return n, nil
}

func TestReadsRefuseBadInputWithoutInference(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ path, body string }{
		{"/v1/workers/observe", `{"worker":{"kind":"worker","backend":"galley"}}`},
		{"/v1/workers/observe", `{"worker":{"kind":"worker","backend":"galley","handle":"w"},"x":1}`},
		{"/v1/deliveries/next", `{"run":"r"}`},
		{"/v1/deliveries/acknowledge", `{"run":"r","coordinator":"c"}`},
		{"/v1/deliveries/await", `{"run":"r","coordinator":"c","waitMs":-1}`},
		{"/v1/runs/adopt", `{"run":"r","coordinator":"c","delivery":"d-1"}`},
	} {
		st, body := h.do(t, "POST", tc.path, strings.NewReader(tc.body))
		if st != 400 {
			t.Errorf("%s %s: %d %s, want 400", tc.path, tc.body, st, body)
		}
	}
	if st, body := h.do(t, "POST", "/v1/runs/adopt", strings.NewReader(`{"run":"r","coordinator":"c"}`)); st != 200 || body != "{}" {
		t.Fatalf("adopt = %d %q, want exactly {}", st, body)
	}
}

func TestDescriptorDeclaresWhatIsServed(t *testing.T) {
	h := newHarness(t)
	st, body := h.do(t, "GET", "/v1/descriptor", nil)
	if st != 200 {
		t.Fatal(st)
	}
	var d struct {
		Backend, House  string
		Capabilities    map[string]string
		WorkerSelection *struct {
			Families []string
			Model    bool
			Effort   string
		}
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"worker.launch_isolated", "worker.launch_readiness", "worker.status_and_outcome",
		"worker.messaging", "worker.cancel", "worker.deliveries", "run.transfer", "resource.inventory",
		"resource.release", "usage.attribution", "effect.lookup", "effect.idempotent_requests"} {
		if d.Capabilities[c] != "supported" {
			t.Errorf("capability %s = %q", c, d.Capabilities[c])
		}
	}
	if d.House != "origin89" || d.Backend != "galley" || d.WorkerSelection == nil {
		t.Fatalf("descriptor %s", body)
	}
}
