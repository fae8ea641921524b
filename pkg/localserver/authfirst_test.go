package localserver

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAuthenticationBeforeRouting: the local server, as `galley serve`
// runs it, authenticates every /v1/ request before routing it: an unknown
// /v1/ path is 401 without the token or with a wrong one, 404 with the
// right one, and the known routes answer as before.
func TestAuthenticationBeforeRouting(t *testing.T) {
	srv := startLimited(t, Options{})
	good := token(t, srv)
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	wrong := hex.EncodeToString(b)
	do := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.Endpoint+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/nothing"}, {"POST", "/v1/workers/unknown"}, {"GET", "/v1/effects"},
	} {
		for _, a := range []struct{ name, token string }{{"no token", ""}, {"a wrong token", wrong}} {
			if st, body := do(p.method, p.path, a.token, "{}"); st != http.StatusUnauthorized {
				t.Errorf("%s %s with %s: %d %s, want 401", p.method, p.path, a.name, st, body)
			}
		}
		if st, body := do(p.method, p.path, good, "{}"); st != http.StatusNotFound {
			t.Errorf("%s %s with the right token: %d %s, want 404", p.method, p.path, st, body)
		}
	}
	if st, body := do("GET", "/v1/descriptor", wrong, ""); st != http.StatusUnauthorized {
		t.Errorf("descriptor with a wrong token: %d %s, want 401", st, body)
	}
	if st, body := do("GET", "/v1/descriptor", good, ""); st != http.StatusOK || !strings.Contains(body, `"house":"h"`) {
		t.Errorf("descriptor: %d %s", st, body)
	}
	if st, body := do("POST", "/v1/deliveries/next", good, `{"run":"r","coordinator":"c"}`); st != http.StatusOK {
		t.Errorf("deliveries/next: %d %s", st, body)
	}
}
