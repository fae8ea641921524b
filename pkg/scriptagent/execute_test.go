package scriptagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/harness"
)

// fakeTools records calls and answers ask and wait_message; fail names a
// tool that answers a tool error.
type fakeTools struct {
	calls []string
	fail  string
}

func (f *fakeTools) Call(_ context.Context, name string, args map[string]any) (string, error) {
	f.calls = append(f.calls, fmt.Sprintf("%s %v", name, args))
	switch {
	case name == f.fail:
		return "", errors.New("tool error")
	case name == harness.ToolAsk:
		return "use v2", nil
	case name == harness.ToolWaitMessage:
		return "rebase first", nil
	}
	return "ok", nil
}

type commitCall struct{ dir, path, content, message string }

func TestExecute(t *testing.T) {
	tests := []struct {
		name    string
		brief   string
		fail    string
		code    int
		calls   []string
		commits []commitCall
		last    string // the last event's type
	}{
		{
			name:  "status, heartbeat, escalate, usage, done",
			brief: "#!galley-script\nstatus working\nheartbeat\nescalate Blocked :: red build\nusage 10 20 30\nusage 1 2\ndone succeeded all good",
			calls: []string{
				"post_status map[body:working]",
				"heartbeat map[]",
				"escalate map[body:red build subject:Blocked]",
				"report_usage map[cost:30 input:10 output:20]",
				"report_usage map[input:1 output:2]",
				"finish map[body:all good outcome:succeeded]",
			},
			last: "finished",
		},
		{
			name:  "ask posts the reply as status",
			brief: "#!galley-script\nask Which API? :: v1 or v2?\ndone failed",
			calls: []string{
				"ask_coordinator map[body:v1 or v2? subject:Which API?]",
				"post_status map[body:reply: use v2]",
				"finish map[body: outcome:failed]",
			},
			last: "finished",
		},
		{
			name:  "wait-message posts the message as status",
			brief: "#!galley-script\nwait-message\ndone cancelled",
			calls: []string{
				"wait_message map[]",
				"post_status map[body:message: rebase first]",
				"finish map[body: outcome:cancelled]",
			},
			last: "finished",
		},
		{
			name:    "commit goes through the workspace",
			brief:   "#!galley-script\nsleep 1ms\ncommit docs/x.md hello world\ndone succeeded",
			calls:   []string{"finish map[body: outcome:succeeded]"},
			commits: []commitCall{{"/ws", "docs/x.md", "hello world", "galley script: write docs/x.md"}},
			last:    "finished",
		},
		{
			name:  "exit reports nothing",
			brief: "#!galley-script\nstatus bye\nexit 3\nstatus never",
			code:  3,
			calls: []string{"post_status map[body:bye]"},
			last:  "exit",
		},
		{
			name:  "a script that ends reports nothing",
			brief: "#!galley-script\nstatus only",
			calls: []string{"post_status map[body:only]"},
			last:  "end",
		},
		{
			name:  "a malformed line escalates and fails before any directive",
			brief: "#!galley-script\nstatus first\nfly away\nstatus never",
			calls: []string{
				`escalate map[body:line 3 "fly away": unknown directive "fly" subject:malformed script directive]`,
				"finish map[body:malformed script directive at line 3 outcome:failed]",
			},
			last: "finished",
		},
		{
			name:  "a failed directive escalates and fails",
			brief: "#!galley-script\nstatus a\nheartbeat\nstatus never",
			fail:  harness.ToolHeartbeat,
			calls: []string{
				"post_status map[body:a]",
				"heartbeat map[]",
				"escalate map[body:line 3 (heartbeat): tool error subject:script directive failed]",
				"finish map[body:script directive failed at line 3 outcome:failed]",
			},
			last: "finished",
		},
		{
			name:  "a failure that cannot be reported exits 1",
			brief: "#!galley-script\nescalate a :: b",
			fail:  harness.ToolEscalate,
			code:  1,
			calls: []string{
				"escalate map[body:b subject:a]",
				"escalate map[body:line 2 (escalate): tool error subject:script directive failed]",
			},
			last: "failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tools := &fakeTools{fail: tt.fail}
			var commits []commitCall
			commit := func(_ context.Context, dir, path, content, message string) error {
				commits = append(commits, commitCall{dir, path, content, message})
				return nil
			}
			var out bytes.Buffer
			code, _ := Execute(context.Background(), tools, tt.brief, "/ws", &out, commit)
			if code != tt.code {
				t.Errorf("code = %d, want %d", code, tt.code)
			}
			if !reflect.DeepEqual(tools.calls, tt.calls) {
				t.Errorf("calls:\n got %q\nwant %q", tools.calls, tt.calls)
			}
			if !reflect.DeepEqual(commits, tt.commits) {
				t.Errorf("commits = %+v, want %+v", commits, tt.commits)
			}
			events := decodeEvents(t, &out)
			if events[0]["type"] != harness.EventStarted || events[0]["mode"] != "script" {
				t.Errorf("first event = %v, want started", events[0])
			}
			if got := events[len(events)-1]["type"]; got != tt.last {
				t.Errorf("last event = %v, want %s", got, tt.last)
			}
		})
	}
}

func TestExecuteIdleUntilStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tools := &fakeTools{}
	var out bytes.Buffer
	done := make(chan int)
	go func() {
		code, _ := Execute(ctx, tools, "Fix the flaky test.", "/ws", &out, nil)
		done <- code
	}()
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("code = %d", code)
	}
	if len(tools.calls) != 0 {
		t.Errorf("an idle agent called %v", tools.calls)
	}
	if ev := decodeEvents(t, &out); len(ev) != 1 || ev[0]["type"] != harness.EventStarted || ev[0]["mode"] != "idle" {
		t.Errorf("events = %v", ev)
	}
}

func decodeEvents(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var events []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("event %q: %v", line, err)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	return events
}

// write leaves a file uncommitted (its folders made); show reports a
// file's content, or that it is missing.
func TestWriteAndShow(t *testing.T) {
	dir := t.TempDir()
	tools := &fakeTools{}
	committed := false
	commit := func(context.Context, string, string, string, string) error { committed = true; return nil }
	brief := "#!galley-script\nwrite notes/todo.txt left for later\nshow notes/todo.txt\nshow absent.txt\ndone succeeded"
	code, err := Execute(context.Background(), tools, brief, dir, &bytes.Buffer{}, commit)
	if err != nil || code != 0 {
		t.Fatalf("Execute: %d %v", code, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "notes", "todo.txt")); err != nil || string(b) != "left for later" {
		t.Fatalf("the written file: %q %v", b, err)
	}
	if committed {
		t.Error("write committed")
	}
	want := []string{
		"post_status map[body:show notes/todo.txt: left for later]",
		"post_status map[body:show absent.txt: missing]",
		"finish map[body: outcome:succeeded]",
	}
	if !reflect.DeepEqual(tools.calls, want) {
		t.Errorf("calls %v, want %v", tools.calls, want)
	}
	// A link out of the workspace is not followed.
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	tools = &fakeTools{}
	_, _ = Execute(context.Background(), tools, "#!galley-script\nwrite out/x escaped", dir, &bytes.Buffer{}, commit)
	if len(tools.calls) == 0 || !strings.HasPrefix(tools.calls[0], "escalate map[body:line 2 (write): ") {
		t.Errorf("a write through a link out of the workspace: calls %v, want the directive's failure escalated", tools.calls)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("the write went through the link")
	}
}
