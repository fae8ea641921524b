package harness_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// refusingStore is a session store whose every write is refused on the
// way, as a bucket's policy refuses one (the fault-injecting decorator of
// a real folder store).
type refusingStore struct{ *snapshot.DirStore }

var errRefusedWrite = errors.New("AccessDenied: the bucket's policy refused the write")

func (s refusingStore) Put(ctx context.Context, key string, r io.Reader) error {
	_, _ = io.Copy(io.Discard, r)
	return errRefusedWrite
}

// A parking whose session archive cannot be written does not park: the
// worker keeps running (its harness, its agent in its ask, no parking
// report), the event log says why, and the reply reaches the agent, which
// goes on to its outcome.
func TestParkWhoseSaveFailsKeepsRunning(t *testing.T) {
	t.Parallel()
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip("the uid confinement needs root here: " + why)
	}
	ctx := testCtx(t)
	exe := openExe(t)
	uid, sessions := agentSessions(t)
	ds, err := snapshot.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	f := fakeFor(t, workerapi.Self{Handle: "w-1", Run: "run-1", Branch: testBranch, AgentUID: uid, ReportEvents: true,
		Brief: "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded after", Agent: protocol.AgentSelection{Agent: "script"}})
	p := runInProcess(t, ctx, f, "script", sessionScript{harness.ScriptDriver{Executable: exe}, sessions}, func(c *harness.Config) {
		c.Confine, c.ConfineExe, c.Workspace = harness.ConfineUser, exe, confinedWorkspace(t)
		c.ParkAfter, c.Parks, c.House = time.Second, refusingStore{ds}, "test-house"
	})
	waitFor(t, ctx, f, "the failed parking's event", func(s fakeapi.Snapshot) bool {
		for _, e := range s.Events {
			if e.Event == workerapi.EventError && strings.Contains(e.Text, "not parked") && strings.Contains(e.Text, "AccessDenied") {
				return true
			}
		}
		return false
	})
	s := f.Snapshot()
	if s.State != protocol.StateAwaitingReply || s.Count(workerapi.PathExited) != 0 || len(parkCalls(s)) != 0 {
		t.Fatalf("after the failed save: state %s, %d exit reports, parkings %+v; want awaiting-reply, running, none",
			s.State, s.Count(workerapi.PathExited), parkCalls(s))
	}
	f.Reply(lastQuestion(s), "v2")
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s = f.Snapshot()
	if parks := parkCalls(s); len(parks) != 0 {
		t.Errorf("the worker parked: %+v", parks)
	}
	if got := s.Posts(); len(got) < 2 || got[len(got)-2].Body != "reply: v2" {
		t.Errorf("the agent did not go on after the failed parking: %+v", got)
	}
	if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeSucceeded {
		t.Errorf("the worker ended %s/%s, want settled succeeded", s.State, s.Outcome)
	}
}
