package main

import (
	"fmt"
	"io"
	"math"
)

// A parked worker (docs/parking.md) has no task: what it costs while it
// waits is what galley keeps for it (its worktree snapshot and session
// archive in S3, its record in DynamoDB, its doorbell queue) and the
// reconciler's look at it every housekeeping tick; what it costs to wake
// is a new task's start and restore. None of it can be counted here yet
// (aws-local has no AWS shape of parking on this branch), so it is
// computed from prices.go's table, the last measured control-plane
// figures below and the assumptions in parkAssumptions, each written down
// in docs/cost.md ("A parked worker-hour").

// The control plane of a working worker and of a launch, as last measured
// by this script and adjusted for DPoP (docs/cost.md, "Since DPoP"): a
// resume is taken to cost what a launch's control plane does (a task's
// credential, wake grant, secrets, self and ready report; the parking
// report and the resume's record writes stand in for the launch effect's).
const (
	measuredIdleWorkerHour  = 0.00143   // $ of control plane per idle worker-hour
	measuredLaunchQuestion  = 0.0000886 // $ per launch and question
	housekeepingTicksAnHour = 12.0      // infra/stack.HousekeepingRate: rate(5 minutes)
	reconcilerMemoryGB      = 0.25      // every function has 256 MB
	snapshotPartBytes       = 8 << 20   // snapshot.S3Store's default part: a larger archive is a multipart upload
	dynamoReadUnitKB        = 4.0       // a strongly consistent read unit reads 4 KB
)

// parkAssumptions are what a parked worker's cost depends on that nothing
// here counts.
type parkAssumptions struct {
	worktreeGB, sessionGB float64 // the two archives kept while parked, compressed
	recordKB              float64 // the worker's record in DynamoDB, its harness state included
	// archiveSecondsPerGB is how long saving (at parking) or restoring (at
	// resume) an archive takes per GB of it, both billed task time; one
	// second more each for the calls around it.
	archiveSecondsPerGB float64
	// startSeconds is a resumed task's billed time before its harness
	// runs: Fargate bills from the start of the image pull (ENI attach,
	// pull, unpack, container start).
	startSeconds float64
	// reconcilerMsPerTick is the reconciler's added duration per parked
	// worker per housekeeping tick (two record reads in its listings, one
	// inbox read).
	reconcilerMsPerTick float64
}

// defaultPark: a worktree snapshot of 1 GB (uncommitted and untracked
// files and the caches a house keeps, compressed: large for a source tree,
// small for one with node_modules), a session archive of 10 MB (Claude
// Code's and Codex's transcripts; the harness's budget is 256 MiB), a
// record of 4 KB (its bound is the harness state's 16 KiB and the rest),
// 30 s per GB of archive each way (zstd and S3 at about 35 MB/s; measured
// locally: 6.3 MB of small files saved in 0.14 s, restored in 0.7 s,
// docs/BENCHMARKS.md), and 90 s from RunTask to the harness for the 1.35
// GB image (published: 53 to 62 s for a 413 MB one, docs/BENCHMARKS.md).
var defaultPark = parkAssumptions{worktreeGB: 1, sessionGB: 0.01, recordKB: 4, archiveSecondsPerGB: 30,
	startSeconds: 90, reconcilerMsPerTick: 10}

// workerTask is a worker task's size and its working control plane.
type workerTask struct {
	vcpu, memGB, storageGB float64
	controlPerHour         float64 // an idle worker's control plane, $ per worker-hour
	launchControl          float64 // a launch's control plane, $ per launch
}

// defaultTask is the stack's default worker task (1 vCPU, 4 GB, arm64, 30
// GB of storage) with the last measured control plane.
var defaultTask = workerTask{vcpu: 1, memGB: 4, storageGB: 30, controlPerHour: measuredIdleWorkerHour,
	launchControl: measuredLaunchQuestion}

