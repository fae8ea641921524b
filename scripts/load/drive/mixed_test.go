package drive

import (
	"net/http"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
)

// TestExpectedPostsOnlyAccepted: a crasher's scripted status is expected
// (and its loss flagged) only when its end shows the script ran past the
// post; one whose post failed under faults, and which ended through the
// script's failure path, expects nothing, however late an empty answer
// comes.
func TestExpectedPostsOnlyAccepted(t *testing.T) {
	const run = "load-t-h0"
	ref := protocol.Resource{Kind: protocol.KindWorker, Backend: "galley", Handle: "w-1"}
	exited := service.AgentExitedBody(3) + ": its stderr ended with:\nscript-agent: exit 3" // as the harness reports its exit
	failed := "script directive failed at line 2"
	delivered := func(rows ...protocol.MailMessage) []history.Op {
		ms := int64(1000)
		call := protocol.MailboxCall{Run: run, Coordinator: run + "-c1", WaitMs: &ms}
		return []history.Op{
			{Client: call.Coordinator, Route: history.Await, Call: 10, Return: 20, Body: mustJSON(call), Status: http.StatusOK,
				Answer: mustJSON(protocol.MailboxAnswer{Status: protocol.MailDelivery, Delivery: &protocol.Delivery{ID: "d-1", Messages: rows}})},
			{Client: call.Coordinator, Route: history.Acknowledge, Call: 30, Return: 40, Body: mustJSON(protocol.MailboxCall{Run: run, Coordinator: call.Coordinator, Delivery: "d-1"}), Status: http.StatusOK,
				Answer: mustJSON(protocol.MailboxAnswer{Status: protocol.MailEmpty})},
		}
	}
	start := protocol.MailMessage{ID: "m-1", Kind: protocol.MsgStatus, Worker: &ref, Body: run + "-launch-1 start"}
	escalation := protocol.MailMessage{ID: "m-2", Kind: protocol.MsgEscalation, Worker: &ref, Subject: "script directive failed",
		Body: "line 2 (status): post_status: the worker's post failed"}
	done := func(body string) protocol.MailMessage {
		return protocol.MailMessage{ID: "m-3", Kind: protocol.MsgWorkerDone, Worker: &ref, Outcome: protocol.OutcomeFailed, Body: body}
	}
	for _, tc := range []struct {
		name     string
		doneBody string
		rows     []protocol.MailMessage
		expected int  // synthesized posts
		lost     bool // a message-lost violation once a later read answers empty
	}{
		{"posted and delivered", exited, []protocol.MailMessage{start, done(exited)}, 1, false},
		{"posted, exited, never delivered", exited, []protocol.MailMessage{done(exited)}, 1, true},
		{"post failed, script failed", failed, []protocol.MailMessage{escalation, done(failed)}, 0, false},
		{"post failed, escalation failed too", service.AgentExitedBody(1), []protocol.MailMessage{done(service.AgentExitedBody(1))}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &mixed{ws: []*worker{{kind: kindCrasher, key: run + "-launch-1", tag: run + "-launch-1", handle: ref.Handle, launchOp: 1,
				doneSeen: true, settled: true, outcome: protocol.OutcomeFailed, doneBody: tc.doneBody}}}
			ops := delivered(tc.rows...)
			exp := m.expectedPosts(ops)
			if len(exp) != tc.expected {
				t.Errorf("expectedPosts = %d posts, want %d", len(exp), tc.expected)
			}
			ops = append(ops, exp...)
			// The audit's read, later: it answers empty.
			later := protocol.MailboxCall{Run: run, Coordinator: run + "-c1"}
			ops = append(ops, history.Op{Client: "audit", Route: history.Next, Call: 100, Return: 110, Body: mustJSON(later), Status: http.StatusOK,
				Answer: mustJSON(protocol.MailboxAnswer{Status: protocol.MailEmpty})})
			for i := range ops {
				ops[i].ID = i
			}
			rep := history.Check(ops, history.Options{})
			var lost []string
			for _, v := range rep.Violations {
				if v.Invariant == "message-lost" {
					lost = append(lost, v.String())
				}
			}
			if got := len(lost) > 0; got != tc.lost {
				t.Errorf("message-lost = %v, want %v (%s)", got, tc.lost, strings.Join(lost, "; "))
			}
		})
	}
}
