package iamgate

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/galley-run/galley/pkg/iampolicy"
)

// set changes the env's principal, as the gate will find it.
func (e *env) set(mod func(*Principal)) {
	e.t.Helper()
	mod(&e.p)
	e.gate.principals.(principals)[e.p.AccessKeyID] = e.p
}

func mustParse(t *testing.T, docs ...string) []iampolicy.Policy {
	t.Helper()
	var out []iampolicy.Policy
	for _, d := range docs {
		p, err := iampolicy.Parse([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// A session policy bounds the session: the role's policies allow both
// tables, the session policy only T, so only T is allowed; the denial says
// the session policy is why. An explicit deny in the session policy wins
// over the role's allow, and the role's own limits still hold.
func TestSessionPolicyIntersection(t *testing.T) {
	tableU := "arn:aws:dynamodb:us-east-1:000000000000:table/U"
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:GetItem"`, `["`+tableT+`","`+tableU+`"]`)})
	c := e.dynamo(nil)
	get := func(table string) error {
		_, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: item()})
		return err
	}
	if err := get("U"); err != nil {
		t.Fatalf("without a session policy the role's policy allows U: %v", err)
	}

	e.set(func(p *Principal) {
		p.SessionPolicies = mustParse(t, allow(`["dynamodb:GetItem","dynamodb:PutItem"]`, `"`+tableT+`"`))
	})
	if err := get("T"); err != nil {
		t.Fatalf("both allow T: %v", err)
	}
	msg := apiError(t, get("U"), "AccessDeniedException")
	want := "User: " + caller + " is not authorized to perform: dynamodb:GetItem on resource: " + tableU +
		" because no session policy allows the dynamodb:GetItem action"
	if msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	// The session policy cannot grant what the role lacks.
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item()})
	msg = apiError(t, err, "AccessDeniedException")
	if !strings.HasSuffix(msg, "because no identity-based policy allows the dynamodb:PutItem action") {
		t.Fatalf("PutItem denial = %q, want the identity policy named", msg)
	}
	// An explicit deny in the session policy.
	e.set(func(p *Principal) {
		p.SessionPolicies = mustParse(t, allow(`"dynamodb:*"`, `"*"`),
			`{"Version":"2012-10-17","Statement":{"Effect":"Deny","Action":"dynamodb:GetItem","Resource":"`+tableT+`"}}`)
	})
	msg = apiError(t, get("T"), "AccessDeniedException")
	if !strings.HasSuffix(msg, "with an explicit deny in a session policy") {
		t.Fatalf("denial = %q, want the session policy's explicit deny", msg)
	}
	if err := get("U"); err != nil {
		t.Fatalf("U is allowed by both: %v", err)
	}
	var last Record
	for _, r := range e.gate.Decisions() {
		if !r.Allowed {
			last = r
		}
	}
	if !last.BySession || !last.Explicit {
		t.Fatalf("last denial record = %+v, want BySession and Explicit", last)
	}
}

// Expired credentials are refused by every service the gate fronts, in
// each service's words, before any policy is consulted.
func TestExpiredCredentials(t *testing.T) {
	all := allow(`"*"`, `"*"`)
	expire := func(e *env) { e.set(func(p *Principal) { p.Expires = time.Now().Add(-time.Second) }) }
	const msg = "The security token included in the request is expired"
	check := func(t *testing.T, err error, code string, e *env) {
		t.Helper()
		if got := apiError(t, err, code); got != msg {
			t.Fatalf("message = %q, want %q", got, msg)
		}
		if n := len(e.up.reached()); n != 0 {
			t.Fatalf("%d requests reached the upstream", n)
		}
	}
	t.Run("dynamodb", func(t *testing.T) {
		e := newEnv(t, DynamoDB, true, []string{all})
		expire(e)
		_, err := e.dynamo(nil).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("T"), Key: item()})
		check(t, err, "ExpiredTokenException", e)
	})
	t.Run("sqs", func(t *testing.T) {
		e := newEnv(t, SQS, true, []string{all})
		expire(e)
		_, err := sqs.NewFromConfig(e.cfg(nil)).ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueU)})
		check(t, err, "ExpiredToken", e)
	})
	t.Run("secretsmanager", func(t *testing.T) {
		e := newEnv(t, SecretsManager, true, []string{all})
		expire(e)
		_, err := secretsmanager.NewFromConfig(e.cfg(nil)).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("s")})
		check(t, err, "ExpiredTokenException", e)
	})
	t.Run("ecs", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{all})
		expire(e)
		_, err := ecs.NewFromConfig(e.cfg(nil)).ListTasks(ctx, &ecs.ListTasksInput{})
		check(t, err, "ExpiredTokenException", e)
	})
	t.Run("sts", func(t *testing.T) {
		e := newEnv(t, STS, true, []string{all})
		expire(e)
		_, err := sts.NewFromConfig(e.cfg(nil)).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		check(t, err, "ExpiredToken", e)
	})
	t.Run("not yet expired", func(t *testing.T) {
		e := newEnv(t, DynamoDB, true, []string{all})
		e.set(func(p *Principal) { p.Expires = time.Now().Add(time.Hour) })
		if _, err := e.dynamo(nil).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("T"), Key: item()}); err != nil {
			t.Fatal(err)
		}
	})
}

