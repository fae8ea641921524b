package smstandin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/local/awswire"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

const testAKID = "AKIDSMSTANDINTEST"

var ctx = context.Background()

type harness struct {
	srv *Server
	url string
	sm  *secretsmanager.Client
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	srv, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &harness{srv: srv, url: hs.URL, sm: newClient(hs.URL, credentials.NewStaticCredentialsProvider(testAKID, rand.Text(), ""))}
}

// newClient is the real SDK client, as a function or the ECS stand-in
// would configure it, retrying nothing so that every error shows.
func newClient(url string, creds aws.CredentialsProvider) *secretsmanager.Client {
	return secretsmanager.New(secretsmanager.Options{
		Region: DefaultRegion, BaseEndpoint: aws.String(url), Credentials: creds, RetryMaxAttempts: 1,
		HTTPClient: &http.Client{Transport: ownedBody{http.DefaultTransport}},
	})
}

// ownedBody hands the transport a copy of each request body. smithy-go
// closes the body it built as soon as the response's headers arrive, and
// net/http's write loop still reads the body once more after its
// Content-Length, to find its end; a loopback server answers before that
// read, the read fails, and the transport closes the connection under the
// response being read ("use of closed network connection",
// aws/aws-sdk-go-v2#2737). With no retry, that is a failed call that says
// nothing about the stand-in.
type ownedBody struct{ next http.RoundTripper }

func (o ownedBody) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return o.next.RoundTrip(r)
}

// value is a random secret value: no fixture holds a secret.
func value() string { return rand.Text() }

func token() string { return awswire.UUID() }

func (h *harness) create(t *testing.T, name, v string) *secretsmanager.CreateSecretOutput {
	t.Helper()
	out, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(v)})
	if err != nil {
		t.Fatalf("CreateSecret %s: %v", name, err)
	}
	return out
}

func (h *harness) get(t *testing.T, id string) *secretsmanager.GetSecretValueOutput {
	t.Helper()
	out, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		t.Fatalf("GetSecretValue %s: %v", id, err)
	}
	return out
}

func (h *harness) put(t *testing.T, id, v string) *secretsmanager.PutSecretValueOutput {
	t.Helper()
	out, err := h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(id), SecretString: aws.String(v)})
	if err != nil {
		t.Fatalf("PutSecretValue %s: %v", id, err)
	}
	return out
}

// code returns an API error's code, failing if err is not one.
func code(t *testing.T, err error) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error", err)
	}
	return ae.ErrorCode()
}

func wantCode(t *testing.T, err error, want, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %s", want)
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an API error", err)
	}
	if ae.ErrorCode() != want {
		t.Fatalf("error code %s (%s), want %s", ae.ErrorCode(), ae.ErrorMessage(), want)
	}
	if message != "" && ae.ErrorMessage() != message {
		t.Fatalf("message %q, want %q", ae.ErrorMessage(), message)
	}
}

var arnRE = regexp.MustCompile(`^arn:aws:secretsmanager:us-east-1:000000000000:secret:(.+)-[A-Za-z0-9]{6}$`)

