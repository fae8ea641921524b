package iamgate

import (
	"encoding/json"
	"hash/crc32"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// The functions trust the local CA through AWS_CA_BUNDLE, which
// config.LoadDefaultConfig honours; without it the same call fails.
func TestLocalCAThroughAWSCABundle(t *testing.T) {
	e := newEnv(t, DynamoDB, false, []string{allow(`"dynamodb:DescribeTable"`, `"`+tableT+`"`, `{"Bool":{"aws:SecureTransport":"true"}}`)})
	serverTLS, caPEM, err := NewLocalCA()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(e.gate)
	srv.TLS = serverTLS
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()
	// httptest's address is 127.0.0.1; the certificate names localhost too.
	for _, endpoint := range []string{srv.URL, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)} {
		bundle := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(bundle, caPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
		t.Setenv("AWS_REGION", region)
		t.Setenv("AWS_ACCESS_KEY_ID", e.p.AccessKeyID)
		t.Setenv("AWS_SECRET_ACCESS_KEY", e.p.SecretAccessKey)
		t.Setenv("AWS_SESSION_TOKEN", e.p.SessionToken)
		t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
		t.Setenv("AWS_MAX_ATTEMPTS", "1")

		t.Setenv("AWS_CA_BUNDLE", "")
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("T")}); err == nil ||
			!strings.Contains(err.Error(), "certificate") {
			t.Fatalf("without AWS_CA_BUNDLE: %v, want a certificate error", err)
		}

		t.Setenv("AWS_CA_BUNDLE", bundle)
		cfg, err = config.LoadDefaultConfig(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("T")}); err != nil {
			t.Fatalf("with AWS_CA_BUNDLE at %s: %v", endpoint, err)
		}
	}
	if d := e.gate.Decisions(); len(d) != 2 || !d[0].Allowed || !d[1].Allowed {
		t.Fatalf("decisions = %+v", d)
	}
}

// Proxy hands an allowed request to the stand-in with its body intact.
func TestProxyReplaysTheBody(t *testing.T) {
	var got map[string]any
	standin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got); err != nil || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.PutItem" {
			http.Error(w, "bad forward", 500)
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(`{}`))), 10))
		_, _ = w.Write([]byte(`{}`))
	}))
	defer standin.Close()
	up, err := Proxy(standin.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, DynamoDB, true, []string{allow(`"dynamodb:PutItem"`, `"`+tableT+`"`)})
	e.gate.upstream = up
	if _, err := e.dynamo(nil).PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("T"), Item: item()}); err != nil {
		t.Fatalf("PutItem through the proxy: %v", err)
	}
	if got["TableName"] != "T" || got["Item"] == nil {
		t.Fatalf("stand-in got %v", got)
	}
	if _, err := Proxy("not a url"); err == nil {
		t.Fatal("Proxy accepted a relative URL")
	}
}
