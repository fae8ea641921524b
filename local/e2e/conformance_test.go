package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/conformance"
	awsstandins "github.com/galley-run/galley/pkg/standins"
)

// TestConformanceAgainstServe runs the project's conformance suite, every
// check, through real HTTP against a real `galley serve` with scripted
// workers as real processes.
func TestConformanceAgainstServe(t *testing.T) {
	s := startServer(t, t.TempDir())
	passConformance(t, s)
}

// TestConformanceAgainstServeOnDynamoDBAndSQS runs the same suite with the
// store in DynamoDB Local and the doorbell on fauxqs.
func TestConformanceAgainstServeOnDynamoDBAndSQS(t *testing.T) {
	requireStandins(t)
	s := startServer(t, t.TempDir(), "--store", "dynamodb", "--doorbell", "sqs",
		"--table", "galley-e2e-"+randomSuffix(), "--queue-prefix", "galley-e2e-"+randomSuffix())
	passConformance(t, s)
}

// passConformance runs every check of the conformance suite against s and
// fails the test for each that does not pass.
func passConformance(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep := conformance.Run(ctx, conformance.Config{
		Endpoint: s.Endpoint, Token: s.Token, House: "origin89", Backend: "galley", Credential: "galley-token",
		Wait: 60 * time.Second,
	})
	if rep.Err != nil {
		t.Fatal(rep.Err)
	}
	for _, r := range rep.Results {
		t.Log(r.String())
		if r.Status != conformance.Pass {
			t.Errorf("check %s: %s %s", r.Name, r.Status, r.Reason)
		}
	}
	if len(rep.Results) < 19 {
		t.Fatalf("only %d checks ran", len(rep.Results))
	}
}

// requireStandins skips a test that needs DynamoDB Local and fauxqs when
// their endpoints are not set, and fails it when make test asked for them.
func requireStandins(t *testing.T) {
	t.Helper()
	awsstandins.Require(t, awsstandins.DynamoDB, awsstandins.SQS)
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
