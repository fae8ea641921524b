package awslocal_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/ecsstandin"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
)

// withParkAfter sets GALLEY_PARK_AFTER to d on every family's worker task
// definition (the stack sets its parkAfter there, 10 minutes by default).
func withParkAfter(d string) func(map[string]any) error {
	return func(res map[string]any) error {
		cs, err := workerContainers(res)
		if err != nil {
			return err
		}
	next:
		for _, c := range cs {
			env, _ := c["Environment"].([]any)
			for _, e := range env {
				if kv, ok := e.(map[string]any); ok && kv["Name"] == contract.EnvParkAfter {
					kv["Value"] = d
					continue next
				}
			}
			c["Environment"] = append(env, map[string]any{"Name": contract.EnvParkAfter, "Value": d})
		}
		return nil
	}
}

// awaitParkingRecorded waits until the operator's worker list says the
// worker parked (its parking report was written), asking again later when
// the operator API throttles.
func awaitParkingRecorded(t *testing.T, s *awslocal.Stack, worker string) {
	t.Helper()
	client := operator.NewClient(s.Endpoint(), operatorToken(t, s))
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ws, err := client.Workers(t.Context())
		var se *operator.StatusError
		if err != nil && !(errors.As(err, &se) && se.Status == http.StatusTooManyRequests) {
			t.Fatalf("the operator's worker list: %v", err)
		}
		for _, w := range ws {
			if w.Handle == worker && w.Parked {
				return
			}
		}
	}
	t.Fatalf("worker %s never listed parked", worker)
}

// workerTasks lists the ECS stand-in's tasks of the worker, in creation
// order.
func workerTasks(s *awslocal.Stack, worker string) []ecsstandin.TaskInfo {
	var out []ecsstandin.TaskInfo
	for _, task := range s.ECS().Tasks() {
		if task.Env[contract.EnvWorkerHandle] == worker {
			out = append(out, task)
		}
	}
	return out
}

// awaitParked waits until the worker's only task has stopped (its harness
// parked it and ended) and the worker observes awaiting-reply.
func awaitParked(t *testing.T, s *awslocal.Stack, k *kitchn, worker string) ecsstandin.TaskInfo {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		ts := workerTasks(s, worker)
		if len(ts) == 1 && ts[0].LastStatus == "STOPPED" {
			return ts[0]
		}
		if len(ts) > 1 {
			t.Fatalf("worker %s has %d tasks before any input", worker, len(ts))
		}
	}
	t.Fatalf("the task of worker %s did not end with a parking (observe: %+v)", worker, k.observe(worker))
	return ecsstandin.TaskInfo{}
}

// inventoryLiveness is the worker's liveness in kitchn's inventory.
func inventoryLiveness(t *testing.T, s *awslocal.Stack, token, worker string) string {
	t.Helper()
	var inv struct {
		Resources []struct {
			Resource protocol.Resource
			Liveness string
		}
	}
	kitchnCall(t, s, token, contract.RouteInventory, "", &inv)
	for _, r := range inv.Resources {
		if r.Resource.Kind == protocol.KindWorker && r.Resource.Handle == worker {
			return r.Liveness
		}
	}
	return "absent"
}

