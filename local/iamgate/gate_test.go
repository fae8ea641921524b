package iamgate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/galley-run/galley/pkg/iampolicy"
)

const (
	account = DefaultAccount
	region  = DefaultRegion
	roleARN = "arn:aws:iam::" + account + ":role/galley-effects"
	session = "galley-effects-session"
	caller  = "arn:aws:sts::" + account + ":assumed-role/galley-effects/" + session
	tableT  = "arn:aws:dynamodb:" + region + ":" + account + ":table/T"
	queueQ  = "arn:aws:sqs:" + region + ":" + account + ":galley-q"
	queueU  = "https://sqs." + region + ".amazonaws.com/" + account + "/galley-q"
	cluster = "arn:aws:ecs:" + region + ":" + account + ":cluster/galley"
	taskDef = "arn:aws:ecs:" + region + ":" + account + ":task-definition/galley-worker:3"
	taskRol = "arn:aws:iam::" + account + ":role/galley-task"
	execRol = "arn:aws:iam::" + account + ":role/galley-exec"
)

func random(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

type principals map[string]Principal

func (p principals) Lookup(k string) (Principal, bool) { x, ok := p[k]; return x, ok }

// upstream stands for the stand-in: it records what reached it.
type upstream struct {
	mu      sync.Mutex
	targets []string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.targets = append(u.targets, r.Header.Get("X-Amz-Target"))
	u.mu.Unlock()
	w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
	w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(`{}`))), 10))
	_, _ = w.Write([]byte(`{}`))
}

func (u *upstream) reached() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.targets...)
}

type env struct {
	t    *testing.T
	gate *Gate
	up   *upstream
	url  string
	http *http.Client
	p    Principal
}

// newEnv serves a gate for svc over TLS (or plain HTTP) for one principal
// holding the given policies.
func newEnv(t *testing.T, svc Service, tls1 bool, policies []string, opts ...Option) *env {
	t.Helper()
	var ps []iampolicy.Policy
	for _, d := range policies {
		p, err := iampolicy.Parse([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	p := Principal{
		AccessKeyID: "ASIA" + strings.ToUpper(random(t, 8)), SecretAccessKey: random(t, 20),
		SessionToken: random(t, 32), RoleARN: roleARN, SessionName: session, Policies: ps,
	}
	up := &upstream{}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	g, err := New(svc, up, principals{p.AccessKeyID: p}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, gate: g, up: up, p: p}
	if tls1 {
		serverTLS, caPEM, err := NewLocalCA()
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(g)
		srv.TLS = serverTLS
		srv.StartTLS()
		t.Cleanup(srv.Close)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		e.url, e.http = srv.URL, &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	} else {
		srv := httptest.NewServer(g)
		t.Cleanup(srv.Close)
		e.url, e.http = srv.URL, srv.Client()
	}
	return e
}

// cfg is an SDK configuration signing with the principal's credentials,
// or with a changed secret or key.
func (e *env) cfg(mod func(*aws.Credentials)) aws.Config {
	c := aws.Credentials{AccessKeyID: e.p.AccessKeyID, SecretAccessKey: e.p.SecretAccessKey, SessionToken: e.p.SessionToken}
	if mod != nil {
		mod(&c)
	}
	return aws.Config{
		Region:           region,
		Credentials:      credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		HTTPClient:       e.http,
		BaseEndpoint:     aws.String(e.url),
		RetryMaxAttempts: 1,
	}
}

func (e *env) dynamo(mod func(*aws.Credentials)) *dynamodb.Client {
	return dynamodb.NewFromConfig(e.cfg(mod))
}

// apiError asserts err is an API error with code, and returns its message.
func apiError(t *testing.T, err error, code string) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error = %v, want API error %s", err, code)
	}
	if ae.ErrorCode() != code {
		t.Fatalf("ErrorCode = %q (%v), want %q", ae.ErrorCode(), err, code)
	}
	return ae.ErrorMessage()
}

func allow(actions, resources string, extra ...string) string {
	s := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":` + actions + `,"Resource":` + resources
	if len(extra) > 0 {
		s += `,"Condition":` + extra[0]
	}
	return s + `}]}`
}

var ctx = context.Background()

func item() map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "k"}}
}

