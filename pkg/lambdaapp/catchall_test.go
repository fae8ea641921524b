package lambdaapp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestReadsServesTheCatchAll: API Gateway sends every /v1/ request no
// exact route matches to the reads function (route "ANY /v1/{proxy+}",
// infra/stack). Wired as functions/reads wires it, with kitchn's token read
// from Secrets Manager, the function authenticates such a request before
// anything else: 401 without the token or with a wrong one, 404 with the
// right one. Its own routes answer as before.
func TestReadsServesTheCatchAll(t *testing.T) {
	good := randomHex(t)
	sm := &fakeSecrets{t: t, arn: "arn:aws:secretsmanager:us-east-1:1:secret:t", current: good}
	env := baseEnv()
	cfg, err := lambdaapp.ConfigFromEnv(lambdaapp.Reads, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	te := servicetest.New(t, nil)
	var logs bytes.Buffer
	app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{Store: memstore.New(), Doorbell: localbell.New(),
		Runtime: servicetest.NewRuntime(), GitHost: te.Git, Secrets: newSecretsClient(t, sm),
		Log: lambdaapp.NewLogger(&logs, lambdaapp.Reads, "info")})
	if err != nil {
		t.Fatal(err)
	}
	h := app.Handler(api.WithReads(app.Service))
	call := func(routeKey, method, path, token, body string) events.APIGatewayV2HTTPResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-catchall"})
		headers := map[string]string{"content-type": "application/json"}
		if token != "" {
			headers["authorization"] = "Bearer " + token
		}
		ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: routeKey, RawPath: path, Body: body, Headers: headers,
			RequestContext: events.APIGatewayV2HTTPRequestContext{RouteKey: routeKey, RequestID: "apigw-catchall",
				TimeEpoch: time.Now().UnixMilli(),
				HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path}}}
		if p, ok := strings.CutPrefix(path, "/v1/"); ok && routeKey == "ANY /v1/{proxy+}" {
			ev.PathParameters = map[string]string{"proxy": p}
		}
		resp, err := httpadapter.NewV2(h).ProxyWithContext(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const catchAll = "ANY /v1/{proxy+}"
	for _, p := range []struct{ method, path string }{
		{"GET", "/v1/nothing"}, {"POST", "/v1/effects/unknown"}, {"DELETE", "/v1/descriptor"},
		// A route of another function, reached by a method it does not
		// take: the catch-all again.
		{"GET", "/v1/effects"},
	} {
		for _, tok := range []struct{ name, value string }{{"no token", ""}, {"a wrong token", randomHex(t)}} {
			if resp := call(catchAll, p.method, p.path, tok.value, "{}"); resp.StatusCode != 401 {
				t.Errorf("%s %s with %s: %d %s, want 401", p.method, p.path, tok.name, resp.StatusCode, resp.Body)
			}
		}
		if resp := call(catchAll, p.method, p.path, good, "{}"); resp.StatusCode != 404 {
			t.Errorf("%s %s with the right token: %d %s, want 404", p.method, p.path, resp.StatusCode, resp.Body)
		}
	}
	if resp := call("GET /v1/descriptor", "GET", "/v1/descriptor", randomHex(t), ""); resp.StatusCode != 401 {
		t.Errorf("descriptor with a wrong token: %d %s, want 401", resp.StatusCode, resp.Body)
	}
	if resp := call("GET /v1/descriptor", "GET", "/v1/descriptor", good, ""); resp.StatusCode != 200 || !strings.Contains(resp.Body, `"house":"h"`) {
		t.Errorf("descriptor: %d %s", resp.StatusCode, resp.Body)
	}
	if strings.Contains(logs.String(), good) {
		t.Error("kitchn's token reached the log")
	}
}
