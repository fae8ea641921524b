package e2e

// Faults of DynamoDB and SQS under load: `galley-dev serve --store dynamodb
// --doorbell sqs` as a real process against DynamoDB Local and fauxqs, its
// clients injecting seeded faults (--inject-aws-faults: throttling, 500s
// and resets after the request was applied and transaction conflicts below
// the SDK; timeouts, responses lost after the call ran, calls run late,
// forced condition failures above it; SQS through awsfault.HarshSQS) under
// the load driver's mixed load. The whole
// history keeps every invariant, and nothing acknowledged is lost: every
// effect answered applied looks up applied with the same receipt, under
// faults and after a restart without them, and no acknowledged batch is
// delivered again. A second test cuts SQS (every ring and every receive
// fails) and finds every await answered within its bound.
// GALLEY_FAULT_LONG=1 runs the load longer.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	awsstandins "github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/scripts/load/drive"
)

// awsFaultPlan is the fault mix of the load test: each kind at 1 or 2 %
// of the calls to DynamoDB and SQS; a forced condition failure and a
// transaction conflict at 3 %, as they apply to conditional and plain
// writes only (a few hundred in a run).
const awsFaultPlan = "throttle=0.02,server-error=0.02,reset=0.01,tx-conflict=0.03,timeout=0.01,lost-response=0.02,delayed=0.01,condition-failed=0.03"

// awsStack is a fresh DynamoDB table and SQS queue prefix on the
// stand-ins, removed after the test.
type awsStack struct{ table, prefix string }

func newAWSStack(t *testing.T) awsStack {
	t.Helper()
	awsstandins.Require(t, awsstandins.DynamoDB, awsstandins.SQS)
	var b [4]byte
	_, _ = rand.Read(b[:])
	a := awsStack{table: "galley-e2e-" + hex.EncodeToString(b[:]), prefix: "galley-e2e-" + hex.EncodeToString(b[:])}
	t.Cleanup(func() {
		ctx := context.Background()
		if c, err := dynamostore.NewClientFromEnv(ctx); err == nil {
			_, _ = c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(a.table)})
		}
		if c, err := sqsbell.NewClientFromEnv(ctx); err == nil {
			if out, err := c.ListQueues(ctx, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(a.prefix + "-")}); err == nil {
				for _, u := range out.QueueUrls {
					_, _ = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
				}
			}
		}
	})
	return a
}

// flags are galley serve's flags for the stack, with plan's faults when
// plan is set (galley-dev serve's flag: serveBinary).
func (a awsStack) flags(plan string) []string {
	f := []string{"--store", "dynamodb", "--doorbell", "sqs", "--table", a.table, "--queue-prefix", a.prefix}
	if plan != "" {
		f = append(f, "--inject-aws-faults", plan)
	}
	return f
}

