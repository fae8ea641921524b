package awslocal_test

import (
	"testing"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/operator"
)

// TestConsoleLongPollAWSLocal runs the console scenario (shapetest.Console:
// the operator console in headless Chromium driven by playwright-core) as
// the stack serves it, where the console's session says to long poll (the
// stack cannot stream through Lambda): the worker's events appear live
// without a stream request.
func TestConsoleLongPollAWSLocal(t *testing.T) {
	t.Parallel()
	shapetest.Console(t, shapetest.Consoled{
		Name: "aws-local",
		Live: operator.LivePoll,
		Start: func(t *testing.T) shapetest.Kitchn {
			s, token := startStack(t)
			return newStackHouse(t, s, token, "run-console")
		},
	})
}
