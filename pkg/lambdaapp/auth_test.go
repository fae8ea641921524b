package lambdaapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

// fakeSecrets is a Secrets Manager endpoint speaking the JSON protocol
// (X-Amz-Target: secretsmanager.GetSecretValue), with one secret whose
// versions rotate the way put-secret-value moves the staging labels.
type fakeSecrets struct {
	t   *testing.T
	arn string

	mu       sync.Mutex
	current  string
	previous string
	failing  bool
	calls    int
	requests []string // the stage each call asked for
}

func (f *fakeSecrets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if got := r.Header.Get("X-Amz-Target"); got != "secretsmanager.GetSecretValue" {
		f.t.Errorf("X-Amz-Target = %q", got)
	}
	var in struct{ SecretId, VersionStage string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		f.t.Errorf("body: %v", err)
	}
	f.requests = append(f.requests, in.VersionStage)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	fail := func(status int, typ, msg string) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"__type": typ, "message": msg})
	}
	if f.failing {
		fail(http.StatusInternalServerError, "InternalServiceError", "try later")
		return
	}
	if in.SecretId != f.arn {
		fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret.")
		return
	}
	value := map[string]string{"AWSCURRENT": f.current, "AWSPREVIOUS": f.previous}[in.VersionStage]
	if value == "" {
		fail(http.StatusBadRequest, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: "+in.VersionStage)
		return
	}
	json.NewEncoder(w).Encode(map[string]any{
		"ARN": f.arn, "Name": "galley/test/bearer-token", "VersionId": "v-" + value[:4],
		"SecretString": value, "VersionStages": []string{in.VersionStage}, "CreatedDate": 1.7e9,
	})
}

// rotate is put-secret-value: the new value becomes AWSCURRENT and the
// old one AWSPREVIOUS.
func (f *fakeSecrets) rotate(v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.previous, f.current = f.current, v
}

func (f *fakeSecrets) set(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
}

func (f *fakeSecrets) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newSecretsClient(t *testing.T, h http.Handler) *secretsmanager.Client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return secretsmanager.NewFromConfig(aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String(srv.URL),
		Retryer:      func() aws.Retryer { return aws.NopRetryer{} },
	})
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const arn = "arn:aws:secretsmanager:us-east-1:000000000000:secret:galley/test/bearer-token-AbCdEf"