func TestCreateAndGetByNameFullAndPartialARN(t *testing.T) {
	h := newHarness(t)
	name, v := "galley/main/bearer-token", value()
	out := h.create(t, name, v)
	m := arnRE.FindStringSubmatch(aws.ToString(out.ARN))
	if m == nil || m[1] != name {
		t.Fatalf("ARN %q is not this secret's ARN with six random characters", aws.ToString(out.ARN))
	}
	if aws.ToString(out.Name) != name || len(aws.ToString(out.VersionId)) != 36 {
		t.Fatalf("CreateSecret = name %q version %q", aws.ToString(out.Name), aws.ToString(out.VersionId))
	}
	arn := *out.ARN
	partial := arn[:len(arn)-7]
	for _, id := range []string{name, arn, partial} {
		got := h.get(t, id)
		if aws.ToString(got.SecretString) != v || aws.ToString(got.ARN) != arn || aws.ToString(got.Name) != name ||
			aws.ToString(got.VersionId) != aws.ToString(out.VersionId) || !slices.Equal(got.VersionStages, []string{StageCurrent}) {
			t.Errorf("GetSecretValue(%s) = %s %s %v, value matches: %v", id, aws.ToString(got.ARN), aws.ToString(got.VersionId),
				got.VersionStages, aws.ToString(got.SecretString) == v)
		}
		if got.CreatedDate == nil || time.Since(*got.CreatedDate) > time.Hour {
			t.Errorf("CreatedDate = %v", got.CreatedDate)
		}
	}
	// Another suffix names another secret (one deleted and re-created),
	// another region or account another service: none is this one.
	other := []string{
		partial + "-AbCdEf",
		strings.Replace(arn, "us-east-1", "eu-west-1", 1),
		strings.Replace(arn, "000000000000", "111111111111", 1),
		"galley/main/bearer",
	}
	if arn[len(arn)-6:] == "AbCdEf" {
		other = other[1:]
	}
	for _, id := range other {
		_, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
		var nf *types.ResourceNotFoundException
		if !errors.As(err, &nf) || nf.ErrorMessage() != "Secrets Manager can't find the specified secret." {
			t.Errorf("GetSecretValue(%s) = %v, want ResourceNotFoundException", id, err)
		}
	}
	for id, want := range map[string]string{name: arn, arn: arn, partial: arn, "galley/main/x": ""} {
		got, ok := h.srv.Resolve(id)
		if got != want || ok != (want != "") {
			t.Errorf("Resolve(%s) = %q %v, want %q", id, got, ok, want)
		}
	}
	if got, ok := h.srv.ARN(name); !ok || got != arn {
		t.Errorf("ARN(%s) = %q %v", name, got, ok)
	}
}

func TestDuplicateNameAndInvalidNames(t *testing.T) {
	h := newHarness(t)
	h.create(t, "dup", value())
	_, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("dup"), SecretString: aws.String(value())})
	var re *types.ResourceExistsException
	if !errors.As(err, &re) || re.ErrorMessage() != "The operation failed because the secret dup already exists." {
		t.Fatalf("duplicate CreateSecret = %v", err)
	}
	for _, name := range []string{"has space", "semi;colon", "star*", "ü", strings.Repeat("a", 513), ""} {
		_, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value())})
		wantCode(t, err, "ValidationException", "")
	}
	for _, name := range []string{"a", "A-z_0/9+=.@-", strings.Repeat("b", 512)} {
		h.create(t, name, value())
	}
}

func TestValuesAreBoundedAndOfOneKind(t *testing.T) {
	h := newHarness(t)
	big := strings.Repeat("x", MaxSecretSize+1)
	_, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("big"), SecretString: aws.String(big)})
	wantCode(t, err, "ValidationException",
		"1 validation error detected: Value at 'secretString' failed to satisfy constraint: Member must have length less than or equal to 65536")
	_, err = h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("bigbin"), SecretBinary: []byte(big)})
	wantCode(t, err, "ValidationException", "")
	_, err = h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("both"), SecretString: aws.String(value()), SecretBinary: []byte("x")})
	var ip *types.InvalidParameterException
	if !errors.As(err, &ip) {
		t.Fatalf("string and binary = %v, want InvalidParameterException", err)
	}
	// The largest value and a binary value go through.
	h.create(t, "largest", big[1:])
	if got := h.get(t, "largest"); len(aws.ToString(got.SecretString)) != MaxSecretSize {
		t.Errorf("largest value came back with %d bytes", len(aws.ToString(got.SecretString)))
	}
	bin := []byte(value() + "\x00\xff")
	if _, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("bin"), SecretBinary: bin}); err != nil {
		t.Fatal(err)
	}
	if got := h.get(t, "bin"); !bytes.Equal(got.SecretBinary, bin) || got.SecretString != nil {
		t.Errorf("binary value did not come back as sent")
	}
	// A body beyond any valid request is refused before it is read whole.
	status, out := raw(t, h.url, OpPutSecretValue, sigv4, bytes.Repeat([]byte(" "), maxBody+10))
	if status != 413 || out["__type"] != "SerializationException" {
		t.Errorf("oversized body = %d %v", status, out)
	}
}

