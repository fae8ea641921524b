package harness_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// TestScriptParksAndResumes: a scripted agent that waits in ask longer
// than the park after is parked: its harness reports the parking (the
// question it waits on kept in its state) and ends, without an exit
// report. A second harness, started as galley starts one when the reply
// comes (Self's resume holds that state), resumes the script at the ask:
// the same question takes its reply without being asked again, and the
// script goes on. The branch holds the commits of both.
func TestScriptParksAndResumes(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	brief := "#!galley-script\ncommit before.txt one\nask Which API? :: v1 or v2?\ncommit after.txt two\ndone succeeded resumed"
	park := []string{"GALLEY_PARK_AFTER=1s"}
	self := workerapi.Self{Handle: "w-1", Run: "run-1", Task: "issue-195", Role: "station-cook", Brief: brief, Branch: testBranch,
		Agent: protocol.AgentSelection{Agent: "script"}, AgentUID: workerapi.AgentUIDBase + rand.Uint32N(workerapi.AgentUIDEnd-workerapi.AgentUIDBase)}
	f := fakeapi.New(self, testToken)
	t.Cleanup(f.Close)
	p := startHarness(t, f, procOpts{env: park})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("the parking harness's exit code %d", code)
	}
	s := f.Snapshot()
	var req *workerapi.ParkRequest
	var question string
	for _, c := range s.Calls {
		if c.Park != nil {
			req = c.Park
		}
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			question = c.PostID
		}
	}
	if req == nil || req.Parking != 1 {
		t.Fatalf("no parking reported: %+v", s.Calls)
	}
	if s.Count(workerapi.PathExited) != 0 || s.State != protocol.StateAwaitingReply {
		t.Fatalf("the parked worker: exits %d, state %s", s.Count(workerapi.PathExited), s.State)
	}
	if got := git(t, p.bare, "show", testBranch+":before.txt"); got != "one" {
		t.Fatalf("before.txt on the branch = %q", got)
	}

	// galley's resume: the same worker, its parking's state in Self.
	self.Parked, self.Resume = 1, &workerapi.Resume{Parking: 1, State: req.State}
	f2 := fakeapi.New(self, testToken)
	t.Cleanup(f2.Close)
	f2.Reply(question, "v2")
	p2 := startHarness(t, f2, procOpts{env: park, bare: p.bare, ws: p.ws})
	if code := p2.wait(t, ctx); code != 0 {
		t.Fatalf("the resumed harness's exit code %d", code)
	}
	s2 := f2.Snapshot()
	want := []workerapi.PostRequest{
		{Kind: protocol.MsgStatus, Body: "reply: v2"},
		{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded, Body: "resumed"},
	}
	if got := withoutClientIDs(t, s2.Posts()); !reflect.DeepEqual(got, want) {
		t.Errorf("the resumed worker's posts:\n got %+v\nwant %+v", got, want)
	}
	if got := git(t, p.bare, "show", testBranch+":after.txt"); got != "two" {
		t.Errorf("after.txt on the branch = %q", got)
	}
	if got := git(t, p.bare, "show", testBranch+":before.txt"); got != "one" {
		t.Errorf("before.txt on the branch after the resume = %q", got)
	}
}

// TestScriptParkKeepsTheWorktree: where the worktree goes with the
// compute (a snapshot store is set: a task's own storage), the parking
// saves its snapshot before it reports, and the resumed harness, in an
// empty workspace, restores it: the file the agent left uncommitted is
// there for the resumed script. A save that fails (past its limit)
// parks nothing: the worker goes on, says why, and its reply reaches the
// same agent.
func TestScriptParkKeepsTheWorktree(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	brief := "#!galley-script\ncommit before.txt one\nwrite notes.txt left uncommitted\nask Which API? :: v1 or v2?\nshow notes.txt\ndone succeeded resumed"
	snaps := t.TempDir()
	park := []string{"GALLEY_PARK_AFTER=1s", contract.EnvSnapshotDir + "=" + snaps, contract.EnvHouse + "=test-house"}
	self := workerapi.Self{Handle: "w-1", Run: "run-1", Task: "issue-30", Role: "station-cook", Brief: brief, Branch: testBranch,
		Worktree: "wt-1", ReportEvents: true, Agent: protocol.AgentSelection{Agent: "script"},
		AgentUID: workerapi.AgentUIDBase + rand.Uint32N(workerapi.AgentUIDEnd-workerapi.AgentUIDBase)}
	f := fakeapi.New(self, testToken)
	t.Cleanup(f.Close)
	p := startHarness(t, f, procOpts{env: park})
	if code := p.wait(t, ctx); code != 0 {
		t.Fatalf("the parking harness's exit code %d", code)
	}
	var req *workerapi.ParkRequest
	var question string
	for _, c := range f.Snapshot().Calls {
		if c.Park != nil {
			req = c.Park
		}
		if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
			question = c.PostID
		}
	}
	if req == nil {
		t.Fatal("no parking reported")
	}
	store, err := snapshot.NewDirStore(snaps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rc, err := store.Get(ctx, snapshot.WorktreeKey("test-house", "wt-1"))
	if err != nil {
		t.Fatalf("no worktree snapshot after the parking: %v", err)
	}
	rc.Close()

	// The resumed harness runs in a new, empty workspace, as a new task.
	self.Parked, self.Resume = 1, &workerapi.Resume{Parking: 1, State: req.State}
	f2 := fakeapi.New(self, testToken)
	t.Cleanup(f2.Close)
	f2.Reply(question, "v2")
	p2 := startHarness(t, f2, procOpts{env: park, bare: p.bare})
	if code := p2.wait(t, ctx); code != 0 {
		t.Fatalf("the resumed harness's exit code %d", code)
	}
	want := []workerapi.PostRequest{
		{Kind: protocol.MsgStatus, Body: "reply: v2"},
		{Kind: protocol.MsgStatus, Body: "show notes.txt: left uncommitted"},
		{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded, Body: "resumed"},
	}
	if got := withoutClientIDs(t, f2.Snapshot().Posts()); !reflect.DeepEqual(got, want) {
		t.Errorf("the resumed worker's posts:\n got %+v\nwant %+v", got, want)
	}

	t.Run("a failed save parks nothing", func(t *testing.T) {
		self.Parked, self.Resume = 0, nil
		f := fakeapi.New(self, testToken)
		t.Cleanup(f.Close)
		tight := append(park[:2:2], contract.EnvHouse+"=test-house", contract.EnvSnapshotMaxEntries+"=1")
		p := startHarness(t, f, procOpts{env: tight})
		s, err := f.Wait(ctx, func(s fakeapi.Snapshot) bool {
			for _, ev := range s.Events {
				if ev.Event == workerapi.EventError && strings.Contains(ev.Text, "worktree's snapshot could not be saved") {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatalf("no error event of the failed save: %v", err)
		}
		for _, c := range s.Calls {
			if c.Post != nil && c.Post.Kind == protocol.MsgQuestion {
				f.Reply(c.PostID, "v1")
			}
		}
		if code := p.wait(t, ctx); code != 0 {
			t.Fatalf("the harness's exit code %d", code)
		}
		s = f.Snapshot()
		if n := s.Count(workerapi.PathPark); n != 0 {
			t.Errorf("%d parking reports after a failed save, want none", n)
		}
		if posts := withoutClientIDs(t, s.Posts()); len(posts) < 2 || posts[1].Body != "reply: v1" {
			t.Errorf("the agent that was not parked did not take its reply: %+v", posts)
		}
	})
}