func TestDynamoAllowAndDeny(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`["dynamodb:PutItem","dynamodb:GetItem"]`, `"`+tableT+`"`)})
	c := e.dynamo(nil)
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item()}); err != nil {
		t.Fatalf("allowed PutItem: %v", err)
	}
	_, err := c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String("T"), Key: item()})
	msg := apiError(t, err, "AccessDeniedException")
	want := "User: " + caller + " is not authorized to perform: dynamodb:DeleteItem on resource: " + tableT +
		" because no identity-based policy allows the dynamodb:DeleteItem action"
	if msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	// Another table is another resource.
	_, err = c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("Other"), Key: item()})
	apiError(t, err, "AccessDeniedException")

	if got := e.up.reached(); len(got) != 1 || got[0] != "DynamoDB_20120810.PutItem" {
		t.Fatalf("upstream reached by %v, want the PutItem only", got)
	}
	d := e.gate.Decisions()
	if len(d) != 3 || !d[0].Allowed || d[1].Allowed || d[1].Action != "dynamodb:DeleteItem" || d[1].Resource != tableT ||
		d[1].Role != roleARN || d[1].Caller != caller || d[2].Resource != "arn:aws:dynamodb:"+region+":"+account+":table/Other" {
		t.Fatalf("decisions = %+v", d)
	}
}

func TestDynamoExplicitDeny(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"*"`),
		`{"Statement":{"Sid":"KeepTables","Effect":"Deny","Action":"dynamodb:DeleteTable","Resource":"*"}}`})
	_, err := e.dynamo(nil).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String("T")})
	msg := apiError(t, err, "AccessDeniedException")
	if !strings.HasSuffix(msg, "dynamodb:DeleteTable on resource: "+tableT+" with an explicit deny in an identity-based policy") {
		t.Fatalf("message = %q", msg)
	}
	if d := e.gate.Decisions(); len(d) != 1 || !d[0].Explicit || d[0].Sid != "KeepTables" {
		t.Fatalf("decisions = %+v", d)
	}
}

func TestDynamoTransactionsAndIndexes(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`["dynamodb:PutItem","dynamodb:UpdateItem","dynamodb:Query"]`,
		`["`+tableT+`","`+tableT+`/index/ByRun"]`)})
	c := e.dynamo(nil)
	put := ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String("T"), Item: item()}}
	upd := ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{TableName: aws.String("T"), Key: item(), UpdateExpression: aws.String("SET a = :a"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":a": &ddbtypes.AttributeValueMemberN{Value: "1"}}}}
	chk := ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{TableName: aws.String("T"), Key: item(), ConditionExpression: aws.String("attribute_exists(pk)")}}
	if _, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put, upd}}); err != nil {
		t.Fatalf("put and update: %v", err)
	}
	_, err := c.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{put, chk}})
	if msg := apiError(t, err, "AccessDeniedException"); !strings.Contains(msg, "perform: dynamodb:ConditionCheckItem on resource: "+tableT) {
		t.Fatalf("message = %q", msg)
	}
	var actions []string
	for _, d := range e.gate.Decisions() {
		actions = append(actions, d.Action)
	}
	if got := strings.Join(actions, " "); got != "dynamodb:PutItem dynamodb:UpdateItem dynamodb:PutItem dynamodb:ConditionCheckItem" {
		t.Fatalf("actions = %s", got)
	}

	if _, err := c.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("T"), IndexName: aws.String("ByRun"),
		KeyConditionExpression: aws.String("r = :r"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":r": &ddbtypes.AttributeValueMemberS{Value: "x"}}}); err != nil {
		t.Fatalf("query on the allowed index: %v", err)
	}
	_, err = c.Query(ctx, &dynamodb.QueryInput{TableName: aws.String("T"), IndexName: aws.String("ByKey"),
		KeyConditionExpression: aws.String("r = :r"), ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":r": &ddbtypes.AttributeValueMemberS{Value: "x"}}})
	if msg := apiError(t, err, "AccessDeniedException"); !strings.Contains(msg, "on resource: "+tableT+"/index/ByKey ") {
		t.Fatalf("message = %q", msg)
	}
	// A batch is authorized per table, with the batch's own action.
	_, err = c.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{
		"T": {{PutRequest: &ddbtypes.PutRequest{Item: item()}}}}})
	if msg := apiError(t, err, "AccessDeniedException"); !strings.Contains(msg, "dynamodb:BatchWriteItem on resource: "+tableT) {
		t.Fatalf("message = %q", msg)
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"*"`)})
	in := &dynamodb.DescribeTableInput{TableName: aws.String("T")}
	tests := []struct {
		name string
		mod  func(*aws.Credentials)
		code string
	}{
		{"wrong secret key", func(c *aws.Credentials) { c.SecretAccessKey = random(t, 20) }, "InvalidSignatureException"},
		{"unknown access key", func(c *aws.Credentials) { c.AccessKeyID = "ASIA" + strings.ToUpper(random(t, 8)) }, "UnrecognizedClientException"},
		{"no session token", func(c *aws.Credentials) { c.SessionToken = "" }, "UnrecognizedClientException"},
		{"wrong session token", func(c *aws.Credentials) { c.SessionToken = random(t, 32) }, "UnrecognizedClientException"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.dynamo(tt.mod).DescribeTable(ctx, in)
			msg := apiError(t, err, tt.code)
			if tt.code == "UnrecognizedClientException" && msg != "The security token included in the request is invalid." {
				t.Fatalf("message = %q", msg)
			}
		})
	}
	if got := e.up.reached(); len(got) != 0 {
		t.Fatalf("unauthenticated requests reached upstream: %v", got)
	}
	if d := e.gate.Decisions(); len(d) != 0 {
		t.Fatalf("unauthenticated requests were authorized: %+v", d)
	}
	if _, err := e.dynamo(nil).DescribeTable(ctx, in); err != nil {
		t.Fatalf("right credentials: %v", err)
	}
	// The wrong region in the credential scope.
	cfg := e.cfg(nil)
	cfg.Region = "eu-west-1"
	_, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, in)
	apiError(t, err, "InvalidSignatureException")
}