func TestPutSecretValueMovesStages(t *testing.T) {
	h := newHarness(t)
	name := "galley/main/bearer-token"
	v1, v2, v3 := value(), value(), value()
	c := h.create(t, name, v1)
	arn := *c.ARN

	// Before any rotation, lambdaapp reads one token: AWSPREVIOUS is absent.
	tokens := lambdaapp.SecretTokens(h.sm, arn)
	got, err := tokens(ctx)
	if err != nil || len(got) != 1 || string(got[0]) != v1 {
		t.Fatalf("SecretTokens before rotation: %d tokens, err %v", len(got), err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn), VersionStage: aws.String(StagePrevious)})
	wantCode(t, err, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: AWSPREVIOUS")

	p2 := h.put(t, arn, v2)
	if !slices.Equal(p2.VersionStages, []string{StageCurrent}) || aws.ToString(p2.ARN) != arn {
		t.Fatalf("PutSecretValue = %v %s", p2.VersionStages, aws.ToString(p2.ARN))
	}
	got, err = tokens(ctx)
	if err != nil || len(got) != 2 || string(got[0]) != v2 || string(got[1]) != v1 {
		t.Fatalf("SecretTokens after one rotation: %d tokens (current new: %v, previous old: %v), err %v",
			len(got), len(got) > 0 && string(got[0]) == v2, len(got) > 1 && string(got[1]) == v1, err)
	}
	prev, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name), VersionStage: aws.String(StagePrevious)})
	if err != nil || aws.ToString(prev.VersionId) != aws.ToString(c.VersionId) || !slices.Equal(prev.VersionStages, []string{StagePrevious}) {
		t.Fatalf("AWSPREVIOUS = %v %v", prev, err)
	}

	p3 := h.put(t, name, v3)
	d, err := h.sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{*p3.VersionId: {StageCurrent}, *p2.VersionId: {StagePrevious}}
	if len(d.VersionIdsToStages) != 2 || !slices.Equal(d.VersionIdsToStages[*p3.VersionId], want[*p3.VersionId]) ||
		!slices.Equal(d.VersionIdsToStages[*p2.VersionId], want[*p2.VersionId]) {
		t.Fatalf("VersionIdsToStages = %v, want %v", d.VersionIdsToStages, want)
	}
	// The first version has no label left but still answers by its id.
	first, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name), VersionId: c.VersionId})
	if err != nil || aws.ToString(first.SecretString) != v1 || len(first.VersionStages) != 0 {
		t.Fatalf("first version by id: stages %v, err %v", first.VersionStages, err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name), VersionId: c.VersionId, VersionStage: aws.String(StageCurrent)})
	wantCode(t, err, "InvalidRequestException", "You provided a VersionStage that is not associated to the provided VersionId.")
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name), VersionId: aws.String(token())})
	wantCode(t, err, "ResourceNotFoundException", "")

	// A version put with other labels leaves AWSCURRENT where it is.
	pend, err := h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name),
		SecretString: aws.String(value()), VersionStages: []string{"AWSPENDING"}})
	if err != nil || !slices.Equal(pend.VersionStages, []string{"AWSPENDING"}) {
		t.Fatalf("PutSecretValue AWSPENDING = %v %v", pend, err)
	}
	if cur := h.get(t, name); aws.ToString(cur.SecretString) != v3 {
		t.Fatal("AWSCURRENT moved with a version put as AWSPENDING")
	}
}

