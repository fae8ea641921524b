package lambdaapp_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// The operator function opens with the operator token alone (kitchn's
// opens nothing there), long polls only, picks up a new token once the
// cache lapses (here at once: GALLEY_TOKEN_CACHE_SECONDS=0), and records
// events; the reads function keeps no event log.
func TestOperatorHandler(t *testing.T) {
	const first, second = "operator-one-0123456789abcdef", "operator-two-0123456789abcdef"
	h, tokenFile, logs := operatorApp(t, first)
	get := func(path, token string) int {
		return invoke(t, h, "GET", path, token, "", time.Now().UnixMilli(), 5*time.Second).StatusCode
	}
	if c := get("/operator/v1/workers", first); c != 200 {
		t.Errorf("operator token: %d", c)
	}
	if c := get("/operator/v1/workers", goodToken); c != 401 {
		t.Errorf("kitchn's token on the operator API: %d, want 401", c)
	}
	if c := get("/v1/descriptor", first); c != 404 {
		t.Errorf("a kitchn route on the operator function: %d, want 404", c)
	}
	if c := get("/operator/v1/workers/w-1/stream", first); c != 404 {
		t.Errorf("stream: %d, want 404 (long poll only)", c)
	}
	if err := os.WriteFile(tokenFile, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c := get("/operator/v1/workers", second); c != 200 {
		t.Errorf("the rotated token: %d", c)
	}
	if c := get("/operator/v1/workers", first); c != 401 {
		t.Errorf("the old token after rotation: %d, want 401", c)
	}
	if bytes.Contains(logs.Bytes(), []byte(first)) || bytes.Contains(logs.Bytes(), []byte(second)) {
		t.Errorf("a token in the log: %s", logs.String())
	}

	reads, _ := newApp(t, lambdaapp.Reads)
	if reads.Events != nil {
		t.Error("the reads function keeps an event log")
	}
	if _, err := reads.OperatorHandler(); err == nil {
		t.Error("the reads function serves the operator API")
	}
}

// operatorApp is the operator function's handler, its token in a file
// reread on every request (GALLEY_TOKEN_CACHE_SECONDS=0), and its log.
func operatorApp(t *testing.T, token string) (http.Handler, string, *bytes.Buffer) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "operator-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := baseEnv()
	env["GALLEY_REPOSITORY"] = dir
	env["GALLEY_OPERATOR_TOKEN_FILE"] = tokenFile
	env["GALLEY_TOKEN_CACHE_SECONDS"] = "0"
	cfg, err := lambdaapp.ConfigFromEnv(lambdaapp.Operator, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	te := servicetest.New(t, nil)
	var logs bytes.Buffer
	app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{
		Store: memstore.New(), Doorbell: localbell.New(), Runtime: servicetest.NewRuntime(), GitHost: te.Git,
		Log: lambdaapp.NewLogger(&logs, lambdaapp.Operator, "info"), Secrets: noSecrets{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	if app.Events == nil {
		t.Error("the operator function keeps no event log")
	}
	h, err := app.OperatorHandler()
	if err != nil {
		t.Fatal(err)
	}
	return h, tokenFile, &logs
}

// The console's login through API Gateway's payload (the adapter the
// function runs): attempts are counted by the request context's sourceIp,
// never by the X-Forwarded-For the client wrote; the session cookie opens
// the API until its logout, and a rotation of the token ends it.
func TestOperatorSessionsThroughTheGateway(t *testing.T) {
	const first, second = "operator-one-0123456789abcdef", "operator-two-0123456789abcdef"
	h, tokenFile, logs := operatorApp(t, first)
	call := func(method, path, sourceIP, forwardedFor, cookie, body string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		ev := events.APIGatewayV2HTTPRequest{
			Version: "2.0", RouteKey: "ANY /operator/{proxy+}", RawPath: path, Body: body,
			Headers: map[string]string{"content-type": "application/json", "x-galley-operator": "1",
				"x-forwarded-for": forwardedFor, "x-forwarded-proto": "https"},
			RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "apigw-1", TimeEpoch: time.Now().UnixMilli(),
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, SourceIP: sourceIP}},
		}
		if cookie != "" {
			ev.Cookies = []string{cookie}
		}
		resp, err := httpadapter.NewV2(h).ProxyWithContext(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	login := func(sourceIP, forwardedFor, token string) events.APIGatewayV2HTTPResponse {
		return call("POST", operator.PathLogin, sourceIP, forwardedFor, "", `{"token":"`+token+`"}`)
	}
	for i := range operator.LoginsPerAddress {
		// Each from "another" client, as the header would have it.
		if r := login("192.0.2.1", fmt.Sprintf("198.51.100.%d", i), "wrong-0123456789"); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login %d: %d %s", i+1, r.StatusCode, r.Body)
		}
	}
	if r := login("192.0.2.1", "198.51.100.200", first); r.StatusCode != http.StatusTooManyRequests || r.Headers["Retry-After"] == "" {
		t.Errorf("the right token from a throttled sourceIp: %d %v %s, want 429 with Retry-After", r.StatusCode, r.Headers, r.Body)
	}
	r := login("192.0.2.2", "192.0.2.1", first)
	if r.StatusCode != http.StatusOK || len(r.Cookies) != 1 {
		t.Fatalf("the right token from another sourceIp: %d, cookies %v, %s", r.StatusCode, r.Cookies, r.Body)
	}
	set := r.Cookies[0]
	if !strings.Contains(set, "HttpOnly") || !strings.Contains(set, "SameSite=Strict") || !strings.Contains(set, "Secure") {
		t.Errorf("session cookie %q: want HttpOnly, SameSite=Strict, Secure behind HTTPS", set)
	}
	cookie, _, _ := strings.Cut(set, ";")
	if r := call("GET", operator.PathWorkers, "192.0.2.2", "", cookie, ""); r.StatusCode != http.StatusOK {
		t.Errorf("a read with the session: %d %s", r.StatusCode, r.Body)
	}
	if r := call("POST", operator.PathLogout, "192.0.2.2", "", cookie, ""); r.StatusCode != http.StatusOK {
		t.Errorf("logout: %d %s", r.StatusCode, r.Body)
	}
	if r := call("GET", operator.PathWorkers, "192.0.2.2", "", cookie, ""); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("the session's cookie after its logout: %d, want 401", r.StatusCode)
	}
	// A session of the old token ends with the rotation.
	r = login("192.0.2.3", "", first)
	cookie, _, _ = strings.Cut(r.Cookies[0], ";")
	if err := os.WriteFile(tokenFile, []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := call("GET", operator.PathWorkers, "192.0.2.3", "", cookie, ""); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("a session of the old token after the rotation: %d, want 401", r.StatusCode)
	}
	if v, _ := strings.CutPrefix(cookie, "galley_operator="); bytes.Contains(logs.Bytes(), []byte(v)) || bytes.Contains(logs.Bytes(), []byte(first)) {
		t.Errorf("a session id or token in the log: %s", logs.String())
	}
}