// TestParkedWorkerAWSLocal: the stack deployed with a park after of 2 s
// (the worker task's GALLEY_PARK_AFTER). A scripted worker commits, leaves
// a file uncommitted and asks; once it has waited that long its harness
// saves the worktree's snapshot to the bucket, reports the parking and
// ends: its task stops (the reconciler's STOPPED event settles nothing),
// it observes awaiting-reply and the inventory lists it live. The reply
// starts a new task of the same task definition (GALLEY_PARKING=1), whose
// harness restores the worktree and resumes the script at its ask: it sees
// the uncommitted file, commits again and finishes; the branch holds both
// commits. A second parked worker is cancelled: it settles cancelled, and
// no task starts for it.
func TestParkedWorkerAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := startStack(t, func(c *awslocal.Config) { c.Template = mutatedTemplate(t, withParkAfter("2s")) })
	k := newKitchn(t, s, token, "run-park")
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	bucket := s.FunctionEnv(lambdaapp.Effects)[contract.EnvSnapshotBucket]

	brief := "#!galley-script\ncommit before.txt one\nwrite notes.txt left uncommitted\nask Which API? :: v1 or v2?\n" +
		"show notes.txt\ncommit after.txt two\ndone succeeded resumed"
	const branch = "park/aws-local"
	worker, wt := launchSnapshotScript(t, k, "k-park-1", `{"type":"isolated"},"branch":"`+branch+`"`, brief)
	q := k.next("the question", kind(protocol.MsgQuestion, ""))
	parked := awaitParked(t, s, k, worker)
	if parked.ExitCode == nil || *parked.ExitCode != 0 {
		t.Errorf("the parked task's harness exited %v, want 0", parked.ExitCode)
	}
	if obs := k.observe(worker); obs.State != protocol.StateAwaitingReply {
		t.Fatalf("the parked worker observes %+v, want awaiting-reply", obs)
	}
	if l := inventoryLiveness(t, s, token, worker); l != protocol.LivenessLive {
		t.Fatalf("the parked worker's inventory liveness is %q, want live", l)
	}
	if _, ok, err := s.S3().Object(bucket, snapshot.WorktreeKey(house, wt)); err != nil || !ok {
		t.Fatalf("no worktree snapshot in the bucket after the parking (%v)", err)
	}
	// The parked task's STOPPED event has reached the reconciler by now
	// (or will: it changes nothing either way); the worker still waits.
	time.Sleep(2 * time.Second)
	if obs := k.observe(worker); obs.State != protocol.StateAwaitingReply {
		t.Fatalf("after its task's end the parked worker observes %+v", obs)
	}
	if n := len(workerTasks(s, worker)); n != 1 {
		t.Fatalf("%d tasks of the parked worker before its reply, want 1", n)
	}

	if st, _ := k.effect("k-park-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"v2"}`,
		k.worker(worker), q.ID)); st != "applied" {
		t.Fatalf("reply: %s", st)
	}
	if r := k.next("the resumed agent's reply", kind(protocol.MsgStatus, "reply: ")); r.Body != "reply: v2" {
		t.Errorf("the resumed agent saw %q", r.Body)
	}
	if r := k.next("the uncommitted file", kind(protocol.MsgStatus, "show notes.txt")); r.Body != "show notes.txt: left uncommitted" {
		t.Errorf("the resumed agent sees %q, want the file its parking left uncommitted", r.Body)
	}
	done := k.next("worker-done", kind(protocol.MsgWorkerDone, ""))
	if done.Outcome != protocol.OutcomeSucceeded || done.Body != "resumed" {
		t.Fatalf("worker-done: %+v", done)
	}
	ts := workerTasks(s, worker)
	if len(ts) != 2 || ts[1].Env[contract.EnvParking] != "1" || ts[1].TaskDefinitionArn != parked.TaskDefinitionArn ||
		ts[1].ClientToken == parked.ClientToken {
		t.Fatalf("the worker's tasks after the resume: %d, the second %+v", len(ts), ts[len(ts)-1])
	}
	for file, want := range map[string]string{"before.txt": "one", "after.txt": "two"} {
		got, err := exec.Command("git", "--git-dir", s.Repository(), "show", branch+":"+file).CombinedOutput()
		if err != nil || string(got) != want {
			t.Errorf("%s on %s: %q %v, want %q", file, branch, got, err, want)
		}
	}

	// A reply racing the parking: sent as soon as the parking is
	// recorded, while the parked task may still run. Its resume is owed
	// until that task's end, and the reconciler starts it then (with a
	// bootstrap code of the signing key's, as a launch's).
	racer, _ := launchSnapshotScript(t, k, "k-park-3", `{"type":"isolated"},"branch":"park/aws-local-race"`,
		"#!galley-script\nask Race? :: now\ndone succeeded raced")
	rq := k.next("the racing worker's question", kind(protocol.MsgQuestion, ""))
	awaitParkingRecorded(t, s, racer)
	running := 0
	for _, task := range workerTasks(s, racer) {
		if task.ExitCode == nil {
			running++
		}
	}
	if st, _ := k.effect("k-park-race-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"now"}`,
		k.worker(racer), rq.ID)); st != "applied" {
		t.Fatalf("the racing reply: %s", st)
	}
	t.Logf("the racing reply came with %d of the worker's tasks still running", running)
	if r := k.next("the racing reply in the agent", kind(protocol.MsgStatus, "reply: ")); r.Body != "reply: now" {
		t.Errorf("the resumed agent saw %q", r.Body)
	}
	if done := k.next("the racing worker's worker-done", kind(protocol.MsgWorkerDone, "")); done.Outcome != protocol.OutcomeSucceeded || done.Body != "raced" {
		t.Fatalf("the racing worker's worker-done: %+v", done)
	}

	// A parked worker cancelled: settled, and no task starts.
	other, _ := launchSnapshotScript(t, k, "k-park-2", `{"type":"isolated"},"branch":"park/aws-local-cancel"`,
		"#!galley-script\nask Anything? :: say\ndone succeeded never")
	k.next("the second question", kind(protocol.MsgQuestion, ""))
	awaitParked(t, s, k, other)
	if st, _ := k.effect("k-park-cancel", `{"type":"cancel-worker","worker":`+k.worker(other)+`}`); st != "applied" {
		t.Fatalf("cancel of the parked worker: %s", st)
	}
	if obs := k.observe(other); obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeCancelled {
		t.Fatalf("the cancelled parked worker observes %+v", obs)
	}
	time.Sleep(3 * time.Second)
	if ts := workerTasks(s, other); len(ts) != 1 {
		t.Fatalf("the cancelled parked worker has %d tasks, want its parked one only", len(ts))
	}
	// Its settle deleted its session archive (none here: the scripted
	// agent keeps no session files), through the S3 gate, with the
	// effects function's role.
	sessionARN := "arn:aws:s3:::" + bucket + "/" + snapshot.SessionKey(house, other)
	deleted := false
	for _, d := range s.Gate(iamgate.S3).Decisions() {
		if d.Resource == sessionARN && d.Action == "s3:DeleteObject" {
			if !d.Allowed {
				t.Errorf("the S3 gate refused the session archive's delete: %+v", d)
			}
			deleted = deleted || d.Allowed
		}
	}
	if !deleted {
		t.Error("the cancelled parked worker's session archive was not deleted")
	}
}

