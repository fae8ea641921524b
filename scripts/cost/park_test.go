package main

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

// A snapshot of at most one part is one PutObject; a larger one a
// multipart upload: its create, a PUT per 8 MiB part, its complete.
func TestPutRequests(t *testing.T) {
	for _, tc := range []struct{ gb, want float64 }{
		{0.001, 1},
		{8.0 / 1024, 1},     // exactly one part
		{8.5 / 1024, 2 + 2}, // two parts
		{1, 128 + 2},
		{10, 1280 + 2},
	} {
		if got := putRequests(tc.gb); got != tc.want {
			t.Errorf("putRequests(%v GB) = %v, want %v", tc.gb, got, tc.want)
		}
	}
}

// The parked worker-hour and a park and resume, priced line by line at
// prices.go's table for a 2 GB snapshot, a 100 MB session archive and a
// 20 KB record; the working worker-hour is the default task's.
func TestParkedWorkerCost(t *testing.T) {
	a := parkAssumptions{worktreeGB: 2, sessionGB: 0.1, recordKB: 20, archiveSecondsPerGB: 10, startSeconds: 60,
		reconcilerMsPerTick: 50}
	c := parked(defaultTask, a)

	fargate := 1*priceFargateVCPUHourArm + 4*priceFargateGBHourArm + 10*priceFargateStorageGBHour
	if !near(c.working, fargate+measuredIdleWorkerHour) {
		t.Errorf("working worker-hour $%v, want $%v", c.working, fargate+measuredIdleWorkerHour)
	}
	// Per hour: 2.1 GB in S3; 20 KB of record and its backup; 12 ticks of
	// two listings (5 RRU of record each) and an inbox read, plus the
	// sweep's record read (5 RRU); 12 × 50 ms at 0.25 GB; the sweep's SQS
	// calls.
	wantHour := 2.1*0.023/720 +
		20.0/(1<<20)*(0.25+0.20)/720 +
		(12*(5+5+1)+5)*0.125/1e6 +
		12*0.05*0.25*priceLambdaGBSecondArm +
		(1+1.0/24+1.0/1000)*0.40/1e6
	if !near(c.hour, wantHour) {
		t.Errorf("parked worker-hour $%v, want $%v", c.hour, wantHour)
	}
	// Once: 23 s saving (2 + 10 × 2.1), 60 s starting, 23 s restoring, at
	// the task's price a second; 256 + 2 and 13 + 2 PUTs; 2 GETs; a
	// launch's control plane.
	wantCycle := (23+60+23)*fargate/3600 + (258+15)*0.005/1000 + 2*0.0004/1000 + measuredLaunchQuestion
	if !near(c.cycle, wantCycle) {
		t.Errorf("park and resume $%v, want $%v", c.cycle, wantCycle)
	}
	if want := wantCycle / (c.working - wantHour); !near(c.breakEven(), want) {
		t.Errorf("break-even %v h, want %v h", c.breakEven(), want)
	}
}

// Issue 30's goal: a parked worker-hour costs at most 10 % of a working
// one, with the default assumptions and with a 10 GB snapshot; and the
// stack's default park after (10 minutes) is longer than the wait a park
// and resume needs to pay for itself.
func TestParkedWorkerHourWithinGoal(t *testing.T) {
	for _, gb := range []float64{defaultPark.worktreeGB, 10} {
		a := defaultPark
		a.worktreeGB = gb
		c := parked(defaultTask, a)
		if r := c.ratio(); r > 0.10 {
			t.Errorf("%v GB snapshot: a parked worker-hour is %.1f %% of a working one, over the goal of 10 %%", gb, 100*r)
		}
	}
	if be := parked(defaultTask, defaultPark).breakEven() * 60; be >= 10 {
		t.Errorf("a park and resume pays for itself only after %.1f min, past the default park after of 10 min", be)
	}
}

// docs/cost.md holds the tables `go run ./scripts/cost --park` prints.
func TestParkMatchesTheDocument(t *testing.T) {
	b, err := os.ReadFile("../../docs/cost.md")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run([]string{"--park"}, &out, &bytes.Buffer{}); code != 0 {
		t.Fatalf("cost --park exited %d", code)
	}
	rows := 0
	for _, l := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		rows++
		if !strings.Contains(string(b), l) {
			t.Errorf("docs/cost.md lacks the row %q", l)
		}
	}
	if rows < 20 {
		t.Errorf("cost --park printed %d table rows:\n%s", rows, out.String())
	}
}
