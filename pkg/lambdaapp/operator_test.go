package lambdaapp_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// The operator function opens with the operator token alone (kitchn's
// opens nothing there), long polls only, picks up a new token once the
// cache lapses (here at once: GALLEY_TOKEN_CACHE_SECONDS=0), and records
// events; the reads function keeps no event log.
func TestOperatorHandler(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "operator-token")
	const first, second = "operator-one-0123456789abcdef", "operator-two-0123456789abcdef"
	if err := os.WriteFile(tokenFile, []byte(first+"\n"), 0o600); err != nil {
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