// stopCounts stops s (SIGTERM) and returns the fault counts it logged at
// shutdown.
func stopCounts(t *testing.T, s *server) awsfault.PlanCounts {
	t.Helper()
	s.stop(t)
	for line := range strings.SplitSeq(s.stderr.String(), "\n") {
		var l struct {
			Msg string `json:"msg"`
			awsfault.PlanCounts
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "AWS faults injected" {
			return l.PlanCounts
		}
	}
	t.Fatal("galley serve logged no fault counts at shutdown")
	return awsfault.PlanCounts{}
}

// mixedLoad is the fault runs' mixed load: two coordinators keeping four
// scripted workers live, one reader.
func mixedLoad(t *testing.T, srv *server, data, id string, seed uint64, d time.Duration, rec *history.Recorder) *drive.Mixed {
	t.Helper()
	res, err := drive.RunMixed(context.Background(), drive.MixedConfig{
		Target:   drive.Target{Endpoint: srv.Endpoint, Token: srv.Token, House: "origin89", Backend: "galley", Credential: "galley-token"},
		Duration: d,
		// As the other fault loads': beside another make test an asker
		// took over a minute to settle.
		Settle:       90 * time.Second,
		Coordinators: 2, Workers: 4, Readers: 1,
		AwaitWait: time.Second, CancelAfter: 1500 * time.Millisecond,
		Data: data, ID: id, Seed: seed, Tolerant: true, Recorder: rec,
		// A search that has not ended in a minute does not end (a 95-op
		// run's ran 5 minutes without an answer); the other checks judge.
		LinearizeTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Notes {
		t.Logf("tolerated: %s", e)
	}
	for _, e := range res.Errors {
		if run, ok := strings.CutSuffix(e, ": the old coordinator read empty after the new one adopted"); ok && !adopted(res.Ops, run+"-c2") {
			// The driver does not look at the adoption's answer; one that
			// failed may not have taken effect. The history's fencing check
			// judges this soundly.
			t.Logf("load: %s, but that adoption was never answered 200", e)
			continue
		}
		t.Errorf("load: %s", e)
	}
	t.Logf("main phase %v, end phase %v, checks %v; %d ops, %d launches; %s",
		res.MainEnd.Sub(res.Start).Round(time.Millisecond), res.End.Sub(res.MainEnd).Round(time.Millisecond),
		res.CheckTime.Round(time.Millisecond), len(res.Ops), res.Launches, strings.TrimSpace(res.Report.String()))
	// Repeats fail the test whatever the load's check said (a run whose
	// linearizability was left undecided may hide one).
	folded, reps := foldRepeats(res.Ops)
	reportRepeats(t, "the load", reps)
	rep := res.Report
	if !rep.OK() {
		// Only repeats may explain it.
		rep = history.Check(folded, history.Options{Linearizability: true})
		if !rep.OK() {
			dumpHistory(t, folded)
			t.Fatalf("the load broke an invariant:\n%s", rep)
		}
	}
	if rep.Checked["receipts"] == 0 || rep.Checked["posts"] == 0 {
		t.Fatal("nothing was applied or delivered: the faults prove little")
	}
	return res
}

// adopted reports whether an adoption by coordinator was answered 200.
func adopted(ops []history.Op, coordinator string) bool {
	for _, op := range ops {
		if op.Route == history.Adopt && op.Client == coordinator && op.Answered() {
			return true
		}
	}
	return false
}

// A repeat is a row delivered again under the id of a row delivered before
// it: a worker's post that the service appended and then answered with an
// error (the settle after a worker-done failed, the answer was lost),
// retried by the harness with the same client id and appended again. The
// store now appends a row once per id, so a repeat is a failure (it was
// the open finding of RELIABILITY.md); the porcupine model, which keys a
// row by its content, has no linearization for it, so each is folded into
// a row of its own first and the checkers judge everything else.
type repeat struct {
	run, batch, id string
}

// foldRepeats rewrites every repeat in ops as a row of its own (its id and
// body marked "~repeatN", the same way in every answer naming its batch,
// so replays stay identical) posted right after the row it repeats, and
// returns the rewritten history and the repeats, so that the checkers
// judge everything else. A history without repeats comes back unchanged.
func foldRepeats(ops []history.Op) ([]history.Op, []repeat) {
	type batchAt struct {
		run, id string
		first   int64
	}
	batches := map[string]*batchAt{} // run + batch id
	answers := map[string][]int{}    // run + batch id -> ops naming it
	rows := map[string][]protocol.MailMessage{}
	for i, op := range ops {
		switch op.Route {
		case history.Next, history.Await, history.Acknowledge:
		default:
			continue
		}
		var call protocol.MailboxCall
		var a protocol.MailboxAnswer
		if op.Status != http.StatusOK || json.Unmarshal(op.Body, &call) != nil || json.Unmarshal(op.Answer, &a) != nil || a.Delivery == nil {
			continue
		}
		k := call.Run + "\x00" + a.Delivery.ID
		if b := batches[k]; b == nil {
			batches[k] = &batchAt{call.Run, a.Delivery.ID, op.Return}
			rows[k] = a.Delivery.Messages
		} else if op.Return < b.first {
			b.first = op.Return
		}
		answers[k] = append(answers[k], i)
	}
	order := make([]*batchAt, 0, len(batches))
	for _, b := range batches {
		order = append(order, b)
	}
	slices.SortFunc(order, func(x, y *batchAt) int { return cmp.Compare(x.first, y.first) })

	var reps []repeat
	renamed := map[string]map[int]string{} // run + batch id -> row index -> suffix
	seen := map[string]map[string]int{}    // run -> row id -> times delivered
	for _, b := range order {
		k := b.run + "\x00" + b.id
		if seen[b.run] == nil {
			seen[b.run] = map[string]int{}
		}
		for i, m := range rows[k] {
			n := seen[b.run][m.ID]
			seen[b.run][m.ID]++
			if n == 0 {
				continue
			}
			if renamed[k] == nil {
				renamed[k] = map[int]string{}
			}
			renamed[k][i] = fmt.Sprintf("~repeat%d", n)
			reps = append(reps, repeat{b.run, b.id, m.ID})
		}
	}
	if len(reps) == 0 {
		return ops, nil
	}
	out := slices.Clone(ops)
	after := map[int][]history.Op{} // the repeats' posts, each after its original's
	postOf := map[string]int{}      // run + row id -> index of the post that answered it
	for i, op := range ops {
		var a workerapi.PostAnswer
		if op.Route == history.Post && op.Answered() && json.Unmarshal(op.Answer, &a) == nil && a.ID != "" {
			postOf[op.Run+"\x00"+a.ID] = i
		}
	}
	for k, idx := range renamed {
		var first int64 = math.MaxInt64
		for _, i := range answers[k] {
			var a protocol.MailboxAnswer
			_ = json.Unmarshal(ops[i].Answer, &a)
			for j, suffix := range idx {
				a.Delivery.Messages[j].ID += suffix
				a.Delivery.Messages[j].Body += " " + suffix
			}
			b, _ := json.Marshal(a)
			out[i].Answer = b
			first = min(first, ops[i].Return)
		}
		run := strings.SplitN(k, "\x00", 2)[0]
		for j, suffix := range idx {
			m := rows[k][j]
			orig, ok := postOf[run+"\x00"+m.ID]
			if !ok {
				continue // a row no post is known for (the model skips it)
			}
			row := workerapi.PostRequest{Kind: m.Kind, Subject: m.Subject, Body: m.Body + " " + suffix, Outcome: m.Outcome}
			body, _ := json.Marshal(row)
			ans, _ := json.Marshal(workerapi.PostAnswer{ID: m.ID + suffix})
			after[orig] = append(after[orig], history.Op{Client: ops[orig].Client, Route: history.Post, Run: run,
				Call: ops[orig].Call, Return: first, Body: body, Status: http.StatusOK, Answer: ans})
		}
	}
	folded := make([]history.Op, 0, len(out)+len(reps))
	for i, op := range out {
		folded = append(folded, op)
		folded = append(folded, after[i]...)
	}
	for i := range folded {
		folded[i].ID = i
	}
	return folded, reps
}

// reportRepeats fails on each repeat.
func reportRepeats(t *testing.T, what string, reps []repeat) {
	t.Helper()
	for _, r := range reps {
		t.Errorf("%s: run %s: row %s delivered a second time, in batch %s (a post retried after the service appended it)", what, r.run, r.id, r.batch)
	}
}

// awaitsAnswered checks that every await of ops was answered within its
// bound (waitMs plus the client's deadline: a call without an answer is a
// Pending op), counts its statuses, and checks that an await answered
// empty held the call for its waitMs at least (a broken doorbell must
// degrade to polling inside the call, not to a burst of calls).
func awaitsAnswered(t *testing.T, ops []history.Op) map[int]int {
	t.Helper()
	statuses := map[int]int{}
	for _, op := range ops {
		if op.Route != history.Await {
			continue
		}
		statuses[op.Status]++
		if op.Return == history.Pending || op.Status == 0 {
			t.Errorf("await by %s was not answered within its waitMs and deadline: %s %s", op.Client, op.Body, op.Err)
			continue
		}
		var call protocol.MailboxCall
		var a protocol.MailboxAnswer
		if op.Status != http.StatusOK || json.Unmarshal(op.Body, &call) != nil || json.Unmarshal(op.Answer, &a) != nil || call.WaitMs == nil {
			continue
		}
		if held := time.Duration(op.Return - op.Call); a.Status == protocol.MailEmpty && held < time.Duration(*call.WaitMs)*time.Millisecond {
			t.Errorf("await by %s answered empty after %v, before its waitMs %d", op.Client, held, *call.WaitMs)
		}
	}
	return statuses
}

// auditAcknowledged asks the server again about everything ops
// acknowledged, recording the calls into rec: every effect answered
// applied must look up applied with the very receipt it was answered, and
// no batch acknowledged may be delivered again (a row it carried only as a
// repeat), read to its end by an auditor that adopts each run. Calls that fail (the
// server may be injecting faults) are repeated.
func auditAcknowledged(t *testing.T, s *server, ops []history.Op, rec *history.Recorder) (effects, batches int) {
	t.Helper()
	c, err := history.NewClient(s.Endpoint, s.Token, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 5 * time.Second
	ctx := context.Background()
	// do repeats a call until it is answered 200.
	do := func(client string, route history.Route, body []byte) history.Op {
		t.Helper()
		var op history.Op
		for range 40 {
			if op, err = c.Do(ctx, client, route, body, "", 0); err == nil && op.Status == http.StatusOK {
				return op
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s %s: no answer in 40 tries: %d %s %v", route, body, op.Status, op.Answer, err)
		return op
	}

	type applied struct {
		body    []byte
		receipt json.RawMessage
	}
	keys := map[string]applied{}
	var order []string
	for _, op := range ops {
		if (op.Route != history.Effect && op.Route != history.Lookup) || op.Status != http.StatusOK {
			continue
		}
		var call protocol.EffectCall
		var a struct {
			Status  string          `json:"status"`
			Receipt json.RawMessage `json:"receipt"`
		}
		if json.Unmarshal(op.Body, &call) != nil || json.Unmarshal(op.Answer, &a) != nil || a.Status != protocol.StatusApplied {
			continue
		}
		if _, ok := keys[call.Request.Key]; !ok {
			keys[call.Request.Key] = applied{op.Body, a.Receipt}
			order = append(order, call.Request.Key)
		}
	}
	for _, k := range order {
		e := keys[k]
		op := do("auditor", history.Lookup, e.body)
		var a struct {
			Status  string          `json:"status"`
			Receipt json.RawMessage `json:"receipt"`
		}
		if json.Unmarshal(op.Answer, &a) != nil || a.Status != protocol.StatusApplied || !sameJSON(a.Receipt, e.receipt) {
			t.Errorf("effect %s was answered applied with %s; its lookup now answers %s", k, e.receipt, op.Answer)
		}
		effects++
	}

	// What each run acknowledged: batch ids, and the rows they carried.
	rows := map[string][]string{} // batch id → row ids
	acked := map[string]map[string]bool{}
	for _, op := range ops {
		var call protocol.MailboxCall
		var a protocol.MailboxAnswer
		if op.Status != http.StatusOK || json.Unmarshal(op.Body, &call) != nil {
			continue
		}
		switch op.Route {
		case history.Next, history.Await, history.Acknowledge:
		default:
			continue
		}
		if json.Unmarshal(op.Answer, &a) == nil && a.Delivery != nil {
			for _, m := range a.Delivery.Messages {
				rows[a.Delivery.ID] = append(rows[a.Delivery.ID], m.ID)
			}
		}
		if op.Route == history.Acknowledge && call.Delivery != "" {
			if acked[call.Run] == nil {
				acked[call.Run] = map[string]bool{}
			}
			acked[call.Run][call.Delivery] = true
		}
	}
	runs := make([]string, 0, len(acked))
	for run := range acked {
		runs = append(runs, run)
	}
	slices.Sort(runs)
	for _, run := range runs {
		ackedRows := map[string]bool{}
		for id := range acked[run] {
			for _, r := range rows[id] {
				ackedRows[r] = true
			}
		}
		call := protocol.MailboxCall{Run: run, Coordinator: "auditor-" + run}
		body, _ := json.Marshal(call)
		do(call.Coordinator, history.Adopt, body)
		for i := 0; ; i++ {
			if i == 100 {
				t.Fatalf("run %s: the auditor is still reading after 100 batches", run)
			}
			var a protocol.MailboxAnswer
			if op := do(call.Coordinator, history.Next, body); json.Unmarshal(op.Answer, &a) != nil {
				t.Fatalf("run %s: next answered %s", run, op.Answer)
			}
			if a.Status != protocol.MailDelivery || a.Delivery == nil {
				break
			}
			if acked[run][a.Delivery.ID] {
				t.Errorf("run %s: batch %s was acknowledged, and is delivered again", run, a.Delivery.ID)
			}
			var reps []repeat
			for _, m := range a.Delivery.Messages {
				if ackedRows[m.ID] {
					// Appended again by a post retried late (the harness
					// backs off up to 30 s): a repeat.
					reps = append(reps, repeat{run, a.Delivery.ID, m.ID})
				}
			}
			reportRepeats(t, "the audit", reps)
			ack := call
			ack.Delivery = a.Delivery.ID
			b, _ := json.Marshal(ack)
			do(call.Coordinator, history.Acknowledge, b)
		}
		batches += len(acked[run])
	}
	// The last word on the inventory: every resource an applied launch
	// created is still there, unless released (applied-lost).
	do("auditor", history.Inventory, nil)
	return effects, batches
}

func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

// checkWhole checks a history made of several parts (the load's, with the
// posts its scripts made, and the audits') as one, with its repeats folded
// (the load reported them). The mailbox's linearizability was checked
// with each part.
func checkWhole(t *testing.T, parts ...[]history.Op) history.Report {
	t.Helper()
	var all []history.Op
	for _, p := range parts {
		all = append(all, p...)
	}
	for i := range all {
		all[i].ID = i
	}
	folded, _ := foldRepeats(all)
	rep := history.Check(folded, history.Options{})
	if !rep.OK() {
		dumpHistory(t, folded)
		t.Fatalf("the whole history broke an invariant:\n%s", rep)
	}
	return rep
}

// TestAWSFaultsUnderLoad runs a mixed load against galley serve on
// DynamoDB Local and fauxqs whose clients inject every kind of fault at 1
// to 3 % (awsFaultPlan), then audits: every invariant over the whole
// history (the mailbox linearizable), every await answered within its bound, every
// applied effect still applied with the same receipt and no acknowledged
// batch delivered again, both under the faults and after a restart
// without them. Every kind of fault must have fired.
func TestAWSFaultsUnderLoad(t *testing.T) {
	stack := newAWSStack(t)
	data := t.TempDir()
	seed := uint64(time.Now().UnixNano()) % math.MaxInt32
	plan := fmt.Sprintf("%s,seed=%d", awsFaultPlan, seed)
	t.Logf("--inject-aws-faults %s", plan)
	d := 10 * time.Second
	if faultLong() {
		d = 60 * time.Second
	}
	srv := startServer(t, data, stack.flags(plan)...)
	rec := history.NewRecorder()
	res := mixedLoad(t, srv, data, "awsf", seed, d, rec)
	t.Logf("await statuses %v", awaitsAnswered(t, res.Ops))

	from := rec.Len()
	effects, batches := auditAcknowledged(t, srv, res.Ops, rec)
	t.Logf("under faults: %d applied effects looked up, %d acknowledged batches not delivered again", effects, batches)
	counts := stopCounts(t, srv)
	t.Logf("%d faults injected %v; calls that reached AWS %v; by operation %v", counts.Total(), counts.Injected, counts.Calls, counts.ByOperation)
	for _, kind := range []string{"throttle", "timeout", "lost-response", "delayed", "condition-failed", "server-error", "reset", "tx-conflict"} {
		if counts.Injected[kind] == 0 {
			t.Errorf("no %s fault was injected: the run proves nothing about it", kind)
		}
	}

	// DynamoDB is the truth: a server without faults on the same table
	// finds everything acknowledged.
	again := startServer(t, data, stack.flags("")...)
	auditAcknowledged(t, again, append(slices.Clone(res.Ops), rec.Ops()[from:]...), rec)
	rep := checkWhole(t, res.Ops, rec.Ops()[from:])
	t.Logf("whole history: %s", strings.TrimSpace(rep.String()))
}

// TestAWSFaultsSQSCut cuts SQS (every ring and every receive fails: at
// once, after the receive ran, or with the receive run late) under a
// scripted worker and then a mixed load: every await is answered within
// its bound and, when empty, only after its waitMs; every row arrives in
// order, a message reaches the worker, and the history keeps every
// invariant.
func TestAWSFaultsSQSCut(t *testing.T) {
	stack := newAWSStack(t)
	data := t.TempDir()
	seed := uint64(time.Now().UnixNano()) % math.MaxInt32
	plan := fmt.Sprintf("timeout=0.4,lost-response=0.3,delayed=0.3,ops=ReceiveMessage+SendMessage,seed=%d", seed)
	t.Logf("--inject-aws-faults %s", plan)
	srv := startServer(t, data, stack.flags(plan)...)
	rec := history.NewRecorder()

	// A scripted worker: its rows, and a message to it, with no doorbell.
	run := "sqs-cut"
	f := newFaultCoordinator(t, srv.Endpoint, srv.Token, run, rec)
	script := "#!galley-script\nstatus " + run + " one\nescalate " + run + " look :: " + run + " needs attention\nstatus " + run + " two\nwait-message\nsleep 1h"
	_, receipt := f.effect(launchEffect(script, ""))
	handle := receipt.Created[0].Handle
	rows := f.rowsUntil(1200*time.Millisecond, 60*time.Second, func(m protocol.MailMessage) bool { return m.Body == run+" two" })
	f.effect(`{"type":"message-worker","worker":` + workerRes(handle) + `,"body":"` + run + ` hello"}`)
	rows = append(rows, f.rowsUntil(1200*time.Millisecond, 60*time.Second, func(m protocol.MailMessage) bool {
		return m.Body == "message: "+run+" hello"
	})...)
	var got []string
	for _, m := range rows {
		if m.Kind != protocol.MsgHeartbeat {
			got = append(got, m.Body)
		}
	}
	if want := []string{run + " one", run + " needs attention", run + " two", "message: " + run + " hello"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	f.effect(`{"type":"cancel-worker","worker":` + workerRes(handle) + `}`)
	scripted := rec.Ops()
	if rep := history.Check(scripted, history.Options{Linearizability: true}); !rep.OK() || len(rep.Unknown) > 0 {
		t.Fatalf("the scripted worker's history:\n%s", rep)
	}

	// The mixed load, with the doorbell still cut.
	d := 6 * time.Second
	if faultLong() {
		d = 30 * time.Second
	}
	res := mixedLoad(t, srv, data, "sqscut", seed, d, rec)
	statuses := awaitsAnswered(t, append(slices.Clone(scripted), res.Ops...))
	t.Logf("await statuses %v", statuses)
	for st, n := range statuses {
		if st != http.StatusOK {
			t.Errorf("%d awaits answered %d with only SQS failing: the store is fine, an await must answer", n, st)
		}
	}
	counts := stopCounts(t, srv)
	t.Logf("%d faults injected %v; calls that reached AWS %v; by operation %v", counts.Total(), counts.Injected, counts.Calls, counts.ByOperation)
	for _, o := range []string{"ReceiveMessage", "SendMessage"} {
		n := 0
		for _, c := range counts.ByOperation[o] {
			n += c
		}
		if n == 0 {
			t.Errorf("no %s failed: SQS was not cut", o)
		}
	}
	rep := checkWhole(t, scripted, res.Ops)
	t.Logf("whole history: %s", strings.TrimSpace(rep.String()))
}
