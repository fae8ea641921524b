package lambdaapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

const goodToken = "good-0123456789abcdefghij"

// newApp is the reads function's App on in-memory parts, with its log.
func newApp(t *testing.T, fn lambdaapp.Function) (*lambdaapp.App, *bytes.Buffer) {
	t.Helper()
	env := baseEnv()
	env["GALLEY_REPOSITORY"] = t.TempDir() // unused: Deps sets the git host
	if fn == lambdaapp.Reconciler {
		workerSecretFromFile(t, env)
	}
	cfg, err := lambdaapp.ConfigFromEnv(fn, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	te := servicetest.New(t, nil)
	app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{
		Store: memstore.New(), Doorbell: localbell.New(), Runtime: servicetest.NewRuntime(), GitHost: te.Git,
		Auth: api.StaticToken(goodToken), Log: lambdaapp.NewLogger(&logs, fn, "info"),
		Secrets: noSecrets{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	return app, &logs
}

// workerSecretFromFile gives env the worker secret in a file instead of
// Secrets Manager: for the reconciler, which signs a parked worker's
// resumed credential (TestWorkerSecretOnlyWhereNeeded reads it from
// Secrets Manager).
func workerSecretFromFile(t *testing.T, env map[string]string) {
	t.Helper()
	delete(env, "GALLEY_WORKER_SECRET_ARN")
	env["GALLEY_WORKER_SECRET_FILE"] = filepath.Join(t.TempDir(), "worker-secret")
	if err := os.WriteFile(env["GALLEY_WORKER_SECRET_FILE"], []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// noSecrets fails any Secrets Manager call: the worker secret is read from
// it only by the functions that sign or check worker credentials.
type noSecrets struct{ t *testing.T }

func (n noSecrets) GetSecretValue(context.Context, *secretsGetInput, ...func(*secretsOptions)) (*secretsGetOutput, error) {
	n.t.Error("unexpected Secrets Manager call")
	return nil, context.Canceled
}

// invoke runs one API Gateway v2 event through the function's handler, as
// lambda.Start would, with a Lambda context and a deadline.
func invoke(t *testing.T, h http.Handler, method, path, token, body string, epoch int64, deadline time.Duration) events.APIGatewayV2HTTPResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-lambda-1"})
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: method + " " + path, RawPath: path, Body: body,
		Headers: map[string]string{"authorization": "Bearer " + token, "content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{RequestID: "apigw-1", TimeEpoch: epoch,
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path}},
	}
	resp, err := httpadapter.NewV2(h).ProxyWithContext(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestHandlerServesItsRoutesOnly(t *testing.T) {
	app, logs := newApp(t, lambdaapp.Reads)
	h := app.Handler(api.WithReads(app.Service))
	resp := invoke(t, h, "GET", "/v1/descriptor", goodToken, "", time.Now().UnixMilli(), 5*time.Second)
	var d struct{ House, Backend string }
	if resp.StatusCode != 200 || json.Unmarshal([]byte(resp.Body), &d) != nil || d.House != "h" || d.Backend != "galley" {
		t.Fatalf("descriptor: %d %s", resp.StatusCode, resp.Body)
	}
	if resp := invoke(t, h, "GET", "/v1/descriptor", "wrong-0123456789abcdefghij", "", 0, 5*time.Second); resp.StatusCode != 401 {
		t.Errorf("bad token: %d, want 401", resp.StatusCode)
	}
	if resp := invoke(t, h, "POST", "/v1/deliveries/next", goodToken, `{"run":"r","coordinator":"c"}`, 0, 5*time.Second); resp.StatusCode != 404 {
		t.Errorf("another function's route: %d", resp.StatusCode)
	}
	out := logs.String()
	if !strings.Contains(out, `"requestId":"req-lambda-1"`) || !strings.Contains(out, `"function":"reads"`) {
		t.Errorf("log lacks the request id or function: %s", out)
	}
	if strings.Contains(out, goodToken) || strings.Contains(out, "wrong-0123") {
		t.Errorf("a token in the log: %s", out)
	}
}

func TestArrivalFromGateway(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	var got time.Time
	var left time.Duration
	h := lambdaapp.Bounded(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = lambdaapp.Arrival(time.Now)(r)
		dl, _ := r.Context().Deadline()
		left = time.Until(dl)
		w.WriteHeader(204)
	}))
	invoke(t, h, "POST", "/v1/effects", goodToken, "{}", at.UnixMilli(), 5*time.Second)
	if !got.Equal(at) {
		t.Errorf("arrival %v, want the gateway's %v", got, at)
	}
	// The handler ends a margin before Lambda would end the invocation.
	if left <= 0 || left > 4600*time.Millisecond {
		t.Errorf("time left in the handler %v, want about 4.5 s", left)
	}
	// Without a gateway context (a direct invoke), arrival is now.
	r, _ := http.NewRequest("POST", "/", nil)
	now := time.Unix(42, 0)
	if a := lambdaapp.Arrival(func() time.Time { return now })(r); !a.Equal(now) {
		t.Errorf("arrival without a gateway %v", a)
	}
}

// Functions that neither sign nor check worker credentials never read the
// worker secret; those that do, read it.
func TestWorkerSecretOnlyWhereNeeded(t *testing.T) {
	for _, fn := range []lambdaapp.Function{lambdaapp.Reads, lambdaapp.Mailbox} {
		newApp(t, fn) // noSecrets fails the test on any call
	}
	// The worker API checks worker credentials; the reconciler signs a
	// parked worker's resumed one when it starts an owed resume.
	for _, fn := range []lambdaapp.Function{lambdaapp.WorkerAPI, lambdaapp.Reconciler} {
		sm := &fakeSecrets{t: t, arn: "arn:aws:secretsmanager:us-east-1:1:secret:w", current: "worker-secret-0123456789abcdef"}
		env := baseEnv()
		cfg, err := lambdaapp.ConfigFromEnv(fn, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		te := servicetest.New(t, nil)
		if _, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{Store: memstore.New(), Doorbell: localbell.New(),
			Runtime: servicetest.NewRuntime(), GitHost: te.Git, Secrets: newSecretsClient(t, sm),
			Log: lambdaapp.NewLogger(&bytes.Buffer{}, fn, "")}); err != nil {
			t.Fatal(err)
		}
		if sm.callCount() != 1 {
			t.Errorf("%s read the worker secret %d times", fn, sm.callCount())
		}
	}
}

type (
	secretsGetInput  = secretsmanager.GetSecretValueInput
	secretsGetOutput = secretsmanager.GetSecretValueOutput
	secretsOptions   = secretsmanager.Options
)

// A key with a comma survives API Gateway and the adapter, which splits
// headers on commas: the launch applies instead of being refused for an
// Idempotency-Key that differs from request.key.
func TestIdempotencyKeyWithComma(t *testing.T) {
	env := baseEnv()
	delete(env, "GALLEY_WORKER_SECRET_ARN")
	env["GALLEY_WORKER_SECRET_FILE"] = filepath.Join(t.TempDir(), "worker-secret")
	if err := os.WriteFile(env["GALLEY_WORKER_SECRET_FILE"], []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := lambdaapp.ConfigFromEnv(lambdaapp.Effects, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	te := servicetest.New(t, nil)
	app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{Store: memstore.New(), Doorbell: localbell.New(),
		Runtime: servicetest.NewRuntime(), GitHost: te.Git, Auth: api.StaticToken(goodToken),
		Log: lambdaapp.NewLogger(&bytes.Buffer{}, lambdaapp.Effects, "")})
	if err != nil {
		t.Fatal(err)
	}
	const key = "k,1,x"
	body := `{"run":"r","request":{"house":"h","backend":"galley","credential":"galley-token","task":"t","attempt":1,` +
		`"key":"` + key + `","effect":{"executor":"worker","effect":{"type":"launch-worker","role":"commis",` +
		`"workspace":{"type":"isolated"},"brief":"b"}}}}`
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: "/v1/effects", Body: body,
		Headers:        map[string]string{"authorization": "Bearer " + goodToken, "content-type": "application/json", "idempotency-key": key},
		RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/effects"}}}
	resp, err := httpadapter.NewV2(app.Handler(api.WithEffects(app.Service))).ProxyWithContext(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.Contains(resp.Body, `"status":"applied"`) {
		t.Errorf("launch: %d %s", resp.StatusCode, resp.Body)
	}
}
