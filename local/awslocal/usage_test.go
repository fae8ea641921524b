package awslocal_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
)

// The stack counts what AWS would bill while a worker is launched, runs
// and ends: kitchn's requests by route, each function's invocations and
// GB-seconds (billed milliseconds × the template's memory), nothing left
// in flight once all answered, the AWS requests by operation and caller,
// the DynamoDB capacity of the house table, the ECS task and its time,
// and the reconciler's asynchronous invocations from its task state
// changes.
func TestUsageAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := startStack(t)
	before := s.Usage()
	k := newKitchn(t, s, token, "run-usage")
	brief, _ := json.Marshal(strings.Join([]string{"#!standin", `tool finish {"outcome":"succeeded","body":"done"}`}, "\n"))
	st, _ := k.effect("k-launch-usage", fmt.Sprintf(`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":%s,"branch":"usage/one","agent":{"agent":"claude"}}`, brief))
	if st != "applied" {
		t.Fatalf("launch: %s", st)
	}
	k.next("worker-done", func(r protocol.MailMessage) bool { return r.Kind == protocol.MsgWorkerDone })
	// The reconciler's invocations for the task's state changes are
	// asynchronous: wait for the task to stop and them to end.
	var d awslocal.Usage
	for deadline := time.Now().Add(60 * time.Second); ; {
		d = s.Usage().Sub(before)
		rec := d.Functions[lambdaapp.Reconciler]
		if d.Tasks.Running == 0 && rec.Invocations > 0 && rec.InFlight == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not stop, or the reconciler was never invoked: %+v", d)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if d.Routes[contract.RouteEffects.Pattern()] != 1 || d.Routes[contract.RouteAwait.Pattern()] < 1 {
		t.Errorf("routes %v: want the launch and at least one await", d.Routes)
	}
	for _, fn := range []lambdaapp.Function{lambdaapp.Effects, lambdaapp.Mailbox, lambdaapp.WorkerAPI, lambdaapp.Reconciler} {
		f := d.Functions[fn]
		want := float64(f.BilledMillis) / 1000 * float64(f.MemoryMB) / 1024
		if f.Invocations < 1 || f.BilledMillis < int64(f.Invocations) || f.MemoryMB < 128 || f.GBSeconds != want || f.InFlight != 0 {
			t.Errorf("%s: %+v", fn, f)
		}
	}
	for _, op := range []string{"ecs:RunTask", "dynamodb:TransactWriteItems", "sqs:SendMessage", "secretsmanager:GetSecretValue"} {
		if d.Requests[op] < 1 {
			t.Errorf("no %s among %v", op, d.Requests)
		}
	}
	var read, write float64
	for _, c := range d.Capacity {
		read, write = read+c.Read, write+c.Write
	}
	if read <= 0 || write <= 0 {
		t.Errorf("capacity %v: want reads and writes", d.Capacity)
	}
	roles, sum := 0, 0
	for _, ru := range d.ByRole {
		roles++
		for _, n := range ru.Requests {
			sum += n
		}
	}
	total := 0
	for _, n := range d.Requests {
		total += n
	}
	if roles < 3 || sum != total {
		t.Errorf("by role: %d roles, %d requests of %d", roles, sum, total)
	}
	if d.Tasks.Started != 1 || d.Tasks.TaskSeconds <= 0 {
		t.Errorf("tasks %+v", d.Tasks)
	}

	t.Logf("usage: %+v", d)
	// Nothing in flight now; the peak since the reset is what is in flight.
	s.ResetPeaks()
	for fn, f := range s.Usage().Functions {
		if f.MaxInFlight != f.InFlight {
			t.Errorf("%s after ResetPeaks: %+v", fn, f)
		}
	}
}
