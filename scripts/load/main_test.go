package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/scripts/load/drive"
)

func TestFlagsRefuseBeforeCalling(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "http://192.0.2.1:8080", "--token-file", tok}, "refusing an endpoint off this machine"},
		{[]string{"--endpoint", "https://127.0.0.1:8080", "--token-file", tok}, "refusing an endpoint off this machine"},
		{[]string{"--token-file", filepath.Join(t.TempDir(), "none")}, "token file"},
		{[]string{"--token-file", tok, "--duration", "2h"}, "--duration"},
		{[]string{"--token-file", tok, "--mode", "chaos", "--endpoint", "http://127.0.0.1:1"}, "--mode"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, errb.String(), tc.want)
		}
		if strings.Contains(out.String()+errb.String(), "secret-token") {
			t.Errorf("%v: the token was printed", tc.args)
		}
	}
}

// TestTakeoverShort runs a short takeover: the server killed with SIGKILL
// twice under load and restarted on the same data, then every key looked
// up. It fails on any key still unknown two leases after the last fault,
// any applied effect not visible at its worker, any worker left starting
// without its compute, or any broken invariant.
func TestTakeoverShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts galley serve and its workers")
	}
	bin := buildBinaries(t, "cmd/galley", "cmd/galley-worker")
	addr := freeAddr(t)
	// A busy machine (another build beside this one) starts workers
	// slowly: the main phase goes on until it applied a launch, a reply
	// and a message, within a bound, rather than fail on load alone.
	run := takeoverRun(t, "--galley", filepath.Join(bin, "galley"), "--listen", addr, "--duration", "5s", "--until-applied", "150s")
	if !enoughApplied(run.applied) {
		t.Fatalf("too little applied to prove anything in 150 s: %v", run.applied)
	}
}

// harshPlan is the AWS fault plan of TestTakeoverHarshShort, as
// docs/BENCHMARKS-load.md's hand runs had it: DynamoDB writes applied and
// then answered 500 or a reset connection (the SDK sends them again),
// transaction conflicts, throttling and lost answers; SQS queues deleted
// under their senders (their creation then refused QueueDeletedRecently
// for a minute) and short polls that miss three times in four (none is
// counted: galley's listeners long-poll, even to clean up). The rates are
// higher than the hand runs', so that the last faulty incarnation, whose
// counts alone are reported, counts resends and deleted queues in a few
// seconds.
const harshPlan = "server-error=0.05,reset=0.05,tx-conflict=0.01,throttle=0.01,lost-response=0.01,queue-deleted=0.3,short-poll-miss=0.75"

// TestTakeoverHarshShort is TestTakeoverShort on the harsher AWS
// stand-ins: galley-dev serve on DynamoDB Local and fauxqs (a table and
// queue prefix of its own), its clients under harshPlan, killed twice in
// the first part of the main phase and then stopped and started without
// faults. The same checks hold, and the last faulty incarnation must have
// counted resends of applied writes and a queue deleted under its sender,
// so that the run cannot pass without the faults it names.
func TestTakeoverHarshShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts galley-dev serve and its workers")
	}
	standins.Require(t, standins.DynamoDB, standins.SQS)
	bin := buildBinaries(t, "local/cmd/galley-dev", "cmd/galley-worker")
	addr := freeAddr(t)
	var run takeoverResult
	// The main phase goes on until it applied a launch, a reply and a
	// message (a busy machine starts workers slowly); a second run is
	// tried when the last faulty incarnation counted too few faults.
	for i, d := range []time.Duration{15 * time.Second, 45 * time.Second} {
		name := "takeover-" + randomHex(t) // DynamoDB and SQS names of this run alone
		dropAWSNames(t, name)
		plan := fmt.Sprintf("%s,seed=%d", harshPlan, time.Now().UnixNano()%1e9)
		t.Logf("run %d: table and queue prefix %s, --inject-aws-faults %s", i+1, name, plan)
		run = takeoverRun(t, "--galley", filepath.Join(bin, "galley-dev"), "--listen", addr,
			"--duration", d.String(), "--until-applied", "180s", "--kill-window", (d * 2 / 5).String(),
			"--serve-args", "--house local --default-agent script --store dynamodb --doorbell sqs --table "+name+
				" --queue-prefix "+name+" --inject-aws-faults "+plan)
		c := run.faults
		if c == nil {
			t.Fatal("the faulty server logged no fault counts at its stop")
		}
		resends := drive.ResendsAfterAppliedWrites(*c)
		if enoughApplied(run.applied) && resends > 0 && c.SQS.Deleted > 0 {
			t.Logf("counted in the last faulty incarnation: %d resends after applied writes, %d queues deleted under a sender, %d creations refused as deleted recently, %d short polls missed",
				resends, c.SQS.Deleted, c.SQS.DeletedRecently, c.SQS.Misses)
			return
		}
		t.Logf("a main phase of at least %s proved too little (applied %v; resends after applied writes %d, queues deleted %d); trying a longer one",
			d, run.applied, resends, c.SQS.Deleted)
	}
	t.Fatalf("too little applied or injected to prove anything: applied %v, faults %+v", run.applied, run.faults)
}

