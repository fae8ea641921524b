package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/conformance"
)

// TestConformanceAgainstServe runs the project's conformance suite, every
// check, through real HTTP against a real `galley serve` with scripted
// workers as real processes.
func TestConformanceAgainstServe(t *testing.T) {
	s := startServer(t, t.TempDir())
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
