package stsstandin_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	ststypes "github.com/aws/aws-sdk-go-v2/service/sts/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/stsstandin"
	"github.com/galley-run/galley/pkg/iampolicy"
	"github.com/galley-run/galley/pkg/standins"
)

const (
	account    = "000000000000"
	region     = "us-east-1"
	workerAPI  = "arn:aws:iam::" + account + ":role/galley-workerapi"
	reconciler = "arn:aws:iam::" + account + ":role/galley-reconciler"
	stranger   = "arn:aws:iam::" + account + ":role/galley-stranger"
	doorbell   = "arn:aws:iam::" + account + ":role/galley-doorbell"
	longRole   = "arn:aws:iam::" + account + ":role/galley-long"
)

var ctx = context.Background()

func random(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func parse(t *testing.T, doc string) iampolicy.Policy {
	t.Helper()
	p, err := iampolicy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func trust(t *testing.T, doc string) iampolicy.TrustPolicy {
	t.Helper()
	p, err := iampolicy.ParseTrust([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func allow(actions, resources string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":` + actions + `,"Resource":` + resources + `}]}`
}

type principals map[string]iamgate.Principal

func (p principals) Lookup(k string) (iamgate.Principal, bool) { x, ok := p[k]; return x, ok }

// stack is an STS gate in front of the stand-in, and an SQS gate in front
// of fauxqs when one runs, both over TLS, sharing one Principals: the
// callers' own sessions, then those the stand-in issues.
type stack struct {
	t       *testing.T
	sts     *stsstandin.Server
	stsGate *iamgate.Gate
	stsURL  string
	sqsGate *iamgate.Gate
	sqsURL  string
	http    *http.Client
	callers map[string]iamgate.Principal // by role ARN
	offset  atomic.Int64                 // the stand-in's clock, ahead of now by this many ns
	mu      sync.Mutex
	issued  []iamgate.Principal
}

func newStack(t *testing.T, withSQS bool) *stack {
	t.Helper()
	s := &stack{t: t, callers: map[string]iamgate.Principal{}}
	base := principals{}
	for arn, policies := range map[string][]string{
		workerAPI:  {allow(`"sts:AssumeRole"`, `["`+doorbell+`","`+longRole+`","arn:aws:iam::`+account+`:role/galley-unknown"]`)},
		reconciler: {allow(`"sqs:*"`, `"*"`)},
		stranger:   {allow(`"sts:AssumeRole"`, `"*"`)},
	} {
		var ps []iampolicy.Policy
		for _, d := range policies {
			ps = append(ps, parse(t, d))
		}
		name := arn[strings.LastIndex(arn, "/")+1:]
		p := iamgate.Principal{AccessKeyID: "ASIA" + strings.ToUpper(random(t, 8)), SecretAccessKey: random(t, 20),
			SessionToken: random(t, 32), RoleARN: arn, SessionName: name, Policies: ps}
		base[p.AccessKeyID] = p
		s.callers[arn] = p
	}
	roles := map[string]stsstandin.Role{
		doorbell: {
			ARN: doorbell,
			Trust: trust(t, `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"`+workerAPI+`"},"Action":"sts:AssumeRole"},`+
				`{"Effect":"Allow","Principal":{"Service":"ecs-tasks.amazonaws.com"},"Action":"sts:AssumeRole"}]}`),
			Policies: []iampolicy.Policy{parse(t, allow(`["sqs:ReceiveMessage","sqs:DeleteMessage"]`, `"arn:aws:sqs:`+region+`:`+account+`:galley-bell-*"`))},
		},
		longRole: {
			ARN:                longRole,
			Trust:              trust(t, `{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":{"AWS":"`+account+`"},"Action":"sts:AssumeRole"}}`),
			MaxSessionDuration: 2 * time.Hour,
		},
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := stsstandin.New(func(arn string) (stsstandin.Role, bool) { r, ok := roles[arn]; return r, ok },
		stsstandin.WithClock(func() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }),
		stsstandin.WithLogger(quiet),
		stsstandin.WithOnIssue(func(p iamgate.Principal) { s.mu.Lock(); s.issued = append(s.issued, p); s.mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	s.sts = srv
	all := iamgate.Chain(base, srv)

	serverTLS, caPEM, err := iamgate.NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	s.http = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	serve := func(h http.Handler) string {
		hs := httptest.NewUnstartedServer(h)
		hs.TLS = serverTLS
		hs.StartTLS()
		t.Cleanup(hs.Close)
		return hs.URL
	}
	// The stand-in is the gate's upstream handler: it has no listener.
	if s.stsGate, err = iamgate.New(iamgate.STS, srv, all, iamgate.WithLogger(quiet)); err != nil {
		t.Fatal(err)
	}
	s.stsURL = serve(s.stsGate)
	if withSQS {
		standins.Require(t, standins.SQS)
		up, err := iamgate.Proxy(os.Getenv(standins.SQS))
		if err != nil {
			t.Fatal(err)
		}
		if s.sqsGate, err = iamgate.New(iamgate.SQS, up, all, iamgate.WithLogger(quiet)); err != nil {
			t.Fatal(err)
		}
		s.sqsURL = serve(s.sqsGate)
	}
	return s
}

func (s *stack) cfg(url, key, secret, token string) aws.Config {
	return aws.Config{Region: region, Credentials: credentials.NewStaticCredentialsProvider(key, secret, token),
		HTTPClient: s.http, BaseEndpoint: aws.String(url), RetryMaxAttempts: 1}
}

// stsAs is an STS client signing as the caller role's own session.
func (s *stack) stsAs(role string) *sts.Client {
	p := s.callers[role]
	return sts.NewFromConfig(s.cfg(s.stsURL, p.AccessKeyID, p.SecretAccessKey, p.SessionToken))
}

func (s *stack) stsWith(c *ststypes.Credentials) *sts.Client {
	return sts.NewFromConfig(s.cfg(s.stsURL, *c.AccessKeyId, *c.SecretAccessKey, *c.SessionToken))
}

func (s *stack) sqsWith(c *ststypes.Credentials) *sqs.Client {
	return sqs.NewFromConfig(s.cfg(s.sqsURL, *c.AccessKeyId, *c.SecretAccessKey, *c.SessionToken))
}

func (s *stack) issuedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.issued)
}

// apiErr asserts err is an API error with code and HTTP status, and
// returns its message.
func apiErr(t *testing.T, err error, code string, status int) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v, want API error %s", err, code)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("ErrorCode = %q (%v), want %q", ae.ErrorCode(), err, code)
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != status {
		t.Fatalf("%v: want HTTP %d", err, status)
	}
	return ae.ErrorMessage()
}

func queuePolicy(queueARN string) string {
	return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:ReceiveMessage","Resource":"` + queueARN + `"}]}`
}

func queueARN(name string) string { return "arn:aws:sqs:" + region + ":" + account + ":" + name }

// The doorbell design end to end: the worker API's role assumes the
// doorbell role with a session policy naming one worker's queue; the
// session receives from that queue through the SQS gate and is denied
// the other worker's, although the doorbell role's own policy allows
// both; without a session policy it could receive from both.
func TestSessionPolicyScopesQueues(t *testing.T) {
	s := newStack(t, true)
	// The queues, made directly on fauxqs (no IAM there).
	direct := sqs.NewFromConfig(aws.Config{Region: region, BaseEndpoint: aws.String(os.Getenv(standins.SQS)),
		Credentials: credentials.NewStaticCredentialsProvider("local", random(t, 8), ""), RetryMaxAttempts: 1})
	suffix := random(t, 4)
	nameA, nameB := "galley-bell-a-"+suffix, "galley-bell-b-"+suffix
	urls := map[string]string{}
	for _, n := range []string{nameA, nameB} {
		out, err := direct.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(n)})
		if err != nil {
			t.Fatal(err)
		}
		urls[n] = *out.QueueUrl
		t.Cleanup(func() { _, _ = direct.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	}
	if _, err := direct.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(urls[nameA]), MessageBody: aws.String("ring")}); err != nil {
		t.Fatal(err)
	}

	out, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(doorbell), RoleSessionName: aws.String("worker-a"),
		DurationSeconds: aws.Int32(900), Policy: aws.String(queuePolicy(queueARN(nameA))),
	})
	if err != nil {
		t.Fatalf("AssumeRole: %v", err)
	}
	sessionARN := "arn:aws:sts::" + account + ":assumed-role/galley-doorbell/worker-a"
	if *out.AssumedRoleUser.Arn != sessionARN {
		t.Fatalf("AssumedRoleUser.Arn = %q, want %q", *out.AssumedRoleUser.Arn, sessionARN)
	}
	if !regexp.MustCompile(`^AROA[A-Z2-7]{17}:worker-a$`).MatchString(*out.AssumedRoleUser.AssumedRoleId) {
		t.Fatalf("AssumedRoleId = %q", *out.AssumedRoleUser.AssumedRoleId)
	}
	if !regexp.MustCompile(`^ASIA[A-Z2-7]{16}$`).MatchString(*out.Credentials.AccessKeyId) || len(*out.Credentials.SecretAccessKey) != 40 {
		t.Fatalf("credentials not shaped as AWS's: key %q, secret of %d characters", *out.Credentials.AccessKeyId, len(*out.Credentials.SecretAccessKey))
	}
	if d := time.Until(*out.Credentials.Expiration); d < 14*time.Minute || d > 15*time.Minute {
		t.Fatalf("Expiration in %v, want 15 minutes", d)
	}
	if out.PackedPolicySize == nil || *out.PackedPolicySize < 1 || *out.PackedPolicySize > 100 {
		t.Fatalf("PackedPolicySize = %v", out.PackedPolicySize)
	}

	q := s.sqsWith(out.Credentials)
	got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[nameA]), WaitTimeSeconds: 1})
	if err != nil {
		t.Fatalf("ReceiveMessage on the session's queue: %v", err)
	}
	if len(got.Messages) != 1 || *got.Messages[0].Body != "ring" {
		t.Fatalf("received %+v, want the ring", got.Messages)
	}
	_, err = q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[nameB])})
	msg := apiErr(t, err, "AccessDenied", http.StatusForbidden)
	want := "User: " + sessionARN + " is not authorized to perform: sqs:receivemessage on resource: " + queueARN(nameB) +
		" because no session policy allows the sqs:receivemessage action"
	if msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	// The role's own limit still holds: DeleteMessage is the role's but
	// not the session's.
	_, err = q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(urls[nameA]), ReceiptHandle: got.Messages[0].ReceiptHandle})
	apiErr(t, err, "AccessDenied", http.StatusForbidden)

	// The same role without a session policy: both queues.
	wide, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("wide")})
	if err != nil {
		t.Fatal(err)
	}
	if wide.PackedPolicySize != nil {
		t.Fatalf("PackedPolicySize %d without a policy", *wide.PackedPolicySize)
	}
	if _, err := s.sqsWith(wide.Credentials).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[nameB])}); err != nil {
		t.Fatalf("the role's policy allows queue B: %v", err)
	}

	// Credentials issued long ago have expired: refused before any policy.
	s.offset.Store(int64(-2 * time.Hour))
	old, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(doorbell), RoleSessionName: aws.String("worker-a"), Policy: aws.String(queuePolicy(queueARN(nameA))),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.sqsWith(old.Credentials).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(urls[nameA])})
	if msg := apiErr(t, err, "ExpiredToken", http.StatusForbidden); msg != "The security token included in the request is expired" {
		t.Fatalf("message = %q", msg)
	}
}

