package harness_test

import (
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// TestClaudeIdleLimit runs the stand-in claude, which aborts a galley tool
// call silent for its idle limit as the real one does (lowered here to 1 s
// from 300 s), through a question whose reply comes after that limit:
//   - with the harness's progress notifications the call outlives the limit
//     and its result is the reply;
//   - without them (progress every hour) claude aborts the call and ends its
//     turn, and the reply, when it comes, still reaches the agent: as the
//     prompt of its next turn.
func TestClaudeIdleLimit(t *testing.T) {
	// After the question the kept call posts its result; the aborted one
	// makes no galley call, so the late reply can only come as the next
	// turn's prompt.
	script := func(afterAsk string) string {
		return strings.Join([]string{
			standin.Shebang,
			`tool ask_coordinator {"subject":"Which API?","body":"v1 or v2?"}`,
			afterAsk,
			"---",
			`tool post_status {"body":"turn 2: $PROMPT"}`,
			`tool finish {"outcome":"succeeded","body":"done"}`,
		}, "\n")
	}
	for _, tc := range []struct {
		name, progress string
		kept           bool
	}{
		{"progress keeps the call", "200ms", true},
		{"silent call aborted, reply delivered next turn", "1h", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sec := newECSSecrets(t)
			brief := script(`tool post_status {"body":"after the question: $LAST"}`)
			if !tc.kept {
				brief = script("text the call ended: $LAST")
			}
			f := fakeapi.New(workerapi.Self{Handle: "w-1", Run: "run-1", Brief: brief, Branch: testBranch,
				Agent: protocol.AgentSelection{Agent: "claude"}}, testToken)
			t.Cleanup(f.Close)
			p := startECSHarness(t, f, sec, "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT=1000", "GALLEY_MCP_PROGRESS_INTERVAL="+tc.progress)
			s := waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool { return s.State == protocol.StateAwaitingReply })
			question := s.Calls[len(s.Calls)-1].PostID
			if tc.kept {
				// The coordinator answers after claude's idle limit (and its
				// check interval): the wait is the scenario, not an assertion.
				time.Sleep(2500 * time.Millisecond)
				f.Reply(question, "v2, please")
				waitFor(t, ctx, f, "the end of turn 1", func(s fakeapi.Snapshot) bool { return hasPost(s, "ended turn 1 without calling finish") })
				f.Message("go on")
			} else {
				// The reply comes once the harness saw the call end without it.
				for !strings.Contains(p.stderr.String(), "the reply will come as a message") {
					select {
					case <-ctx.Done():
						t.Fatal("claude never abandoned the silent call")
					case <-time.After(20 * time.Millisecond):
					}
				}
				f.Reply(question, "v2, please")
			}
			if code := p.wait(t, ctx); code != 0 {
				t.Fatalf("harness exit code %d", code)
			}
			s = f.Snapshot()
			if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeSucceeded {
				t.Fatalf("state %s/%s", s.State, s.Outcome)
			}
			if tc.kept && (!hasPost(s, "after the question: v2, please") || !hasPost(s, "turn 2: go on")) {
				t.Errorf("the reply was not the call's result: %+v", s.Posts())
			}
			if !tc.kept && !hasPost(s, "turn 2: Reply to your question "+question) {
				t.Errorf("the late reply did not reach the agent as its next turn: %+v", s.Posts())
			}
		})
	}
}

func hasPost(s fakeapi.Snapshot, part string) bool {
	for _, p := range s.Posts() {
		if strings.Contains(p.Body, part) {
			return true
		}
	}
	return false
}
