package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// window is an hour in which two workers long-poll the worker API and a
// coordinator awaits, as Usage reports it.
func window() awslocal.Usage {
	return awslocal.Usage{
		Requests: map[string]int{"dynamodb:Query": 300, "sqs:ReceiveMessage": 200},
		ByRole: map[string]awslocal.RoleUsage{
			"WorkerApiRole83E31E18": {Requests: map[string]int{"dynamodb:Query": 200}, Read: 100},
			"MailboxRole759CFEC6":   {Requests: map[string]int{"dynamodb:Query": 100, "sqs:ReceiveMessage": 200}, Read: 50, EmptyReceives: 150},
		},
		Routes: map[string]int{"POST /worker/v1/{proxy+}": 200, "POST /v1/deliveries/await": 100},
		Functions: map[lambdaapp.Function]awslocal.FunctionUsage{
			lambdaapp.WorkerAPI: {MemoryMB: 256, Invocations: 200, GBSeconds: 1800, MaxInFlight: 2},
			lambdaapp.Mailbox:   {MemoryMB: 256, Invocations: 100, GBSeconds: 900, MaxInFlight: 1},
		},
	}
}

// The idle window splits into the coordinator's share (the mailbox
// function, its role, the deliveries routes) and the workers', and each
// is priced at prices.go's table.
func TestSplitAndPrice(t *testing.T) {
	w, c := split(window(), false), split(window(), true)
	if w.routes["POST /worker/v1/{proxy+}"] != 200 || len(w.routes) != 1 || w.invocations["workerapi"] != 200 ||
		w.requests["dynamodb:Query"] != 200 || w.rru != 100 || w.empty != 0 {
		t.Errorf("workers' share %+v", w)
	}
	if c.routes["POST /v1/deliveries/await"] != 100 || c.invocations["mailbox"] != 100 || c.requests["sqs:ReceiveMessage"] != 200 ||
		c.empty != 150 || c.rru != 50 {
		t.Errorf("coordinator's share %+v", c)
	}
	perWorkerHour := w.scale(0.5) // two workers, one hour
	_, got := perWorkerHour.price()
	want := 100*priceAPIGatewayPerMillion/1e6 + 100*priceLambdaPerMillion/1e6 + 900*priceLambdaGBSecondArm + 50*priceDynamoRRUPerMillion/1e6
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("per worker-hour $%v, want $%v", got, want)
	}
	_, got = c.price()
	want = 100*priceAPIGatewayPerMillion/1e6 + 100*priceLambdaPerMillion/1e6 + 900*priceLambdaGBSecondArm +
		50*priceDynamoRRUPerMillion/1e6 + 200*priceSQSPerMillion/1e6
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("per coordinator-hour $%v, want $%v", got, want)
	}
}

// The report names how it was measured and gives the house tables.
func TestReport(t *testing.T) {
	var b bytes.Buffer
	report(&b, &result{cfg: config{workers: 2, launches: 2, idle: time.Hour, template: "t.json"}, command: "go run ./scripts/cost",
		started: time.Now(), window: window(), windowLen: time.Hour, launch: window(), release: window(), vcpu: 1, memGB: 4, storageGB: 30})
	out := b.String()
	for _, s := range []string{"`go run ./scripts/cost`", "per worker-hour (measured)", "per coordinator-hour (measured)",
		"launch and question", "release", "1,000 workers", "control plane ÷ Fargate", pricesChecked,
		// 10 workers' Fargate: vCPU, memory and the 10 GB of storage above the free 20.
		"| Fargate (1 vCPU, 4 GB, 30 GB of storage, Arm) | assumed price × template size | 0.4773 |",
		// The parked worker-hour, against this run's working control plane.
		"A parked worker-hour against a working one (computed)", "measured above", "**parked ÷ working**"} {
		if !strings.Contains(out, s) {
			t.Errorf("the report lacks %q:\n%s", s, out)
		}
	}
}