func TestClientRequestTokenIdempotency(t *testing.T) {
	h := newHarness(t)
	name, v := "idem", value()
	tok := token()
	c1, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(v), ClientRequestToken: aws.String(tok)})
	if err != nil || aws.ToString(c1.VersionId) != tok {
		t.Fatalf("CreateSecret = %v %v", c1, err)
	}
	// A retry after a lost answer: same token, same value.
	c2, err := h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(v), ClientRequestToken: aws.String(tok)})
	if err != nil || aws.ToString(c2.ARN) != aws.ToString(c1.ARN) || aws.ToString(c2.VersionId) != tok {
		t.Fatalf("CreateSecret retry = %v %v", c2, err)
	}
	_, err = h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value()), ClientRequestToken: aws.String(tok)})
	wantCode(t, err, "ResourceExistsException", "")

	v2, tok2 := value(), token()
	for range 2 {
		p, err := h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(v2), ClientRequestToken: aws.String(tok2)})
		if err != nil || aws.ToString(p.VersionId) != tok2 || !slices.Equal(p.VersionStages, []string{StageCurrent}) {
			t.Fatalf("PutSecretValue = %v %v", p, err)
		}
	}
	// The retry made no version: the first is still AWSPREVIOUS.
	prev, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name), VersionStage: aws.String(StagePrevious)})
	if err != nil || aws.ToString(prev.VersionId) != tok {
		t.Fatalf("AWSPREVIOUS after a retried put = %v %v", prev, err)
	}
	_, err = h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value()), ClientRequestToken: aws.String(tok2)})
	var re *types.ResourceExistsException
	if !errors.As(err, &re) || re.ErrorMessage() != "You can't modify an existing version, you can only create a new version." {
		t.Fatalf("same token, other value = %v", err)
	}
	if got := h.get(t, name); aws.ToString(got.SecretString) != v2 {
		t.Fatal("the refused put changed the value")
	}
	// Tokens are 32 to 64 characters; a raw request must carry one.
	_, err = h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(name), SecretString: aws.String(value()), ClientRequestToken: aws.String("short")})
	wantCode(t, err, "ValidationException", "")
	status, out := raw(t, h.url, OpPutSecretValue, sigv4, mustJSON(map[string]string{"SecretId": name, "SecretString": value()}))
	if status != 400 || out["__type"] != "InvalidRequestException" || out["message"] != "You must provide a ClientRequestToken value. We recommend a UUID-type value." {
		t.Fatalf("PutSecretValue without a token = %d %v", status, out)
	}
}

func TestNotFoundAndMissingStage(t *testing.T) {
	h := newHarness(t)
	_, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("nope")})
	var nf *types.ResourceNotFoundException
	if !errors.As(err, &nf) || nf.ErrorMessage() != "Secrets Manager can't find the specified secret." {
		t.Fatalf("GetSecretValue of nothing = %v", err)
	}
	for _, call := range []func() error{
		func() error {
			_, err := h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String("nope"), SecretString: aws.String(value())})
			return err
		},
		func() error {
			_, err := h.sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String("nope")})
			return err
		},
		func() error {
			_, err := h.sm.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String("nope")})
			return err
		},
	} {
		if err := call(); !errors.As(err, &nf) {
			t.Errorf("call on no secret = %v, want ResourceNotFoundException", err)
		}
	}
	// A secret with no value yet, as one the operator fills in later.
	if _, err := h.srv.CreateEmpty("galley/main/anthropic"); err != nil {
		t.Fatal(err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("galley/main/anthropic")})
	if !errors.As(err, &nf) || nf.ErrorMessage() != "Secrets Manager can't find the specified secret value for staging label: AWSCURRENT" {
		t.Fatalf("GetSecretValue of an empty secret = %v", err)
	}
}

