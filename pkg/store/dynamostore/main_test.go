package dynamostore_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// client returns a client of DynamoDB Local (or whatever
// AWS_ENDPOINT_URL_DYNAMODB names). It skips the test when the variable is
// unset, and fails it instead when GALLEY_REQUIRE_STANDINS=1 (make test), so
// that CI never passes by running nothing.
func client(t testing.TB) *dynamodb.Client {
	t.Helper()
	standins.Require(t, standins.DynamoDB)
	c, err := dynamostore.NewClientFromEnv(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newTable creates a fresh table for one test and deletes it afterwards.
func newTable(t testing.TB, c dynamostore.DynamoAPI, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "galley-test-" + hex.EncodeToString(b[:])
	s := dynamostore.New(c, name, opts...)
	if err := s.EnsureTable(t.Context()); err != nil {
		t.Fatalf("EnsureTable: %v", err)
	}
	real := client(t)
	t.Cleanup(func() {
		real.DeleteTable(t.Context(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return s
}