func enoughApplied(applied map[string]int) bool {
	return applied["launch"] > 0 && applied["reply"] > 0 && applied["message"] > 0
}

// buildBinaries builds the module's packages into a folder of the test's.
func buildBinaries(t *testing.T, pkgs ...string) string {
	t.Helper()
	bin := t.TempDir()
	for _, pkg := range pkgs {
		cmd := exec.Command("go", "build", "-o", bin+"/", "github.com/galley-run/galley/"+pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	return bin
}

// freeAddr is a loopback address free a moment ago: the takeover restarts
// its server there after each kill.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// dropAWSNames deletes, when the test ends, the table name and the queues
// named name-... that the run made in the stand-ins.
func dropAWSNames(t *testing.T, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		if c, err := dynamostore.NewClientFromEnv(ctx); err == nil {
			_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		}
		if c, err := sqsbell.NewClientFromEnv(ctx); err == nil {
			if out, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(name + "-")}); err == nil {
				for _, u := range out.QueueUrls {
					_, _ = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
				}
			}
		}
	})
}

// takeoverResult is what a takeover run showed: how many of each effect
// ended applied, and the fault counts of its last faulty incarnation.
type takeoverResult struct {
	applied map[string]int
	faults  *awsfault.PlanCounts
}

// takeoverRun runs one takeover (2 kills, 2 coordinators, a generous
// wait for each worker's question, as a machine busy with another build
// starts workers slowly; args add or override flags) through the command,
// with a data directory of its own,
// and fails the test on what the run fails on (the command's exit: any
// key still unknown, any applied effect not visible at its worker, any
// worker left starting without its compute, any broken invariant), on a
// report that does not say so, or on a key file that shows otherwise.
func takeoverRun(t *testing.T, args ...string) takeoverResult {
	t.Helper()
	dir := t.TempDir()
	keys, result := filepath.Join(dir, "keys.json"), filepath.Join(dir, "result.json")
	var out, errb bytes.Buffer
	code := run(append([]string{"--mode", "takeover", "--data", filepath.Join(dir, "data"), "--kills", "2", "--houses", "2",
		"--question-wait", "30s", "--keys", keys, "--json", result}, args...), &out, &errb)
	t.Logf("%s%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("takeover run exited %d", code)
	}
	if !strings.Contains(out.String(), "without a live compute: 0") || !strings.Contains(out.String(), "invariants: ") {
		t.Errorf("the report does not say that no worker was left starting without its compute, or what the invariants showed")
	}
	var ends []drive.KeyEnd
	b, err := os.ReadFile(keys)
	if err != nil || json.Unmarshal(b, &ends) != nil {
		t.Fatalf("keys file: %v", err)
	}
	res := takeoverResult{applied: map[string]int{}}
	for _, e := range ends {
		if e.Status == "unknown" {
			t.Errorf("a key ended unknown: %+v", e)
		}
		if e.Status == "applied" {
			res.applied[e.Effect]++
			if e.Visible == "" {
				t.Errorf("an applied %s with nothing seen at its worker", e.Effect)
			}
		}
	}
	var whole drive.Takeover
	b, err = os.ReadFile(result)
	if err != nil || json.Unmarshal(b, &whole) != nil {
		t.Fatalf("result file: %v", err)
	}
	if !whole.Report.OK() || len(whole.Failures) > 0 || whole.StartingWithoutTask > 0 {
		t.Errorf("the run's result is not clean: %d failures, %d workers starting without a compute, invariants %s",
			len(whole.Failures), whole.StartingWithoutTask, whole.Report)
	}
	res.faults = whole.FaultCounts
	return res
}