// GetCallerIdentity names the caller: a function's role session, or a
// session the stand-in issued (after which it expires like any other).
func TestGetCallerIdentity(t *testing.T) {
	s := newStack(t, false)
	id, err := s.stsAs(workerAPI).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if *id.Arn != "arn:aws:sts::"+account+":assumed-role/galley-workerapi/galley-workerapi" || *id.Account != account ||
		!strings.HasSuffix(*id.UserId, ":galley-workerapi") {
		t.Fatalf("identity = %s %s %s", *id.Arn, *id.UserId, *id.Account)
	}
	// The reconciler has no STS permission at all: none is needed.
	if _, err := s.stsAs(reconciler).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		t.Fatal(err)
	}
	out, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("w-1")})
	if err != nil {
		t.Fatal(err)
	}
	id, err = s.stsWith(out.Credentials).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		t.Fatal(err)
	}
	if *id.Arn != "arn:aws:sts::"+account+":assumed-role/galley-doorbell/w-1" || *id.UserId != *out.AssumedRoleUser.AssumedRoleId {
		t.Fatalf("assumed identity = %s %s", *id.Arn, *id.UserId)
	}
	p, ok := s.sts.Lookup(*out.Credentials.AccessKeyId)
	if !ok || p.RoleARN != doorbell || p.SessionName != "w-1" || len(p.Policies) != 1 || len(p.SessionPolicies) != 0 ||
		!p.Expires.Equal(out.Credentials.Expiration.Truncate(time.Second)) {
		t.Fatalf("Lookup = %+v, %v", p.SessionARN(), ok)
	}
	// Issued with the clock two hours back, the session has expired.
	s.offset.Store(int64(-2 * time.Hour))
	old, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("w-2")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.stsWith(old.Credentials).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	apiErr(t, err, "ExpiredToken", http.StatusForbidden)
}

