package iamgate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// signedDynamo sends body as operation op, signed with the principal's
// credentials, and returns the status and the answer.
func (e *env) signedDynamo(op, body string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url, bytes.NewReader([]byte(body)))
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: e.p.AccessKeyID, SecretAccessKey: e.p.SecretAccessKey, SessionToken: e.p.SessionToken}
	req.Header.Set("X-Amz-Security-Token", e.p.SessionToken)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "dynamodb", "us-east-1", time.Now()); err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The gate reads a body the way the service will: a member named again in
// another case ("tableName" beside "TableName", "put" beside "Put"), which
// encoding/json would fold into one, is refused rather than checked as one
// request and served as another; and a request the mapping finds nothing
// to check in never reaches the service.
func TestAmbiguousBodiesRefused(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"arn:aws:dynamodb:us-east-1:000000000000:table/allowed"`)})
	for _, c := range []struct{ name, op, body, want string }{
		{"case-folded table name", "PutItem", `{"TableName":"forbidden","tableName":"allowed","Item":{}}`, "SerializationException"},
		{"case-folded transaction member", "TransactWriteItems",
			`{"TransactItems":[{"Put":{"TableName":"forbidden","Item":{}},"put":null}]}`, "SerializationException"},
		{"nothing to check", "TransactWriteItems", `{"TransactItems":[{}]}`, "ValidationException"},
	} {
		status, body := e.signedDynamo(c.op, c.body)
		if status != 400 || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want 400 %s", c.name, status, body, c.want)
		}
	}
	if got := e.up.reached(); len(got) != 0 {
		t.Fatalf("an ambiguous request reached the service: %v", got)
	}
	// The same operation, unambiguous and allowed, passes.
	if status, body := e.signedDynamo("PutItem", `{"TableName":"allowed","Item":{"tableName":{"S":"an attribute may be named so"}}}`); status != 200 {
		t.Fatalf("allowed put: %d %s", status, body)
	}
}

// An operation header left out of the signature is refused: a captured
// request could otherwise be replayed as another operation.
func TestUnsignedOperationRefused(t *testing.T) {
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:*"`, `"*"`)})
	body := `{"TableName":"T"}`
	req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	req.Header.Set("X-Amz-Security-Token", e.p.SessionToken)
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: e.p.AccessKeyID, SecretAccessKey: e.p.SecretAccessKey, SessionToken: e.p.SessionToken}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "dynamodb", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.DeleteTable") // added after signing
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "X-Amz-Target") {
		t.Fatalf("unsigned operation: %d %s", resp.StatusCode, b)
	}
	if got := e.up.reached(); len(got) != 0 {
		t.Fatalf("it reached the service: %v", got)
	}
}