// Rotation is honoured within the cache bound: a new token works at the
// latest when the cache expires (earlier when a refused token may refetch),
// the previous one keeps working while it is AWSPREVIOUS, and one rotated
// out of both stages is refused at the latest when the cache expires.
func TestRotationWithinCacheBound(t *testing.T) {
	const (
		tokA = "tokA-0123456789abcdefghij"
		tokB = "tokB-0123456789abcdefghij"
		tokC = "tokC-0123456789abcdefghij"
	)
	sm := &fakeSecrets{t: t, arn: arn, current: tokA}
	var logs bytes.Buffer
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	const maxAge, minRefresh = 5 * time.Minute, 30 * time.Second
	a := lambdaapp.NewCachedAuthenticator(lambdaapp.SecretTokens(newSecretsClient(t, sm), arn),
		lambdaapp.WithMaxAge(maxAge), lambdaapp.WithMinRefresh(minRefresh), lambdaapp.WithAuthClock(clock.Now),
		lambdaapp.WithAuthLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ctx := context.Background()
	check := func(step string, token string, want bool) {
		t.Helper()
		if got := a.Authenticate(ctx, token); got != want {
			t.Errorf("%s: Authenticate(%s) = %v, want %v", step, token[:4], got, want)
		}
	}

	check("before rotation", tokA, true)
	check("before rotation", tokB, false)
	calls := sm.callCount()
	for range 50 {
		check("cached", tokA, true)
	}
	if got := sm.callCount(); got != calls {
		t.Errorf("cached checks made %d Secrets Manager calls", got-calls)
	}

	sm.rotate(tokB)
	clock.advance(minRefresh - time.Second)
	check("rotated, cache young", tokB, false) // not refetched yet: bounded calls
	check("rotated, cache young", tokA, true)
	clock.advance(time.Second)
	check("rotated, refused token refetches", tokB, true)
	check("rotated, previous", tokA, true)

	// The bound without any refused token: after MaxAge the cache is
	// refetched, whatever is presented.
	sm.rotate(tokC) // A is neither current nor previous any more
	clock.advance(maxAge - time.Second)
	check("second rotation, A still cached", tokA, true)
	clock.advance(time.Second)
	check("second rotation, after the bound", tokA, false)
	check("second rotation", tokC, true)
	check("second rotation, previous", tokB, true)

	sm.rotate("tokD-0123456789abcdefghij") // B is gone
	clock.advance(minRefresh - time.Second)
	check("B still cached", tokB, true)
	clock.advance(maxAge)
	check("B expired with the cache", tokB, false)

	for _, tok := range []string{tokA, tokB, tokC} {
		if strings.Contains(logs.String(), tok) || strings.Contains(logs.String(), tok[:6]) {
			t.Errorf("a token appears in the log: %s", logs.String())
		}
	}
}

// While Secrets Manager fails, the last tokens serve for the grace past
// the bound, fetches are spaced, and afterwards everything is refused.
func TestFetchFailureGrace(t *testing.T) {
	const tok = "tokA-0123456789abcdefghij"
	sm := &fakeSecrets{t: t, arn: arn, current: tok}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var logs bytes.Buffer
	a := lambdaapp.NewCachedAuthenticator(lambdaapp.SecretTokens(newSecretsClient(t, sm), arn),
		lambdaapp.WithMaxAge(time.Minute), lambdaapp.WithGrace(time.Minute), lambdaapp.WithAuthClock(clock.Now),
		lambdaapp.WithAuthLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ctx := context.Background()
	if !a.Authenticate(ctx, tok) {
		t.Fatal("first check refused")
	}
	sm.set(true)
	clock.advance(time.Minute + time.Second)
	if !a.Authenticate(ctx, tok) {
		t.Error("refused within the grace")
	}
	before := sm.callCount()
	for range 20 {
		a.Authenticate(ctx, tok)
	}
	if got := sm.callCount() - before; got != 0 {
		t.Errorf("%d fetches within one second of a failed one", got)
	}
	clock.advance(time.Minute)
	if a.Authenticate(ctx, tok) {
		t.Error("accepted past the grace while Secrets Manager fails")
	}
	sm.set(false)
	clock.advance(time.Second)
	if !a.Authenticate(ctx, tok) {
		t.Error("refused after Secrets Manager recovered")
	}
	if !strings.Contains(logs.String(), "bearer token refresh failed") || strings.Contains(logs.String(), tok[:6]) {
		t.Errorf("log: %s", logs.String())
	}
}

func TestNeverRotatedSecretHasNoPrevious(t *testing.T) {
	sm := &fakeSecrets{t: t, arn: arn, current: "only-0123456789abcdefghij"}
	got, err := lambdaapp.SecretTokens(newSecretsClient(t, sm), arn)(context.Background())
	if err != nil || len(got) != 1 || string(got[0]) != sm.current {
		t.Fatalf("tokens = %d, err %v", len(got), err)
	}
	if strings.Join(sm.requests, ",") != "AWSCURRENT,AWSPREVIOUS" {
		t.Errorf("stages asked: %v", sm.requests)
	}
	if _, err := lambdaapp.SecretTokens(newSecretsClient(t, sm), arn+"x")(context.Background()); err == nil {
		t.Error("a missing secret gave tokens")
	}
}

func TestAuthenticateRefuses(t *testing.T) {
	sm := &fakeSecrets{t: t, arn: arn, current: "good-0123456789abcdefghij"}
	a := lambdaapp.NewCachedAuthenticator(lambdaapp.SecretTokens(newSecretsClient(t, sm), arn))
	for _, tok := range []string{"", "good", "good-0123456789abcdefghi", "good-0123456789abcdefghijk", " good-0123456789abcdefghij"} {
		if a.Authenticate(context.Background(), tok) {
			t.Errorf("accepted %q", tok)
		}
	}
}

func TestFileTokens(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("file-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	a := lambdaapp.NewCachedAuthenticator(lambdaapp.FileTokens(path), lambdaapp.WithAuthClock(clock.Now))
	if !a.Authenticate(context.Background(), "file-token-0123456789") {
		t.Error("file token refused")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := lambdaapp.FileTokens(path)(context.Background()); err == nil || strings.Contains(err.Error(), "file-token") {
		t.Errorf("a token file readable by others: err %v", err)
	}
}