func TestRawAuthentication(t *testing.T) {
	e := newEnv(t, DynamoDB, false, []string{allow(`"dynamodb:*"`, `"*"`)})
	req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(`{"TableName":"T"}`))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.DescribeTable")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "MissingAuthenticationTokenException") {
		t.Fatalf("unsigned: %d %s", resp.StatusCode, b)
	}

	// A signature from a clock more than 5 minutes off has expired.
	skewed := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"*"`)})
	skewed.gate.now = func() time.Time { return time.Now().Add(10 * time.Minute) }
	_, err = skewed.dynamo(nil).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("T")})
	if msg := apiError(t, err, "InvalidSignatureException"); !strings.HasPrefix(msg, "Signature expired") {
		t.Fatalf("message = %q", msg)
	}
}

func TestUnmodelledOperationIsRefused(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`"*"`, `"*"`)})
	_, err := e.dynamo(nil).DescribeLimits(ctx, &dynamodb.DescribeLimitsInput{})
	if msg := apiError(t, err, "UnknownOperationException"); !strings.Contains(msg, "not modelled") {
		t.Fatalf("message = %q", msg)
	}
	if got := e.up.reached(); len(got) != 0 {
		t.Fatalf("unmodelled operation reached upstream: %v", got)
	}
}

func tlsOnlySQS(actions string) string {
	return allow(actions, `"arn:aws:sqs:`+region+`:`+account+`:galley-*"`, `{"Bool":{"aws:SecureTransport":"true"}}`)
}

func TestSQSSecureTransport(t *testing.T) {
	policy := tlsOnlySQS(`["sqs:SendMessage","sqs:ReceiveMessage"]`)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queueU), MessageBody: aws.String("ring")}

	plain := newEnv(t, SQS, false, []string{policy})
	_, err := sqs.NewFromConfig(plain.cfg(nil)).SendMessage(ctx, in)
	msg := apiError(t, err, "AccessDenied")
	want := "User: " + caller + " is not authorized to perform: sqs:sendmessage on resource: " + queueQ +
		" because no identity-based policy allows the sqs:sendmessage action"
	if msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	var re interface{ HTTPStatusCode() int }
	if !errors.As(err, &re) || re.HTTPStatusCode() != 403 {
		t.Fatalf("status of %v is not 403", err)
	}
	if d := plain.gate.Decisions(); len(d) != 1 || d[0].Allowed {
		t.Fatalf("decisions = %+v", d)
	}

	secure := newEnv(t, SQS, true, []string{policy})
	if _, err := sqs.NewFromConfig(secure.cfg(nil)).SendMessage(ctx, in); err != nil {
		t.Fatalf("SendMessage over TLS: %v", err)
	}
	if got := secure.up.reached(); len(got) != 1 || got[0] != "AmazonSQS.SendMessage" {
		t.Fatalf("upstream reached by %v", got)
	}
}

func TestSQSBatchesAndListing(t *testing.T) {
	e := newEnv(t, SQS, true, []string{tlsOnlySQS(`["sqs:SendMessage","sqs:ReceiveMessage","sqs:CreateQueue"]`)})
	c := sqs.NewFromConfig(e.cfg(nil))
	if _, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueU),
		Entries: []sqstypes.SendMessageBatchRequestEntry{{Id: aws.String("1"), MessageBody: aws.String("a")}}}); err != nil {
		t.Fatalf("SendMessageBatch with sqs:SendMessage: %v", err)
	}
	_, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueU),
		Entries: []sqstypes.DeleteMessageBatchRequestEntry{{Id: aws.String("1"), ReceiptHandle: aws.String("h")}}})
	if msg := apiError(t, err, "AccessDenied"); !strings.Contains(msg, "perform: sqs:deletemessage on resource: "+queueQ) {
		t.Fatalf("message = %q", msg)
	}
	// Tagging on create needs sqs:TagQueue too.
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("galley-new"), Tags: map[string]string{"house": "h"}})
	if msg := apiError(t, err, "AccessDenied"); !strings.Contains(msg, "sqs:tagqueue on resource: arn:aws:sqs:"+region+":"+account+":galley-new") {
		t.Fatalf("message = %q", msg)
	}
	// ListQueues is authorized on "*": a queue pattern does not allow it.
	_, err = c.ListQueues(ctx, &sqs.ListQueuesInput{})
	if msg := apiError(t, err, "AccessDenied"); !strings.Contains(msg, "sqs:listqueues on resource: *") {
		t.Fatalf("message = %q", msg)
	}
	var got []string
	for _, d := range e.gate.Decisions() {
		got = append(got, d.Operation+"="+d.Action)
	}
	if s := strings.Join(got, " "); s != "SendMessageBatch=sqs:SendMessage DeleteMessageBatch=sqs:DeleteMessage CreateQueue=sqs:CreateQueue CreateQueue=sqs:TagQueue ListQueues=sqs:ListQueues" {
		t.Fatalf("decisions = %s", s)
	}

	// SQS's authentication errors carry the query protocol's codes.
	_, err = sqs.NewFromConfig(e.cfg(func(c *aws.Credentials) { c.AccessKeyID = "ASIA" + random(t, 8) })).ListQueues(ctx, &sqs.ListQueuesInput{})
	apiError(t, err, "InvalidClientTokenId")
	_, err = sqs.NewFromConfig(e.cfg(func(c *aws.Credentials) { c.SecretAccessKey = random(t, 20) })).ListQueues(ctx, &sqs.ListQueuesInput{})
	apiError(t, err, "SignatureDoesNotMatch")
}

func TestSecretsManager(t *testing.T) {
	known := "arn:aws:secretsmanager:" + region + ":" + account + ":secret:galley/token-AbCdEf"
	resolve := func(id string) (string, bool) {
		if id == "galley/token" || id == known {
			return known, true
		}
		return "", false
	}
	e := newEnv(t, SecretsManager, true, []string{allow(`"secretsmanager:GetSecretValue"`, `"`+known+`"`)}, WithSecretResolver(resolve))
	c := secretsmanager.NewFromConfig(e.cfg(nil))
	for _, id := range []string{"galley/token", known} {
		if _, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)}); err != nil {
			t.Fatalf("GetSecretValue(%s): %v", id, err)
		}
	}
	// A name nobody resolves is evaluated as name-??????: an exact ARN
	// does not allow it, and the denial names the secret as given.
	_, err := c.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String("galley/other")})
	want := "User: " + caller + " is not authorized to perform: secretsmanager:GetSecretValue on resource: galley/other" +
		" because no identity-based policy allows the secretsmanager:GetSecretValue action"
	if msg := apiError(t, err, "AccessDeniedException"); msg != want {
		t.Fatalf("message = %q\nwant      %q", msg, want)
	}
	d := e.gate.Decisions()
	if len(d) != 3 || d[0].Resource != known || d[2].Resource != "arn:aws:secretsmanager:"+region+":"+account+":secret:galley/other-??????" {
		t.Fatalf("decisions = %+v", d)
	}
	_, err = c.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String("galley/token")})
	apiError(t, err, "AccessDeniedException")
}

func TestECS(t *testing.T) {
	inCluster := `{"ArnEquals":{"ecs:cluster":"` + cluster + `"}}`
	run := allow(`"ecs:RunTask"`, `"`+taskDef+`"`, inCluster)
	stop := allow(`["ecs:StopTask","ecs:DescribeTasks"]`, `"arn:aws:ecs:`+region+`:`+account+`:task/galley/*"`, inCluster)
	tag := allow(`"ecs:TagResource"`, `"arn:aws:ecs:`+region+`:`+account+`:task/galley/*"`, `{"StringEquals":{"ecs:CreateAction":"RunTask"}}`)
	passTask := allow(`"iam:PassRole"`, `"`+taskRol+`"`, `{"StringEquals":{"iam:PassedToService":"ecs-tasks.amazonaws.com"}}`)
	passExec := allow(`"iam:PassRole"`, `"`+execRol+`"`, `{"StringEquals":{"iam:PassedToService":"ecs-tasks.amazonaws.com"}}`)
	defs := func(ref string) (TaskDefinition, bool) {
		if ref == taskDef || ref == "galley-worker:3" {
			return TaskDefinition{ARN: taskDef, TaskRoleARN: taskRol, ExecutionRoleARN: execRol}, true
		}
		return TaskDefinition{}, false
	}
	runIn := func(td string) *ecs.RunTaskInput {
		return &ecs.RunTaskInput{Cluster: aws.String("galley"), TaskDefinition: aws.String(td),
			Tags: []ecstypes.Tag{{Key: aws.String("house"), Value: aws.String("h")}}}
	}

	t.Run("allowed", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{run, stop, tag, passTask, passExec}, WithTaskDefinitions(defs))
		c := ecs.NewFromConfig(e.cfg(nil))
		if _, err := c.RunTask(ctx, runIn("galley-worker:3")); err != nil {
			t.Fatalf("RunTask: %v", err)
		}
		if _, err := c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(cluster), Task: aws.String("0123abcd")}); err != nil {
			t.Fatalf("StopTask: %v", err)
		}
		var got []string
		for _, d := range e.gate.Decisions() {
			got = append(got, d.Action+" "+d.Resource)
		}
		want := []string{"ecs:RunTask " + taskDef, "iam:PassRole " + taskRol, "iam:PassRole " + execRol,
			"ecs:TagResource arn:aws:ecs:" + region + ":" + account + ":task/galley/*",
			"ecs:StopTask arn:aws:ecs:" + region + ":" + account + ":task/galley/0123abcd"}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("decisions:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("PassRole denied", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{run, stop, tag, passTask}, WithTaskDefinitions(defs))
		_, err := ecs.NewFromConfig(e.cfg(nil)).RunTask(ctx, runIn(taskDef))
		want := "User: " + caller + " is not authorized to perform: iam:PassRole on resource: " + execRol +
			" because no identity-based policy allows the iam:PassRole action"
		if msg := apiError(t, err, "AccessDeniedException"); msg != want {
			t.Fatalf("message = %q\nwant      %q", msg, want)
		}
		if got := e.up.reached(); len(got) != 0 {
			t.Fatalf("upstream reached by %v", got)
		}
	})
	t.Run("another cluster", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{run, stop, tag, passTask, passExec}, WithTaskDefinitions(defs))
		in := runIn(taskDef)
		in.Cluster = aws.String("other")
		_, err := ecs.NewFromConfig(e.cfg(nil)).RunTask(ctx, in)
		if msg := apiError(t, err, "AccessDeniedException"); !strings.Contains(msg, "ecs:RunTask on resource: "+taskDef) {
			t.Fatalf("message = %q", msg)
		}
	})
	t.Run("tags need TagResource", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{run, passTask, passExec}, WithTaskDefinitions(defs))
		_, err := ecs.NewFromConfig(e.cfg(nil)).RunTask(ctx, runIn(taskDef))
		if msg := apiError(t, err, "AccessDeniedException"); !strings.Contains(msg, "ecs:TagResource on resource: arn:aws:ecs:"+region+":"+account+":task/galley/*") {
			t.Fatalf("message = %q", msg)
		}
	})
	t.Run("unknown task definition", func(t *testing.T) {
		e := newEnv(t, ECS, true, []string{allow(`"ecs:RunTask"`, `"*"`)}, WithTaskDefinitions(defs))
		_, err := ecs.NewFromConfig(e.cfg(nil)).RunTask(ctx, &ecs.RunTaskInput{TaskDefinition: aws.String("nope:1")})
		apiError(t, err, "ClientException")
		if got := e.up.reached(); len(got) != 0 {
			t.Fatalf("upstream reached by %v", got)
		}
	})
}