// fargatePerHour is the task's Fargate price an hour: vCPU, memory and
// the storage above the free 20 GB.
func (t workerTask) fargatePerHour() float64 {
	return t.vcpu*priceFargateVCPUHourArm + t.memGB*priceFargateGBHourArm +
		max(t.storageGB-fargateFreeStorageGB, 0)*priceFargateStorageGBHour
}

// workingPerHour is a working (or waiting, not parked) worker-hour.
func (t workerTask) workingPerHour() float64 { return t.fargatePerHour() + t.controlPerHour }

// putRequests is the PUT-class requests of one archive of gb: one
// PutObject up to a part, else a multipart upload (create, the parts,
// complete).
func putRequests(gb float64) float64 {
	parts := math.Ceil(gb * (1 << 30) / snapshotPartBytes)
	if parts <= 1 {
		return 1
	}
	return parts + 2
}

// parkCost is the computed cost of parking one worker.
type parkCost struct {
	hourLines  []line // per parked worker-hour
	cycleLines []line // once per park and resume
	hour       float64
	cycle      float64
	working    float64 // a working worker-hour of the same task
}

func sumLines(ls []line) float64 {
	t := 0.0
	for _, l := range ls {
		t += l.dollar
	}
	return t
}

// parked computes a parked worker's cost for task t under assumptions a.
func parked(t workerTask, a parkAssumptions) parkCost {
	gb := a.worktreeGB + a.sessionGB
	recordGB := a.recordKB / (1 << 20)
	recordRRU := math.Ceil(a.recordKB / dynamoReadUnitKB)
	// Each tick lists the resources twice (settleLost, the gauges: a
	// query's units are its items' bytes, so the record adds its size) and
	// reads the inbox after the parking's cursor (a query of at most one
	// item: one unit); the hourly doorbell sweep reads the record once
	// (is its owner live?).
	rru := housekeepingTicksAnHour*(2*a.recordKB/dynamoReadUnitKB+1) + recordRRU
	gbs := housekeepingTicksAnHour * a.reconcilerMsPerTick / 1000 * reconcilerMemoryGB
	// The queue stays (its owner lives, so the sweep keeps it) and costs
	// nothing unread: the hourly sweep's ListQueueTags, its touch once a
	// day (TagQueue, when the last listen is a day old) and its share of a
	// ListQueues page of 1,000 queues.
	sqs := 1 + 1.0/24 + 1.0/1000
	hour := []line{
		{"S3 Standard: worktree snapshot and session archive", gb, "GB", gb * priceS3StandardGBMonth / hoursPerMonth},
		{"DynamoDB: the record's storage and PITR", a.recordKB, "KB", recordGB * (priceDynamoStorageGBMonth + priceDynamoPITRGBMonth) / hoursPerMonth},
		{"Reconciler: record and inbox reads", rru, "RRU", rru * priceDynamoRRUPerMillion / 1e6},
		{"Reconciler: added duration", gbs, "GB-s", gbs * priceLambdaGBSecondArm},
		{"SQS: the doorbell queue's sweep", sqs, "requests", sqs * priceSQSPerMillion / 1e6},
	}
	saveS := 2 + a.archiveSecondsPerGB*gb // two archives, a second each around the calls
	restoreS := saveS
	puts := putRequests(a.worktreeGB) + putRequests(a.sessionGB)
	perSecond := t.fargatePerHour() / 3600
	cycle := []line{
		{"Fargate: the parking task saving both archives", saveS, "s", saveS * perSecond},
		{"Fargate: the resumed task's start (ENI, pull, unpack)", a.startSeconds, "s", a.startSeconds * perSecond},
		{"Fargate: the resumed task restoring both archives", restoreS, "s", restoreS * perSecond},
		{"S3: PUT-class requests (multipart parts of 8 MiB)", puts, "requests", puts * priceS3PutPer1000 / 1000},
		{"S3: GETs", 2, "requests", 2 * priceS3GetPer1000 / 1000},
		{"Control plane of the resume (as a launch's, measured)", 1, "resume", t.launchControl},
	}
	return parkCost{hourLines: hour, cycleLines: cycle, hour: sumLines(hour), cycle: sumLines(cycle), working: t.workingPerHour()}
}

