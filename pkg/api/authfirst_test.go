package api_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
)

// countingAuth counts the token checks, so a test can tell that a request
// was authenticated, and how often.
type countingAuth struct {
	api.StaticToken
	checks atomic.Int64
}

func (c *countingAuth) Authenticate(ctx context.Context, token string) bool {
	c.checks.Add(1)
	return c.StaticToken.Authenticate(ctx, token)
}

func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func send(t *testing.T, url, method, path, auth, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	req.Header.Set("Content-Type", "application/json")
	// A client that follows no redirect, as kitchn: a 3xx is an answer.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAuthenticationBeforeRouting: every /v1/ request is authenticated
// before it is routed, so a wrong or missing token is 401 whatever the path
// (the protocol: 401 or 403 "before doing anything else"), and only the
// right token learns that a path does not exist (404). The served routes
// answer as before, each authenticated once; the worker routes keep their
// own credential and never take kitchn's check.
func TestAuthenticationBeforeRouting(t *testing.T) {
	good := randomToken(t)
	auth := &countingAuth{StaticToken: api.StaticToken(good)}
	env := servicetest.New(t, nil)
	srv := httptest.NewServer(api.New(api.WithService(env.Service), api.WithAuthenticator(auth)))
	t.Cleanup(srv.Close)

	unknown := []struct{ method, path string }{
		{"GET", "/v1/nothing"}, {"POST", "/v1/nothing/deeper"}, {"POST", "/v1/effects/unknown"},
		{"GET", "/v1/effects"}, {"DELETE", "/v1/descriptor"}, {"POST", "/v1/"}, {"GET", "/v1"},
		// Paths that clean to a /v1/ path are /v1/ paths too: no redirect
		// is answered before the token is checked.
		{"GET", "//v1/descriptor"}, {"GET", "/worker/../v1/descriptor"},
	}
	for _, u := range unknown {
		for _, a := range []struct{ name, header string }{
			{"no token", ""}, {"not a bearer token", "Basic " + randomToken(t)},
			{"wrong token", "Bearer " + randomToken(t)}, {"right token with a suffix", "Bearer " + good + "x"},
		} {
			st, hdr, body := send(t, srv.URL, u.method, u.path, a.header, "{}")
			if st != http.StatusUnauthorized {
				t.Errorf("%s %s with %s: %d %s, want 401", u.method, u.path, a.name, st, body)
			}
			if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s with %s: WWW-Authenticate %q, want a Bearer challenge", u.method, u.path, a.name, hdr.Get("WWW-Authenticate"))
			}
		}
	}
	for _, u := range unknown[:7] {
		st, _, body := send(t, srv.URL, u.method, u.path, "Bearer "+good, "{}")
		if st != http.StatusNotFound {
			t.Errorf("%s %s with the right token: %d %s, want 404", u.method, u.path, st, body)
		}
	}

	// The known routes: refused the same way without the right token, and
	// served with it, each request checked exactly once.
	for _, a := range []string{"", "Bearer " + randomToken(t)} {
		if st, _, body := send(t, srv.URL, "GET", "/v1/descriptor", a, ""); st != http.StatusUnauthorized {
			t.Errorf("descriptor with a token %v: %d %s, want 401", a != "", st, body)
		}
	}
	before := auth.checks.Load()
	if st, _, body := send(t, srv.URL, "GET", "/v1/descriptor", "Bearer "+good, ""); st != 200 || !strings.Contains(body, `"house":"origin89"`) {
		t.Errorf("descriptor: %d %s", st, body)
	}
	if st, _, body := send(t, srv.URL, "POST", "/v1/deliveries/next", "Bearer "+good, `{"run":"r","coordinator":"c"}`); st != 200 {
		t.Errorf("deliveries/next: %d %s", st, body)
	}
	if n := auth.checks.Load() - before; n != 2 {
		t.Errorf("two served requests took %d token checks, want one each", n)
	}

	// The worker routes take the worker's credential, not kitchn's token:
	// without one they are 401 from the worker check, and kitchn's check
	// is never asked.
	before = auth.checks.Load()
	if st, _, body := send(t, srv.URL, "POST", workerapi.PathSelf, "", "{}"); st != http.StatusUnauthorized {
		t.Errorf("worker self without a credential: %d %s", st, body)
	}
	if st, _, body := send(t, srv.URL, "POST", workerapi.PathSelf, "Bearer "+good, "{}"); st != http.StatusUnauthorized {
		t.Errorf("worker self with kitchn's token: %d %s, want 401", st, body)
	}
	if st, _, _ := send(t, srv.URL, "GET", "/nothing", "", ""); st != http.StatusNotFound {
		t.Errorf("a path outside /v1/: %d, want 404", st)
	}
	if n := auth.checks.Load() - before; n != 0 {
		t.Errorf("requests outside /v1/ took %d checks of kitchn's token", n)
	}
	if env.Runtime.StartCount() != 0 {
		t.Error("a refused request started a worker")
	}
}

// TestNoAuthenticatorRefusesEveryV1Path: a handler given no authenticator
// (the worker API's function) refuses every /v1/ path, served or not.
func TestNoAuthenticatorRefusesEveryV1Path(t *testing.T) {
	env := servicetest.New(t, nil)
	srv := httptest.NewServer(api.New(api.WithWorkers(env.Service)))
	t.Cleanup(srv.Close)
	for _, p := range []string{"/v1/descriptor", "/v1/nothing"} {
		if st, _, body := send(t, srv.URL, "GET", p, "Bearer "+randomToken(t), ""); st != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", p, st, body)
		}
	}
}