func TestDeleteSecret(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h := newHarness(t, WithClock(clock))
	c := h.create(t, "gone", value())

	_, err := h.sm.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String("gone"), RecoveryWindowInDays: aws.Int64(3)})
	wantCode(t, err, "InvalidParameterException", "The RecoveryWindowInDays value must be between 7 and 30 days (inclusive).")
	_, err = h.sm.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String("gone"), RecoveryWindowInDays: aws.Int64(7), ForceDeleteWithoutRecovery: aws.Bool(true)})
	wantCode(t, err, "InvalidParameterException", "")

	d, err := h.sm.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: c.ARN, RecoveryWindowInDays: aws.Int64(7)})
	if err != nil || !d.DeletionDate.Equal(now.Add(7*24*time.Hour)) {
		t.Fatalf("DeleteSecret = %v %v", d, err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("gone")})
	var ir *types.InvalidRequestException
	if !errors.As(err, &ir) || ir.ErrorMessage() != "You can't perform this operation on the secret because it was marked for deletion." {
		t.Fatalf("GetSecretValue of a deleted secret = %v", err)
	}
	_, err = h.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String("gone"), SecretString: aws.String(value())})
	wantCode(t, err, "InvalidRequestException", "")
	desc, err := h.sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String("gone")})
	if err != nil || desc.DeletedDate == nil || !desc.DeletedDate.Equal(now.Add(7*24*time.Hour)) {
		t.Fatalf("DescribeSecret of a deleted secret = %v %v", desc, err)
	}
	_, err = h.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String("gone"), SecretString: aws.String(value())})
	wantCode(t, err, "InvalidRequestException", "You can't create this secret because a secret with this name is already scheduled for deletion.")
	list, err := h.sm.ListSecrets(ctx, &secretsmanager.ListSecretsInput{})
	if err != nil || len(list.SecretList) != 0 {
		t.Fatalf("ListSecrets lists a deleted secret: %v %v", list, err)
	}
	if _, ok := h.srv.Resolve("gone"); !ok {
		t.Fatal("Resolve does not find a secret in its recovery window")
	}

	// Past the window the secret is gone and its name free.
	mu.Lock()
	now = now.Add(7 * 24 * time.Hour)
	mu.Unlock()
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("gone")})
	wantCode(t, err, "ResourceNotFoundException", "")
	c2 := h.create(t, "gone", value())
	if *c2.ARN == *c.ARN {
		t.Fatal("a re-created secret has its predecessor's ARN")
	}
	if _, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: c.ARN}); code(t, err) != "ResourceNotFoundException" {
		t.Fatalf("the old ARN reads the new secret: %v", err)
	}

	// Force: gone at once.
	if _, err := h.sm.DeleteSecret(ctx, &secretsmanager.DeleteSecretInput{SecretId: aws.String("gone"), ForceDeleteWithoutRecovery: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("gone")})
	wantCode(t, err, "ResourceNotFoundException", "")
}

func TestUpdateSecretVersionStage(t *testing.T) {
	h := newHarness(t)
	v1, v2 := value(), value()
	c := h.create(t, "roll", v1)
	p := h.put(t, "roll", v2)
	// Moving AWSCURRENT needs the version it leaves.
	_, err := h.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String("roll"),
		VersionStage: aws.String(StageCurrent), MoveToVersionId: c.VersionId})
	wantCode(t, err, "InvalidParameterException", "")
	// A rollback: AWSCURRENT back on the first version, AWSPREVIOUS on the second.
	_, err = h.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String("roll"),
		VersionStage: aws.String(StageCurrent), MoveToVersionId: c.VersionId, RemoveFromVersionId: p.VersionId})
	if err != nil {
		t.Fatal(err)
	}
	cur := h.get(t, "roll")
	prev, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("roll"), VersionStage: aws.String(StagePrevious)})
	if err != nil || aws.ToString(cur.SecretString) != v1 || aws.ToString(prev.SecretString) != v2 ||
		!slices.Equal(cur.VersionStages, []string{StageCurrent}) || !slices.Equal(prev.VersionStages, []string{StagePrevious}) {
		t.Fatalf("after rollback: current is first %v (%v), previous is second %v (%v), err %v",
			aws.ToString(cur.SecretString) == v1, cur.VersionStages, aws.ToString(prev.SecretString) == v2, prev.VersionStages, err)
	}
	// A custom label: attach, then remove.
	if _, err := h.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String("roll"),
		VersionStage: aws.String("pinned"), MoveToVersionId: p.VersionId}); err != nil {
		t.Fatal(err)
	}
	if got, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("roll"), VersionStage: aws.String("pinned")}); err != nil || aws.ToString(got.SecretString) != v2 {
		t.Fatalf("by custom label: %v", err)
	}
	if _, err := h.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String("roll"),
		VersionStage: aws.String("pinned"), RemoveFromVersionId: p.VersionId}); err != nil {
		t.Fatal(err)
	}
	_, err = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("roll"), VersionStage: aws.String("pinned")})
	wantCode(t, err, "ResourceNotFoundException", "Secrets Manager can't find the specified secret value for staging label: pinned")
	_, err = h.sm.UpdateSecretVersionStage(ctx, &secretsmanager.UpdateSecretVersionStageInput{SecretId: aws.String("roll"),
		VersionStage: aws.String(StageCurrent), RemoveFromVersionId: c.VersionId})
	wantCode(t, err, "InvalidParameterException", "")
}

