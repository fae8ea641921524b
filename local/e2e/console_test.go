package e2e

import (
	"testing"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/operator"
)

// TestConsoleBrowser runs the console scenario (shapetest.Console: the
// operator console in headless Chromium driven by playwright-core) against
// the server `make run` runs, where the console follows a worker by
// stream. It also times the list render of 1,000 workers
// (docs/BENCHMARKS.md).
func TestConsoleBrowser(t *testing.T) {
	shapetest.Console(t, shapetest.Consoled{
		Name: "local",
		Live: operator.LiveStream,
		Start: func(t *testing.T) shapetest.Kitchn {
			return newLocalHouse(startServer(t, t.TempDir()), "run-console")
		},
	})
}
