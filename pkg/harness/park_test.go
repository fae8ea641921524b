package harness_test

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/galley-run/galley/pkg/protocol"
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
