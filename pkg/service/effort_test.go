package service_test

import (
	"fmt"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// An effort the family's CLI cannot honour (for the launch's model) is
// refused at launch, not-applied rejected, never passed to a worker.
func TestLaunchRefusesEffortTheCLICannotHonour(t *testing.T) {
	e := newEnv(t, func(c *service.Config, _ *[]service.Option) { c.Effort = "always" })
	agent := func(a string) string {
		return `{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"x","agent":` + a + `}`
	}
	for i, a := range []string{
		`{"agent":"codex","effort":"minimal"}`,
		`{"agent":"codex","model":"gpt-5.5","effort":"max"}`,
		`{"agent":"claude","effort":"turbo"}`,
	} {
		e.refused(t, call("run-1", fmt.Sprintf("k-%d", i), agent(a)), galleyerr.Invalid)
	}
	if len(e.rt.Starts) != 0 {
		t.Fatal("a refused launch started a worker")
	}
	e.launch(t, "run-1", "k-ok", "ok")
	if _, err := e.svc.Apply(t.Context(), call("run-1", "k-max", agent(`{"agent":"codex","effort":"max"}`)), e.clock.Now()); err != nil {
		t.Fatalf("codex max on its default model: %v", err)
	}
}