// stsUpstream stands for the STS stand-in: it answers GetCallerIdentity
// and records the caller header the gate gave it.
type stsUpstream struct {
	mu      sync.Mutex
	callers []string
}

func (u *stsUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.callers = append(u.callers, strings.Join(r.Header.Values(CallerHeader), "|"))
	u.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, `<GetCallerIdentityResponse xmlns="`+STSNamespace+`"><GetCallerIdentityResult>`+
		`<Arn>x</Arn><UserId>y</UserId><Account>000000000000</Account></GetCallerIdentityResult>`+
		`<ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></GetCallerIdentityResponse>`)
}

// STS at the gate: GetCallerIdentity needs no permission (an explicit
// deny does not stop it); the upstream learns the caller from the gate's
// header only, a client's copy being removed; sts:AssumeRole is checked on
// the role with the session name in the context and denied as STS denies,
// in XML with HTTP 403. The same with the gate counting usage (aws-local's
// wiring), whose forwarding is its own.
func TestSTSGate(t *testing.T) {
	for _, counted := range []bool{false, true} {
		t.Run(fmt.Sprintf("counted=%v", counted), func(t *testing.T) { testSTSGate(t, counted) })
	}
}

func testSTSGate(t *testing.T, counted bool) {
	doorbell := "arn:aws:iam::000000000000:role/galley-doorbell"
	e := newEnv(t, STS, true, []string{
		`{"Version":"2012-10-17","Statement":{"Effect":"Deny","Action":"sts:GetCallerIdentity","Resource":"*"}}`,
		allow(`"sts:AssumeRole"`, `"`+doorbell+`"`, `{"StringLike":{"sts:RoleSessionName":"worker-*"}}`),
	})
	up := &stsUpstream{}
	e.gate.upstream = up
	if counted {
		e.gate.usage = func(Call) {}
	}
	forged := url.Values{"role": {doorbell}, "session": {"forged"}, "account": {account}}.Encode()
	c := sts.NewFromConfig(e.cfg(nil), func(o *sts.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return smithyhttp.AddHeaderValue(CallerHeader, forged)(s)
		})
	})
	if _, err := c.GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{}); err != nil {
		t.Fatalf("GetCallerIdentity despite an explicit deny: %v", err)
	}
	want := url.Values{"role": {roleARN}, "session": {session}, "account": {account}, "region": {region}, "tls": {"true"}}.Encode()
	if len(up.callers) != 1 || up.callers[0] != want {
		t.Fatalf("upstream saw caller %q, want only the gate's %q", up.callers, want)
	}

	_, err := c.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("other-1")})
	msg := apiError(t, err, "AccessDenied")
	if want := "User: " + caller + " is not authorized to perform: sts:AssumeRole on resource: " + doorbell; msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	var re *smithyhttp.ResponseError
	if !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden {
		t.Fatalf("status of the denial: %v, want 403", err)
	}
	if _, err := c.AssumeRole(ctx, &sts.AssumeRoleInput{RoleArn: aws.String(doorbell), RoleSessionName: aws.String("worker-1")}); err == nil ||
		strings.Contains(err.Error(), "AccessDenied") {
		// The recorder's answer is not an AssumeRole answer, so the SDK
		// fails to decode it; what matters is that the gate let it by.
		t.Fatalf("AssumeRole with a session name the policy allows: %v, want it passed to the upstream", err)
	}
	if len(up.callers) != 2 {
		t.Fatalf("upstream reached %d times, want 2", len(up.callers))
	}
	// An operation the gate does not model is refused.
	_, err = c.GetSessionToken(ctx, &sts.GetSessionTokenInput{})
	apiError(t, err, "UnknownOperationException")
	if len(up.callers) != 2 {
		t.Fatalf("upstream reached %d times, want 2", len(up.callers))
	}
}