func TestListSecrets(t *testing.T) {
	h := newHarness(t)
	for _, n := range []string{"galley/a/one", "galley/a/two", "galley/b/one", "other"} {
		h.create(t, n, value())
	}
	var names []string
	var next *string
	for {
		out, err := h.sm.ListSecrets(ctx, &secretsmanager.ListSecretsInput{MaxResults: aws.Int32(2), NextToken: next,
			Filters: []types.Filter{{Key: types.FilterNameStringTypeName, Values: []string{"galley/", "!galley/b"}}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range out.SecretList {
			names = append(names, aws.ToString(e.Name))
			if len(e.SecretVersionsToStages) != 1 || !arnRE.MatchString(aws.ToString(e.ARN)) {
				t.Errorf("entry %s: %v %s", aws.ToString(e.Name), e.SecretVersionsToStages, aws.ToString(e.ARN))
			}
		}
		if next = out.NextToken; next == nil {
			break
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"galley/a/one", "galley/a/two"}) {
		t.Fatalf("ListSecrets = %v", names)
	}
	_, err := h.sm.ListSecrets(ctx, &secretsmanager.ListSecretsInput{NextToken: aws.String("garbage!")})
	wantCode(t, err, "InvalidNextTokenException", "")
}

func TestGetRandomPassword(t *testing.T) {
	h := newHarness(t)
	type check func(string) bool
	has := func(set string) check { return func(p string) bool { return strings.ContainsAny(p, set) } }
	not := func(c check) check { return func(p string) bool { return !c(p) } }
	for _, tc := range []struct {
		name string
		in   secretsmanager.GetRandomPasswordInput
		len  int
		want []check
	}{
		{"defaults", secretsmanager.GetRandomPasswordInput{}, 32,
			[]check{has(lowercase), has(uppercase), has(digits), has(Punctuation), not(has(" "))}},
		{"no punctuation", secretsmanager.GetRandomPasswordInput{PasswordLength: aws.Int64(48), ExcludePunctuation: aws.Bool(true)}, 48,
			[]check{has(lowercase), has(uppercase), has(digits), not(has(Punctuation))}},
		{"digits only", secretsmanager.GetRandomPasswordInput{PasswordLength: aws.Int64(20), ExcludePunctuation: aws.Bool(true),
			ExcludeUppercase: aws.Bool(true), ExcludeLowercase: aws.Bool(true)}, 20,
			[]check{has(digits), not(has(lowercase + uppercase + Punctuation))}},
		{"excluded characters", secretsmanager.GetRandomPasswordInput{PasswordLength: aws.Int64(200), ExcludeCharacters: aws.String("abcXYZ0123\"'\\/@")}, 200,
			[]check{not(has("abcXYZ0123\"'\\/@")), has(lowercase), has(digits)}},
		{"space", secretsmanager.GetRandomPasswordInput{PasswordLength: aws.Int64(4096), IncludeSpace: aws.Bool(true)}, 4096,
			[]check{has(" ")}},
		{"each type in four", secretsmanager.GetRandomPasswordInput{PasswordLength: aws.Int64(4), RequireEachIncludedType: aws.Bool(true)}, 4,
			[]check{has(lowercase), has(uppercase), has(digits), has(Punctuation)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				out, err := h.sm.GetRandomPassword(ctx, &tc.in)
				if err != nil {
					t.Fatal(err)
				}
				p := aws.ToString(out.RandomPassword)
				if len(p) != tc.len {
					t.Fatalf("length %d, want %d", len(p), tc.len)
				}
				for i, c := range tc.want {
					if !c(p) {
						t.Fatalf("a password breaks constraint %d", i)
					}
				}
			}
		})
	}
	for _, in := range []*secretsmanager.GetRandomPasswordInput{
		{PasswordLength: aws.Int64(0)}, {PasswordLength: aws.Int64(4097)},
	} {
		_, err := h.sm.GetRandomPassword(ctx, in)
		wantCode(t, err, "ValidationException", "")
	}
	for _, in := range []*secretsmanager.GetRandomPasswordInput{
		{PasswordLength: aws.Int64(3)}, // four required types
		{ExcludeLowercase: aws.Bool(true), ExcludeUppercase: aws.Bool(true), ExcludeNumbers: aws.Bool(true), ExcludePunctuation: aws.Bool(true)},
	} {
		_, err := h.sm.GetRandomPassword(ctx, in)
		wantCode(t, err, "InvalidParameterException", "")
	}
}

func TestGenerateSecretString(t *testing.T) {
	h := newHarness(t)
	// The bearer token's generator in infra/stack.
	arn, err := h.srv.CreateGenerated("galley/main/bearer-token", GenerateSecretString{
		PasswordOptions: PasswordOptions{PasswordLength: 48, ExcludePunctuation: true}}, WithDescription("kitchn's bearer token"))
	if err != nil {
		t.Fatal(err)
	}
	got := h.get(t, arn)
	if p := aws.ToString(got.SecretString); len(p) != 48 || strings.ContainsAny(p, Punctuation+" ") {
		t.Fatalf("generated token of %d characters, punctuation or space: %v", len(p), strings.ContainsAny(p, Punctuation+" "))
	}
	// A template decoded straight from CloudFormation JSON.
	var g GenerateSecretString
	if err := json.Unmarshal([]byte(`{"SecretStringTemplate":"{\"username\":\"galley\"}","GenerateStringKey":"password",
		"PasswordLength":24,"ExcludeCharacters":"\"@/\\","RequireEachIncludedType":true}`), &g); err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.CreateGenerated("db", g); err != nil {
		t.Fatal(err)
	}
	var obj map[string]string
	if err := json.Unmarshal([]byte(aws.ToString(h.get(t, "db").SecretString)), &obj); err != nil {
		t.Fatalf("generated string is not JSON: %v", err)
	}
	if obj["username"] != "galley" || len(obj["password"]) != 24 || strings.ContainsAny(obj["password"], "\"@/\\") || len(obj) != 2 {
		t.Fatalf("generated object: username %q, password of %d characters", obj["username"], len(obj["password"]))
	}
	for _, bad := range []GenerateSecretString{
		{SecretStringTemplate: `{"a":"b"}`},
		{GenerateStringKey: "password"},
		{SecretStringTemplate: `["not an object"]`, GenerateStringKey: "password"},
		{SecretStringTemplate: `{"password":"x"}`, GenerateStringKey: "password"},
		{PasswordOptions: PasswordOptions{PasswordLength: 5000}},
	} {
		if _, err := bad.Generate(); err == nil {
			t.Errorf("Generate(%+v) succeeded", bad)
		}
	}
}

// sigv4 is a well-formed SigV4 Authorization header (the gate in front
// checks signatures).
var sigv4 = http.Header{
	"Authorization": {"AWS4-HMAC-SHA256 Credential=" + testAKID + "/20260501/us-east-1/secretsmanager/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"},
	"X-Amz-Date":    {"20260501T000000Z"},
}

func raw(t *testing.T, url, op string, h http.Header, body []byte) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("X-Amz-Target", TargetPrefix+op)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("answer is not JSON: %s", b)
	}
	return resp.StatusCode, out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestAuthorizationRequired(t *testing.T) {
	h := newHarness(t)
	v := value()
	if _, err := h.srv.Create("s", v); err != nil {
		t.Fatal(err)
	}
	body := mustJSON(map[string]string{"SecretId": "s"})
	status, out := raw(t, h.url, OpGetSecretValue, nil, body)
	if status != 400 || out["__type"] != "MissingAuthenticationTokenException" || out["SecretString"] != nil {
		t.Fatalf("no Authorization = %d %v", status, out)
	}
	for _, auth := range []string{
		"Bearer " + rand.Text(),
		"AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00",
	} {
		status, out := raw(t, h.url, OpGetSecretValue, http.Header{"Authorization": {auth}, "X-Amz-Date": {"20260501T000000Z"}}, body)
		if status != 400 || out["__type"] != "IncompleteSignature" {
			t.Errorf("Authorization %q = %d %v", auth[:10], status, out)
		}
	}
	other := http.Header{"Authorization": {strings.Replace(sigv4.Get("Authorization"), "/secretsmanager/", "/ecs/", 1)}, "X-Amz-Date": {"20260501T000000Z"}}
	if status, out := raw(t, h.url, OpGetSecretValue, other, body); status != 400 || out["__type"] != "InvalidSignatureException" {
		t.Errorf("another service's scope = %d %v", status, out)
	}
	if status, out := raw(t, h.url, OpGetSecretValue, sigv4, body); status != 200 || out["SecretString"] != v {
		t.Errorf("signed request = %d, value matches %v", status, out["SecretString"] == v)
	}
	// The SDK with no credentials signs nothing, and is refused.
	anon := newClient(h.url, aws.AnonymousCredentials{})
	_, err := anon.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("s")})
	wantCode(t, err, "MissingAuthenticationTokenException", "")
}

