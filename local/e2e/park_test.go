package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
)

// Parked workers (docs/parking.md) in the local shape: galley serve with
// a short --park-after and the scripted agent.

const parkBrief = "#!galley-script\ncommit before.txt one\nask Which API? :: v1 or v2?\ncommit after.txt two\ndone succeeded resumed"

// launchToPark launches a scripted worker on branch that commits, asks
// and parks in its ask: its handle, its question, and the pid of the
// harness that parked.
func launchToPark(t *testing.T, s *server, mb *mailbox, key, branch string) (handle, question string, pid int) {
	t.Helper()
	workerEffect(t, s, mb.run, key, launchEffect(parkBrief, branch))
	handle = workerHandle(t, s, key)
	pid = harnessPID(t, s, handle)
	q := mb.next(t, "the question", func(r mailRow) bool { return r.Kind == protocol.MsgQuestion })
	awaitGone(t, pid, "the parked harness")
	return handle, q.ID, pid
}

// TestParkedWorkerResumesOnReply: the worker asks and parks (its harness
// process is gone, it observes awaiting-reply, the inventory lists it
// live, the operator's list says parked); the reply resumes it (a new
// harness) and its script goes on from the ask; the branch holds the
// commits from before and after the parking.
func TestParkedWorkerResumesOnReply(t *testing.T) {
	s := startServer(t, t.TempDir(), "--park-after", "2s")
	mb := &mailbox{s: s, run: "run-park"}
	w, q, parkedPID := launchToPark(t, s, mb, "k-park", "park/resume")
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
	if got := gitShow(t, repo, "park/resume:before.txt"); got != "one" {
		t.Fatalf("before.txt on the branch = %q", got)
	}

	workerEffect(t, s, mb.run, "k-park-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"v2"}`, workerRes(w), q))
	mb.next(t, "the reply's status", kindBody(protocol.MsgStatus, "reply: v2"))
	done := mb.next(t, "the worker-done", func(r mailRow) bool { return r.Kind == protocol.MsgWorkerDone })
	if done.Outcome != protocol.OutcomeSucceeded || done.Body != "resumed" {
		t.Fatalf("the resumed worker's worker-done: %+v", done)
	}
	if pid := harnessPID(t, s, w); pid == parkedPID {
		t.Fatal("no new harness resumed the worker")
	}
	if got := gitShow(t, repo, "park/resume:after.txt"); got != "two" {
		t.Fatalf("after.txt on the branch = %q", got)
	}
	if got := gitShow(t, repo, "park/resume:before.txt"); got != "one" {
		t.Fatalf("before.txt on the branch after the resume = %q", got)
	}
	if st, oc := observe(t, s, w); st != protocol.StateSettled || oc != protocol.OutcomeSucceeded {
		t.Fatalf("the resumed worker ends %s/%s", st, oc)
	}
}

// TestParkedWorkerCancelAndRelease: cancel and release of a parked worker
// settle it without starting its harness again.
func TestParkedWorkerCancelAndRelease(t *testing.T) {
	s := startServer(t, t.TempDir(), "--park-after", "2s")
	mb := &mailbox{s: s, run: "run-park-end"}
	for _, how := range []string{"cancel", "release"} {
		w, _, pid := launchToPark(t, s, mb, "k-park-"+how, "park/"+how)
		eff := fmt.Sprintf(`{"type":"cancel-worker","worker":%s}`, workerRes(w))
		want := protocol.StateSettled
		if how == "release" {
			eff = fmt.Sprintf(`{"type":"release-resource","resource":%s}`, workerRes(w))
			want = protocol.StateMissing
		}
		workerEffect(t, s, mb.run, "k-park-"+how+"-it", eff)
		if st, oc := observe(t, s, w); st != want || (how == "cancel" && oc != protocol.OutcomeCancelled) {
			t.Fatalf("%s of a parked worker: %s/%s", how, st, oc)
		}
		// Nothing starts it again: no resume claimed, the same harness
		// recorded last.
		time.Sleep(time.Second)
		if _, err := os.Lstat(filepath.Join(s.Data, "workers", w, "resume-1")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the %s of a parked worker resumed it (%v)", how, err)
		}
		if got := harnessPID(t, s, w); got != pid {
			t.Fatalf("the %s of a parked worker started a harness (pid %d, was %d)", how, got, pid)
		}
	}
}

// workerHandle is the worker the applied launch key made.
func workerHandle(t *testing.T, s *server, key string) string {
	t.Helper()
	_, ans := s.kitchn(t, contract.RouteInventory, nil)
	var inv protocol.Inventory
	if err := json.Unmarshal(ans, &inv); err != nil {
		t.Fatalf("inventory: %v: %s", err, ans)
	}
	for _, r := range inv.Resources {
		if r.Resource.Kind == protocol.KindWorker && r.Owner != nil && *r.Owner == key {
			return r.Resource.Handle
		}
	}
	t.Fatalf("no worker of key %s in the inventory: %s", key, ans)
	return ""
}

func inventoryLiveness(t *testing.T, s *server, handle string) string {
	t.Helper()
	_, ans := s.kitchn(t, contract.RouteInventory, nil)
	var inv protocol.Inventory
	if err := json.Unmarshal(ans, &inv); err != nil {
		t.Fatalf("inventory: %v: %s", err, ans)
	}
	for _, r := range inv.Resources {
		if r.Resource.Kind == protocol.KindWorker && r.Resource.Handle == handle {
			return r.Liveness
		}
	}
	return "absent"
}

// harnessPID is the pid of the worker's latest harness, as galley serve's
// runtime recorded it.
func harnessPID(t *testing.T, s *server, handle string) int {
	t.Helper()
	file := filepath.Join(s.Data, "workers", handle, "pid")
	for end := time.Now().Add(30 * time.Second); ; {
		b, err := os.ReadFile(file)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
		if time.Now().After(end) {
			t.Fatalf("no pid recorded for worker %s: %v", handle, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitGone waits until process pid has ended and been reaped.
func awaitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); ; {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s (pid %d) still runs", what, pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func operatorSaysParked(t *testing.T, s *server, handle string) bool {
	t.Helper()
	req, err := http.NewRequest("GET", s.Endpoint+operator.PathWorkers, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+newLocalHouse(s, "").OperatorToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != 200 {
		t.Fatalf("operator worker list: %d %s", resp.StatusCode, body)
	}
	var list struct {
		Workers []struct {
			Handle string
			Parked bool
		}
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	for _, w := range list.Workers {
		if w.Handle == handle {
			return w.Parked
		}
	}
	return false
}

func gitShow(t *testing.T, repo, rev string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", repo, "show", rev).Output()
	if err != nil {
		t.Fatalf("git show %s: %v", rev, err)
	}
	return string(out)
}