// Who may assume a role: the caller's identity policy must allow
// sts:AssumeRole on it (checked at the gate), and the role's trust policy
// must name the caller (checked by the stand-in); an unknown role is
// answered like a refusing trust policy.
func TestWhoMayAssume(t *testing.T) {
	s := newStack(t, false)
	denied := func(role, caller, session string) {
		t.Helper()
		_, err := s.stsAs(caller).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(role), RoleSessionName: aws.String("s-1")})
		msg := apiErr(t, err, "AccessDenied", http.StatusForbidden)
		want := "User: arn:aws:sts::" + account + ":assumed-role/" + session + "/" + session +
			" is not authorized to perform: sts:AssumeRole on resource: " + role
		if msg != want {
			t.Fatalf("message = %q\nwant      %q", msg, want)
		}
	}
	// The stranger may call sts:AssumeRole on anything, but the doorbell
	// role trusts only the worker API.
	denied(doorbell, stranger, "galley-stranger")
	// The reconciler's policy has no sts:AssumeRole: the gate refuses.
	denied(doorbell, reconciler, "galley-reconciler")
	var gateDenial bool
	for _, r := range s.stsGate.Decisions() {
		gateDenial = gateDenial || (!r.Allowed && r.Role == reconciler && r.Action == "sts:AssumeRole" && r.Resource == doorbell)
	}
	if !gateDenial {
		t.Fatalf("the gate recorded no denial of the reconciler: %+v", s.stsGate.Decisions())
	}
	// A role nobody made.
	denied("arn:aws:iam::"+account+":role/galley-unknown", workerAPI, "galley-workerapi")
	if n := s.issuedCount(); n != 0 {
		t.Fatalf("%d sessions issued, want none", n)
	}
	// A trust policy naming the account (as its id) lets any principal of
	// it whose own policy allows sts:AssumeRole.
	if _, err := s.stsAs(stranger).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(longRole), RoleSessionName: aws.String("s-1")}); err != nil {
		t.Fatalf("account trust: %v", err)
	}
	if _, err := s.stsAs(workerAPI).AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("s-1")}); err != nil {
		t.Fatalf("the trusted caller: %v", err)
	}
	if n := s.issuedCount(); n != 2 {
		t.Fatalf("%d sessions issued, want 2", n)
	}
}