func TestRequestsAreRecordedWithoutValues(t *testing.T) {
	h := newHarness(t)
	v := value()
	c := h.create(t, "rec", v)
	h.get(t, *c.ARN)
	_, _ = h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("missing")})
	reqs := h.srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests recorded", len(reqs))
	}
	want := []Request{
		{Op: OpCreateSecret, SecretID: "rec", AccessKeyID: testAKID, Status: 200},
		{Op: OpGetSecretValue, SecretID: *c.ARN, AccessKeyID: testAKID, Status: 200},
		{Op: OpGetSecretValue, SecretID: "missing", AccessKeyID: testAKID, Status: 400, Code: "ResourceNotFoundException"},
	}
	for i, r := range reqs {
		r.Time = time.Time{}
		if r != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, r, want[i])
		}
	}
	if got := h.srv.Requests(OpGetSecretValue); len(got) != 2 {
		t.Errorf("Requests(GetSecretValue) = %d", len(got))
	}
}

func TestFaults(t *testing.T) {
	h := newHarness(t)
	h.create(t, "f", value())
	h.srv.Inject(Fault{Op: OpGetSecretValue, Code: "InternalServiceError", Message: "injected", Status: 500, Times: 1})
	_, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("f")})
	var ise *types.InternalServiceError
	if !errors.As(err, &ise) {
		t.Fatalf("injected fault = %v", err)
	}
	h.get(t, "f") // the fault answered once
}

