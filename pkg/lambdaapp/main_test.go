package lambdaapp_test

import (
	"os"
	"testing"

	"github.com/galley-run/galley/local/ecsstandin"
)

func TestMain(m *testing.M) {
	// The ECS stand-in runs this very binary as each task's init.
	ecsstandin.Entrypoint()
	os.Exit(m.Run())
}