// What AWS refuses, the stand-in refuses, with AWS's codes.
func TestAssumeRoleValidation(t *testing.T) {
	s := newStack(t, false)
	c := s.stsAs(workerAPI)
	big := func(n int) string {
		// A valid policy of about n characters: one statement listing
		// many resources.
		var res []string
		for i := 0; len(strings.Join(res, ",")) < n-120; i++ {
			res = append(res, `"arn:aws:sqs:us-east-1:000000000000:galley-bell-`+strings.Repeat("x", 20)+`"`)
		}
		return `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"sqs:ReceiveMessage","Resource":[` + strings.Join(res, ",") + `]}]}`
	}
	for _, tc := range []struct {
		name   string
		in     sts.AssumeRoleInput
		code   string
		status int
		msg    string // a part of the message
	}{
		{"session name pattern", sts.AssumeRoleInput{RoleSessionName: aws.String("worker a")}, "ValidationError", 400,
			`1 validation error detected: Value 'worker a' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\w+=,.@-]*`},
		{"session name too short", sts.AssumeRoleInput{RoleSessionName: aws.String("w")}, "ValidationError", 400,
			"Member must have length greater than or equal to 2"},
		{"session name too long", sts.AssumeRoleInput{RoleSessionName: aws.String(strings.Repeat("w", 65))}, "ValidationError", 400,
			"Member must have length less than or equal to 64"},
		{"duration too short", sts.AssumeRoleInput{DurationSeconds: aws.Int32(899)}, "ValidationError", 400,
			"Value '899' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to 900"},
		{"duration over the API's", sts.AssumeRoleInput{DurationSeconds: aws.Int32(43201)}, "ValidationError", 400,
			"Member must have value less than or equal to 43200"},
		{"two errors at once", sts.AssumeRoleInput{RoleSessionName: aws.String("w"), DurationSeconds: aws.Int32(10)}, "ValidationError", 400,
			"2 validation errors detected: "},
		{"duration over the role's", sts.AssumeRoleInput{DurationSeconds: aws.Int32(3601)}, "ValidationError", 400,
			"The requested DurationSeconds exceeds the MaxSessionDuration set for this role."},
		{"duration over role chaining's", sts.AssumeRoleInput{RoleArn: aws.String(longRole), DurationSeconds: aws.Int32(7200)}, "ValidationError", 400,
			"The requested DurationSeconds exceeds the 1 hour session limit for roles assumed by role chaining."},
		{"policy not JSON", sts.AssumeRoleInput{Policy: aws.String(`{"Version":"2012-10-17",`)}, "MalformedPolicyDocument", 400,
			"The policy is not in the valid JSON format."},
		{"policy naming a principal", sts.AssumeRoleInput{Policy: aws.String(
			`{"Version":"2012-10-17","Statement":{"Effect":"Allow","Principal":"*","Action":"sqs:*","Resource":"*"}}`)},
			"MalformedPolicyDocument", 400, "Principal"},
		{"policy without statement", sts.AssumeRoleInput{Policy: aws.String(`{"Version":"2012-10-17"}`)}, "MalformedPolicyDocument", 400, "Statement"},
		{"policy outside its characters", sts.AssumeRoleInput{Policy: aws.String(`{"Version":"2012-10-17","Statement":{"Sid":"ā"}}`)}, "ValidationError", 400,
			`Member must satisfy regular expression pattern: [\u0009\u000A\u000D\u0020-\u00FF]+`},
		{"packed policy too large", sts.AssumeRoleInput{Policy: aws.String(big(1950))}, "PackedPolicyTooLarge", 400,
			"% of allotted space, please use smaller policy."},
		{"plain policy too long", sts.AssumeRoleInput{Policy: aws.String(big(2100))}, "ValidationError", 400,
			"at 'policy' failed to satisfy constraint: Member must have length less than or equal to 2048"},
		// The stranger may sts:AssumeRole on "*", so the gate lets these by
		// (it denies the worker API, whose policy names its roles).
		{"role ARN not an ARN", sts.AssumeRoleInput{RoleArn: aws.String("galley-doorbell-role-name")}, "ValidationError", 400,
			"Request ARN is invalid"},
		{"role ARN too short", sts.AssumeRoleInput{RoleArn: aws.String("arn:aws:iam::1:r/x")}, "ValidationError", 400,
			"Member must have length greater than or equal to 20"},
		{"session tags", sts.AssumeRoleInput{Tags: []ststypes.Tag{{Key: aws.String("k"), Value: aws.String("v")}}}, "ValidationError", 400,
			"does not model session tags"},
		{"managed session policies", sts.AssumeRoleInput{PolicyArns: []ststypes.PolicyDescriptorType{{Arn: aws.String("arn:aws:iam::aws:policy/ReadOnlyAccess")}}},
			"ValidationError", 400, "does not model managed session policies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			if in.RoleArn == nil {
				in.RoleArn = aws.String(doorbell)
			}
			if in.RoleSessionName == nil {
				in.RoleSessionName = aws.String("worker-1")
			}
			cl := c
			if strings.HasPrefix(tc.name, "role ARN") {
				cl = s.stsAs(stranger)
			}
			_, err := cl.AssumeRole(ctx, &in)
			if err == nil {
				t.Fatal("AssumeRole succeeded")
			}
			if msg := apiErr(t, err, tc.code, tc.status); !strings.Contains(msg, tc.msg) {
				t.Fatalf("message = %q, want it to contain %q", msg, tc.msg)
			}
		})
	}
	if n := s.issuedCount(); n != 0 {
		t.Fatalf("%d sessions issued by refused requests", n)
	}
	// The limits themselves are allowed.
	for _, in := range []sts.AssumeRoleInput{
		{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("w="), DurationSeconds: aws.Int32(900)},
		{RoleArn: aws.String(doorbell), RoleSessionName: aws.String(strings.Repeat("w", 64)), DurationSeconds: aws.Int32(3600)},
		{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("a.b@c,d+e-f_g"), Policy: aws.String(queuePolicy("*"))},
	} {
		if _, err := c.AssumeRole(ctx, &in); err != nil {
			t.Fatalf("AssumeRole(%s, %v): %v", *in.RoleSessionName, in.DurationSeconds, err)
		}
	}
}

// Only the gate may name the caller: a request reaching the stand-in
// without the gate's header is refused.
func TestNotBehindTheGate(t *testing.T) {
	s := newStack(t, false)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("Action=GetCallerIdentity&Version=2011-06-15"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	s.sts.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "<Code>MissingAuthenticationToken</Code>") {
		t.Fatalf("answer %d %s", rec.Code, rec.Body.String())
	}
}
