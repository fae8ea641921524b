package e2e

import (
	"testing"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/operator"
)

// TestOperator runs the operator scenario (shapetest.Operator) against
// galley serve: the operator token and kitchn's open only their own
// routes; a console session ends at its logout; a scripted worker's events
// are numbered without a gap and reach a follower as they happen; a
// SIGKILL of the server loses no acknowledged event, repeats none and
// keeps the sessions; a reconnecting stream resumes after its
// Last-Event-ID; galley workers, cancel and revoke act through the
// service, and kitchn's observe agrees; a second worker's events reach a
// long-poll follower from its launch until the runtime saw its harness
// end.
func TestOperator(t *testing.T) {
	shapetest.Operator(t, shapetest.Operated{
		Live:    operator.LiveStream,
		Compute: shapetest.Compute{Stopped: "stopped"},
		Start: func(t *testing.T) shapetest.OperatorHouse {
			return newLocalHouse(startServer(t, t.TempDir()), "run-op")
		},
	})
}
