package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/protocol"
)

// TestRealCLIsParkInServe parks each real CLI in galley serve (issue 30,
// item 2, the local shape): the worker commits, asks its coordinator and
// parks in the call (its harness and the CLI gone, awaiting-reply, live,
// parked in the operator's list); the reply, sent a while later, resumes
// it in a new harness on the same CLI session (the provider stand-in sees
// the turns from before the parking and the reply as the prompt), and the
// branch holds the commits from before and after.
func TestRealCLIsParkInServe(t *testing.T) {
	clis := realCLIs(t)
	key := "sk-ant-test-" + randomHex(t)
	commit := func(file, msg string) string {
		return fmt.Sprintf("printf '%s\\n' > %s && git add %s && git -c user.name=agent -c user.email=agent@example.com commit -qm '%s' && git push -q origin HEAD",
			msg, file, file, msg)
	}
	for _, fam := range []string{"claude", "codex"} {
		t.Run(fam, func(t *testing.T) {
			prov := providerstandin.New(key, providerstandin.ParkSteps(fam, commit("before.txt", "before parking"), commit("after.txt", "after resuming")))
			t.Cleanup(prov.Close)
			env := serveEnv{"HOME": t.TempDir(), "ANTHROPIC_API_KEY": key, "CODEX_API_KEY": key}
			openForAgents(t, "", false)
			s := startServerEnv(t, env, t.TempDir(), "--families", fam, "--agent-bin-dir", clis, "--park-after", "3s",
				"--anthropic-base-url", prov.URL, "--openai-base-url", prov.URL+"/v1")
			t.Cleanup(func() { dumpWorkerLogs(t, s) })

			run, branch := "run-park-"+fam, "park/"+fam
			brief := "Add two files around a question to the coordinator, push both, and finish."
			w, ans := agentLaunch(t, s, run, "k-park-"+fam, brief, branch, map[string]string{"agent": fam})
			if w == "" {
				t.Fatalf("launch not applied: %s", ans)
			}
			pid := harnessPID(t, s, w)
			mb := &mailbox{s: s, run: run}
			q := mb.next(t, "the question", func(r mailRow) bool { return r.Kind == protocol.MsgQuestion })
			awaitGone(t, pid, "the parked harness")
			if st, _ := observe(t, s, w); st != protocol.StateAwaitingReply {
				t.Fatalf("the parked worker observes %q, want awaiting-reply", st)
			}
			if l := inventoryLiveness(t, s, w); l != protocol.LivenessLive {
				t.Fatalf("the parked worker's inventory liveness %q, want live", l)
			}
			if !operatorSaysParked(t, s, w) {
				t.Fatal("the operator's worker list does not say parked")
			}
			repo := filepath.Join(s.Data, "repository.git")
			if got := gitShow(t, repo, branch+":before.txt"); got != "before parking\n" {
				t.Fatalf("before.txt on the branch = %q", got)
			}
			parkedCalls := len(prov.Calls())

			// The reply comes a while later, to nothing running.
			time.Sleep(2 * time.Second)
			workerEffect(t, s, run, "k-reply-"+fam, fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"hello, please"}`, workerRes(w), q.ID))
			done := mb.next(t, "worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
			if done.Outcome != protocol.OutcomeSucceeded || done.Body != "both pushed" {
				t.Fatalf("worker-done: %+v", done)
			}
			if got := harnessPID(t, s, w); got == pid {
				t.Errorf("the reply did not start a new harness (pid %d)", got)
			}

			// The same conversation: the resumed CLI's first scripted
			// request holds the turns before the parking, the parked call
			// and the reply.
			if err := providerstandin.CheckResumed(prov.Calls(), parkedCalls, fam, brief, "hello, please"); err != nil {
				t.Error(err)
			}
			if got := gitShow(t, repo, branch+":after.txt"); got != "after resuming\n" {
				t.Errorf("after.txt on the branch = %q", got)
			}
			if len(prov.Refused()) != 0 || prov.SawWrongKey() {
				t.Errorf("the provider refused: %v", prov.Refused())
			}
		})
	}
}
