package main

import (
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/operator"
)

// The worker list says which workers are parked (docs/parking.md), and
// since how long, beside the state kitchn observes.
func TestPrintWorkersSaysParked(t *testing.T) {
	since := time.Now().Add(-90 * time.Second)
	var out strings.Builder
	printWorkers(&out, []operator.WorkerView{
		{Handle: "w-parked", State: "awaiting-reply", Parked: true, ParkedSince: &since},
		{Handle: "w-ready", State: "ready"},
	})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %d lines, want a header and two workers:\n%s", len(lines), out.String())
	}
	if !strings.Contains(lines[1], "awaiting-reply, parked 1m3") {
		t.Errorf("the parked worker's line %q does not say parked and since when", lines[1])
	}
	if strings.Contains(lines[2], "parked") {
		t.Errorf("the ready worker's line %q says parked", lines[2])
	}
}
