// Package standins holds the one rule for tests that need a local stand-in
// for an AWS service (DynamoDB Local, fauxqs): skip when its endpoint
// variable is unset, but fail when make test asked for the stand-ins
// (GALLEY_REQUIRE_STANDINS=1), so that CI never passes by running nothing.
package standins

import (
	"os"
	"strings"
	"testing"
)

// Require skips or fails t unless every variable in vars is set.
func Require(t testing.TB, vars ...string) {
	t.Helper()
	var missing []string
	for _, v := range vars {
		if os.Getenv(v) == "" {
			missing = append(missing, v)
		}
	}
	if len(missing) == 0 {
		return
	}
	unset := strings.Join(missing, " and ") + " unset"
	if os.Getenv("GALLEY_REQUIRE_STANDINS") == "1" {
		t.Fatal("GALLEY_REQUIRE_STANDINS=1 but " + unset + ": run scripts/standins.sh start")
	}
	t.Skip(unset + ": no stand-in (scripts/standins.sh start)")
}

// Endpoint variables of the stand-ins.
const (
	DynamoDB = "AWS_ENDPOINT_URL_DYNAMODB"
	SQS      = "AWS_ENDPOINT_URL_SQS"
)
