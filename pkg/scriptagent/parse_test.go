package scriptagent

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func ptr(v int64) *int64 { return &v }

func TestIsScript(t *testing.T) {
	tests := []struct {
		brief string
		want  bool
	}{
		{"#!galley-script\nstatus hi", true},
		{"#!galley-script", true},
		{"#!galley-script\r\nstatus hi", true},
		{"#!galley-script  \nstatus hi", true},
		{"Fix the flaky test.", false},
		{"", false},
		{" #!galley-script\nstatus hi", false},
		{"\n#!galley-script\nstatus hi", false},
		{"#!galley-scripts\nstatus hi", false},
	}
	for _, tt := range tests {
		if got := IsScript(tt.brief); got != tt.want {
			t.Errorf("IsScript(%q) = %v, want %v", tt.brief, got, tt.want)
		}
	}
}

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		line string
		want Directive
	}{
		{"status hello world", Directive{Op: OpStatus, Text: "hello world"}},
		{"status  two  spaces", Directive{Op: OpStatus, Text: " two  spaces"}},
		{"heartbeat", Directive{Op: OpHeartbeat}},
		{"ask Which API? :: v1 or v2?", Directive{Op: OpAsk, Subject: "Which API?", Body: "v1 or v2?"}},
		{"ask a :: b :: c", Directive{Op: OpAsk, Subject: "a", Body: "b :: c"}},
		{"escalate Blocked :: the build is red", Directive{Op: OpEscalate, Subject: "Blocked", Body: "the build is red"}},
		{"wait-message", Directive{Op: OpWaitMessage}},
		{"sleep 1.5s", Directive{Op: OpSleep, Duration: 1500 * time.Millisecond}},
		{"sleep 0s", Directive{Op: OpSleep}},
		{"commit notes/a.txt hello there", Directive{Op: OpCommit, Path: "notes/a.txt", Content: "hello there"}},
		{"usage 1200 300", Directive{Op: OpUsage, Input: 1200, Output: 300}},
		{"usage 1200 300 51000", Directive{Op: OpUsage, Input: 1200, Output: 300, Cost: ptr(51000)}},
		{"done succeeded", Directive{Op: OpDone, Outcome: "succeeded"}},
		{"done failed it broke badly", Directive{Op: OpDone, Outcome: "failed", Body: "it broke badly"}},
		{"done cancelled", Directive{Op: OpDone, Outcome: "cancelled"}},
		{"exit 3", Directive{Op: OpExit, Code: 3}},
		{"exit 0", Directive{Op: OpExit}},
	}
	for _, tt := range tests {
		got, err := Parse(Shebang + "\n" + tt.line)
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.line, err)
			continue
		}
		tt.want.Line = 2
		if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
}

func TestParseMalformed(t *testing.T) {
	tests := []struct {
		line   string
		reason string // a part of the reason
	}{
		{"dance", `unknown directive "dance"`},
		{"Status hi", "unknown directive"},
		{"status", "needs text"},
		{"heartbeat now", "takes no arguments"},
		{"wait-message please", "takes no arguments"},
		{"ask no separator", `needs "<subject> :: <body>"`},
		{"ask  :: body", "needs a subject and a body"},
		{"ask subject ::", `needs "<subject> :: <body>"`},
		{"escalate x::y", `needs "<subject> :: <body>"`},
		{"sleep", "Go duration"},
		{"sleep 5", "Go duration"},
		{"sleep -1s", "Go duration"},
		{"commit", "needs a path and text"},
		{"commit a.txt", "needs a path and text"},
		{"commit ../escape.txt text", "inside the workspace"},
		{"commit /etc/passwd text", "inside the workspace"},
		{"commit .git/hooks/pre-push text", "inside .git"},
		{"usage 1", "usage needs"},
		{"usage 1 2 3 4", "usage needs"},
		{"usage -1 2", "non-negative"},
		{"usage a 2", "non-negative"},
		{"done", "succeeded, failed or cancelled"},
		{"done maybe", "succeeded, failed or cancelled"},
		{"exit", "exit needs"},
		{"exit 256", "exit needs"},
		{"exit -1", "exit needs"},
	}
	for _, tt := range tests {
		_, err := Parse(Shebang + "\nstatus fine\n\n" + tt.line + "\nstatus never")
		le, ok := err.(*LineError)
		if !ok {
			t.Errorf("Parse(%q) = %v, want a *LineError", tt.line, err)
			continue
		}
		if le.Line != 4 || le.Text != strings.TrimSpace(tt.line) || !strings.Contains(le.Reason, tt.reason) {
			t.Errorf("Parse(%q) = %+v, want line 4 and a reason with %q", tt.line, le, tt.reason)
		}
	}
}

func TestParseSkipsBlankAndCommentLines(t *testing.T) {
	got, err := Parse("#!galley-script\r\n\n# a comment\r\n  status one  \r\n\t\nheartbeat\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Directive{{Line: 4, Op: OpStatus, Text: "one"}, {Line: 6, Op: OpHeartbeat}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
}
