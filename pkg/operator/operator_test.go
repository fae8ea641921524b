package operator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// actions records the actions the handler takes.
type actions struct {
	mu        sync.Mutex
	cancelled []string
}

func (a *actions) OperatorWorkers(context.Context) ([]store.Resource, error) { return nil, nil }
func (a *actions) OperatorCancel(_ context.Context, h string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelled = append(a.cancelled, h)
	return nil
}
func (a *actions) RevokeWorkerCredential(context.Context, string) error { return nil }

func newHandler(t *testing.T) (*httptest.Server, *actions) {
	a := &actions{}
	st := memstore.New()
	h := operator.New([]byte("operator-secret-token"), a, st, st, localbell.New(), nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, a
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// The login answers an HttpOnly, SameSite=Strict cookie that is not the
// token; an action with that cookie needs the CSRF header and this
// site's Origin; a wrong token or none is 401.
func TestSessionAndCSRF(t *testing.T) {
	srv, a := newHandler(t)
	if r := do(t, srv, "POST", operator.PathLogin, `{"token":"operator-secret-token"}`); r.StatusCode != http.StatusForbidden {
		t.Errorf("a login without the CSRF header: %d, want 403", r.StatusCode)
	}
	if r := do(t, srv, "POST", operator.PathLogin, `{"token":"wrong"}`, operator.CSRFHeader, "1"); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("a login with a wrong token: %d, want 401", r.StatusCode)
	}
	r := do(t, srv, "POST", operator.PathLogin, `{"token":"operator-secret-token"}`, operator.CSRFHeader, "1", "Origin", srv.URL)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("login: %d", r.StatusCode)
	}
	var c *http.Cookie
	for _, k := range r.Cookies() {
		c = k
	}
	if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || strings.Contains(c.Value, "operator-secret-token") {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not the token", c)
	}
	cookie := c.Name + "=" + c.Value
	if r := do(t, srv, "GET", operator.PathWorkers, "", "Cookie", cookie); r.StatusCode != http.StatusOK {
		t.Errorf("a read with the cookie: %d", r.StatusCode)
	}
	cancelPath := operator.PathWorkers + "/w-1/cancel"
	for _, h := range [][]string{
		{"Cookie", cookie},
		{"Cookie", cookie, operator.CSRFHeader, "1", "Origin", "https://evil.example"},
	} {
		if r := do(t, srv, "POST", cancelPath, "", h...); r.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site cancel %v: %d, want 403", h, r.StatusCode)
		}
	}
	if r := do(t, srv, "POST", cancelPath, "", "Cookie", cookie, operator.CSRFHeader, "1", "Origin", srv.URL); r.StatusCode != http.StatusOK {
		t.Errorf("a same-site cancel: %d", r.StatusCode)
	}
	if r := do(t, srv, "POST", cancelPath, "", "Authorization", "Bearer operator-secret-token"); r.StatusCode != http.StatusOK {
		t.Errorf("a cancel with the bearer token: %d", r.StatusCode)
	}
	for _, h := range [][]string{{"Authorization", "Bearer wrong"}, {"Cookie", "galley_operator=forged"}, {}} {
		if r := do(t, srv, "POST", cancelPath, "", h...); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("a cancel with %v: %d, want 401", h, r.StatusCode)
		}
	}
	if len(a.cancelled) != 2 {
		t.Errorf("cancels taken: %v, want the two allowed", a.cancelled)
	}
}

// The console's files carry a strict Content-Security-Policy: no inline
// script or style, nothing from elsewhere.
func TestConsoleHeaders(t *testing.T) {
	srv, _ := newHandler(t)
	for _, p := range []string{"/operator/", "/operator/app.js", "/operator/app.css"} {
		r := do(t, srv, "GET", p, "")
		csp := r.Header.Get("Content-Security-Policy")
		if r.StatusCode != 200 || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
			!strings.Contains(csp, "default-src 'none'") || r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d, CSP %q", p, r.StatusCode, csp)
		}
	}
	if !operator.Owns("/operator/v1/workers") || operator.Owns("/operator/../v1/descriptor") || operator.Owns("/v1/descriptor") {
		t.Error("Owns claims the wrong paths")
	}
}

// Behind API Gateway and Lambda (WithPollOnly) the stream route is
// refused and the session tells the console to long poll; the console
// is also served at PathConsole, where /operator redirects.
func TestPollOnly(t *testing.T) {
	st := memstore.New()
	h := operator.New([]byte("operator-secret-token"), &actions{}, st, st, localbell.New(), nil, operator.WithPollOnly())
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	auth := []string{"Authorization", "Bearer operator-secret-token"}
	if r := do(t, srv, "GET", operator.PathWorkers+"/w-1/stream", "", auth...); r.StatusCode != http.StatusNotFound {
		t.Errorf("stream: %d, want 404", r.StatusCode)
	}
	if a := session(t, srv, auth); !a.OK || a.Live != operator.LivePoll {
		t.Errorf("session: %+v, want live %q", a, operator.LivePoll)
	}
	if r := do(t, srv, "GET", operator.PathConsole, ""); r.StatusCode != http.StatusOK || r.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("console: %d", r.StatusCode)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(srv.URL + "/operator")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != operator.PathConsole {
		t.Errorf("/operator: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	// Without the option, the session says stream.
	local, _ := newHandler(t)
	if a := session(t, local, auth); a.Live != operator.LiveStream {
		t.Errorf("local session: %+v, want live %q", a, operator.LiveStream)
	}
}

func session(t *testing.T, srv *httptest.Server, auth []string) operator.SessionAnswer {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+operator.PathSession, nil)
	req.Header.Set(auth[0], auth[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a operator.SessionAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// Follow asks a throttled poll (API Gateway's 429) again from the same
// cursor, and ends on an error that is no throttle.
func TestFollowRetriesThrottles(t *testing.T) {
	var mu sync.Mutex
	var afters []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		afters = append(afters, r.URL.Query().Get("after"))
		n := len(afters)
		mu.Unlock()
		switch n {
		case 1:
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"message":"Too Many Requests"}`))
		case 2:
			_, _ = w.Write([]byte(`{"events":[{"seq":1,"kind":"state"},{"seq":2,"kind":"mailbox"}],"next":2}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"the operator token is missing or wrong"}`))
		}
	}))
	t.Cleanup(srv.Close)
	var got []int64
	err := operator.NewClient(srv.URL, "t").Follow(context.Background(), "w-1", 0, func(e store.Event) bool {
		got = append(got, e.Seq)
		return true
	})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Errorf("follow ended with %v, want the 401", err)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 2 || strings.Join(afters, ",") != "0,0,2" {
		t.Errorf("events %v, cursors asked %v; want 1, 2 and cursors 0, 0, 2", got, afters)
	}
}