// TestImageCLIsParkAWSLocal: each real CLI of the worker image, against
// the provider stand-in, parked in its ask on aws-local (park after 3 s):
// its task stops, its session archive is in the snapshot bucket; the
// reply starts a new task that restores it and resumes the same CLI
// session (the provider's first request of the resumed CLI plays the
// step after the turns before the parking), which commits, pushes and
// finishes. The branch holds both commits, and once the worker has
// settled and its task ended the archive is deleted.
func TestImageCLIsParkAWSLocal(t *testing.T) {
	t.Parallel()
	if img := requireWorkerImage(t); img == "" {
		t.Skipf("%s is not set: the image's CLIs run only in its containers", awslocal.EnvWorkerImage)
	}
	const (
		anthropicOrigin = "https://anthropic.llm-gateway.example"
		openaiOrigin    = "https://openai.llm-gateway.example"
	)
	commit := func(file, msg string) string {
		return fmt.Sprintf("printf '%s\\n' > %s && git add %s && git -c user.name=agent -c user.email=agent@example.com commit -qm '%s' && git push -q origin HEAD",
			msg, file, file, msg)
	}
	keys := map[string]string{"claude": randomValue(t, "sk-ant-test-"), "codex": randomValue(t, "sk-test-")}
	provs := map[string]*providerstandin.Server{}
	for _, fam := range []string{"claude", "codex"} {
		provs[fam] = providerstandin.New(keys[fam], providerstandin.ParkSteps(fam, commit("before.txt", "before parking"), commit("after.txt", "after resuming")))
		t.Cleanup(provs[fam].Close)
	}
	gateways, park := withGateways(anthropicOrigin, openaiOrigin), withParkAfter("3s")
	tpl := mutatedTemplate(t, func(res map[string]any) error {
		if err := gateways(res); err != nil {
			return err
		}
		return park(res)
	})
	s, token := startStack(t, func(c *awslocal.Config) {
		c.Template = tpl
		c.ImageAgentCLIs = true
		c.WorkerServices = map[string]http.Handler{anthropicOrigin: provs["claude"].Config.Handler, openaiOrigin: provs["codex"].Config.Handler}
	})
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	bucket := s.FunctionEnv(lambdaapp.Effects)[contract.EnvSnapshotBucket]
	for name, fam := range map[string]string{"anthropic": "claude", "openai": "codex"} {
		if err := s.PutSecret(context.Background(), "galley/"+house+"/"+name, keys[fam]); err != nil {
			t.Fatal(err)
		}
	}
	for _, fam := range []string{"claude", "codex"} {
		t.Run(fam, func(t *testing.T) {
			prov := provs[fam]
			defer func() {
				if t.Failed() {
					for _, c := range prov.Calls() {
						t.Logf("provider call: api=%s step=%d called=%v results=%q", c.API, c.Step, c.Called, c.Results)
					}
					t.Logf("provider refusals: %v", prov.Refused())
				}
			}()
			k := newKitchn(t, s, token, "run-image-park-"+fam)
			k.patience = 10 * time.Minute // a real CLI on a loaded machine: a bound against a hang
			branch := "image-park/" + fam
			st, rc := k.effect("k-image-park-"+fam, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook",`+
				`"workspace":{"type":"isolated"},"brief":"Add two files around a question to the coordinator, push both, and finish.",`+
				`"branch":%q,"agent":{"agent":%q}}`, branch, fam))
			if st != "applied" {
				t.Fatalf("launch: %s", st)
			}
			w := rc.CreatedHandle(protocol.KindWorker)
			q := k.next("the question", kind(protocol.MsgQuestion, ""))
			awaitParked(t, s, k, w)
			if obs := k.observe(w); obs.State != protocol.StateAwaitingReply {
				t.Fatalf("the parked worker observes %+v", obs)
			}
			session := snapshot.SessionKey(house, w)
			if _, ok, err := s.S3().Object(bucket, session); err != nil || !ok {
				t.Fatalf("no session archive %s in the bucket after the parking (%v)", session, err)
			}
			parkedCalls := len(prov.Calls())
			if st, _ := k.effect("k-image-park-reply-"+fam, fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"hello, please"}`,
				k.worker(w), q.ID)); st != "applied" {
				t.Fatalf("reply: %s", st)
			}
			done := k.next("worker-done", kind(protocol.MsgWorkerDone, ""))
			if done.Outcome != protocol.OutcomeSucceeded || done.Body != "both pushed" {
				t.Fatalf("worker-done: %+v", done)
			}
			if err := providerstandin.CheckResumed(prov.Calls(), parkedCalls, fam, "", "hello, please"); err != nil {
				t.Error(err)
			}
			for file, want := range map[string]string{"before.txt": "before parking\n", "after.txt": "after resuming\n"} {
				got, err := exec.Command("git", "--git-dir", s.Repository(), "show", branch+":"+file).CombinedOutput()
				if err != nil || string(got) != want {
					t.Errorf("%s on %s: %q %v", file, branch, got, err)
				}
			}
			if ts := workerTasks(s, w); len(ts) != 2 {
				t.Errorf("%d tasks of the worker, want the parked one and the resumed one", len(ts))
			}
			// Settled, its task's end seen: the archive goes.
			for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
				if _, ok, err := s.S3().Object(bucket, session); err == nil && !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the settled worker's session archive is still in the bucket")
				}
			}
		})
	}
}