// ratio is a parked worker-hour against a working one.
func (c parkCost) ratio() float64 { return c.hour / c.working }

// breakEven is the wait after the parking from which a park and resume
// costs less than keeping the task: the task-hours it saves pay for the
// cycle.
func (c parkCost) breakEven() float64 { return c.cycle / (c.working - c.hour) }

// parkReport writes the parked worker-hour section for task t.
func parkReport(w io.Writer, t workerTask, a parkAssumptions, source string) {
	c := parked(t, a)
	fmt.Fprintf(w, "\n#### A parked worker-hour against a working one (computed)\n\n")
	fmt.Fprintf(w, "Task: %.0f vCPU, %.0f GB, %.0f GB of storage, Arm; working control plane %s. "+
		"Assumed: worktree snapshot %s GB, session archive %s GB, record %s KB, %s s per GB of archive each way, "+
		"%s s from RunTask to the harness. Prices of %s (scripts/cost/prices.go).\n",
		t.vcpu, t.memGB, t.storageGB, source, num(a.worktreeGB), num(a.sessionGB), num(a.recordKB),
		num(a.archiveSecondsPerGB), num(a.startSeconds), pricesChecked)
	fmt.Fprintf(w, "\n| parked, per worker-hour | count | $ / worker-hour |\n| --- | ---: | ---: |\n")
	for _, l := range c.hourLines {
		fmt.Fprintf(w, "| %s | %s %s | %s |\n", l.what, num(l.count), l.unit, usdFine(l.dollar))
	}
	fmt.Fprintf(w, "| **total** | | **%s** |\n", usd(c.hour))
	fmt.Fprintf(w, "\n| once per park and resume | count | $ |\n| --- | ---: | ---: |\n")
	for _, l := range c.cycleLines {
		fmt.Fprintf(w, "| %s | %s %s | %s |\n", l.what, num(l.count), l.unit, usdFine(l.dollar))
	}
	fmt.Fprintf(w, "| **total** | | **%s** |\n", usd(c.cycle))
	fmt.Fprintf(w, "\n| | $ / worker-hour |\n| --- | ---: |\n")
	fmt.Fprintf(w, "| working (Fargate %s + control plane %s) | %s |\n", usd(t.fargatePerHour()), usd(t.controlPerHour), usd(c.working))
	fmt.Fprintf(w, "| parked | %s |\n", usd(c.hour))
	fmt.Fprintf(w, "| **parked ÷ working** | **%.2f %%** |\n", 100*c.ratio())
	fmt.Fprintf(w, "| **break-even wait** (a park and resume pays for itself after) | **%.1f min** |\n", 60*c.breakEven())

	fmt.Fprintf(w, "\nThe same with other snapshots and starts (the rest as above):\n\n")
	fmt.Fprintf(w, "| worktree snapshot | start | parked $ / h | parked ÷ working | park and resume $ | break-even wait |\n")
	fmt.Fprintf(w, "| ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, gb := range []float64{0.01, 1, 10} {
		for _, start := range []float64{30, 90, 180} {
			b := a
			b.worktreeGB, b.startSeconds = gb, start
			v := parked(t, b)
			fmt.Fprintf(w, "| %s GB | %.0f s | %s | %.2f %% | %s | %.1f min |\n", num(gb), start, usd(v.hour), 100*v.ratio(),
				usd(v.cycle), 60*v.breakEven())
		}
	}
}

// usdFine is usd that still shows a figure under a ten-thousandth of a
// cent, which usd rounds to nothing.
func usdFine(x float64) string {
	if x > 0 && x < 1e-7 {
		return fmt.Sprintf("%.1e", x)
	}
	return usd(x)
}