func TestWithEndpointVariable(t *testing.T) {
	h := newHarness(t)
	v := value()
	arn, err := h.srv.Create("env", v)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", dir+"/config")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", dir+"/credentials")
	t.Setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", h.url)
	t.Setenv("AWS_ACCESS_KEY_ID", testAKID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", rand.Text())
	t.Setenv("AWS_REGION", DefaultRegion)
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := lambdaapp.ReadSecret(ctx, secretsmanager.NewFromConfig(cfg), arn)
	if err != nil || string(got) != v {
		t.Fatalf("ReadSecret through AWS_ENDPOINT_URL_SECRETS_MANAGER: value matches %v, err %v", string(got) == v, err)
	}
}

func TestLogsHoldNoValue(t *testing.T) {
	var buf lockedBuffer
	h := newHarness(t, WithLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	v := value()
	c := h.create(t, "logged", v)
	h.put(t, "logged", value())
	h.get(t, *c.ARN)
	// A caller that sends a value where the id belongs.
	_, err := h.sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(v)})
	wantCode(t, err, "ResourceNotFoundException", "")
	out := buf.String()
	if !strings.Contains(out, *c.ARN) || !strings.Contains(out, "ResourceNotFoundException") {
		t.Fatalf("the log names no call:\n%s", out)
	}
	if strings.Contains(out, v) {
		t.Fatal("a log line holds a secret value")
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
