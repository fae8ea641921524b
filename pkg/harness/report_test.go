package harness

import (
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/workerapi"
)

// TestToolEventRedacted: a tool call a driver reports (its arguments as
// the agent's stream gave them, up to 1 KiB) reaches the event log with
// every secret the harness knows replaced before the arguments are cut,
// so no part of a secret is left where the cut falls.
func TestToolEventRedacted(t *testing.T) {
	const key = "sk-ant-FAKE0123456789abcdefSECRET"
	h := &harness{}
	h.rep = &reporter{h: h, secrets: []string{key}}
	var te ToolEvents = events{h}
	te.Tool("Bash", `{"command":"curl -H 'x-api-key: `+key+`' https://example.test/`+strings.Repeat("x", 300)+`"}`, 13)
	// The key straddles the 120-byte cut.
	te.Tool("github/search_code", strings.Repeat("a", 110)+key, -1)
	q := h.rep.q
	if len(q) != 2 {
		t.Fatalf("events = %+v", q)
	}
	for _, e := range q {
		args := e.Fields["args"]
		if e.Event != workerapi.EventTool || strings.Contains(args, key[:8]) || len(args) > 120+len("…") {
			t.Errorf("event %+v", e)
		}
	}
	if f := q[0].Fields; f["tool"] != "Bash" || f["resultBytes"] != "13" || !strings.Contains(f["args"], "x-api-key: [redacted]") {
		t.Errorf("fields = %v", f)
	}
	if f := q[1].Fields; f["tool"] != "github/search_code" || f["resultBytes"] != "" {
		t.Errorf("fields = %v", f)
	}
}

// TestReportQueueBounded: events the agent's calls make while galley does
// not take them (its sends failing or slow) wait in a queue of at most
// reportQueue, each cut short; later ones are dropped, and a tool call's
// arguments are cut before they are encoded.
func TestReportQueueBounded(t *testing.T) {
	r := &reporter{wake: make(chan struct{}, 1)} // nothing sends: the queue only fills
	long := strings.Repeat("x", maxText)
	for range 4 * reportQueue {
		r.report(workerapi.EventTool, long, "tool", ToolStatus, "args", toolArgs(statusArgs{Body: long}))
	}
	if len(r.q) != reportQueue {
		t.Fatalf("%d events queued, want at most %d", len(r.q), reportQueue)
	}
	for _, e := range r.q {
		if len(e.Text) > 240+len("…") || len(e.Fields["args"]) > 120+len("…") {
			t.Fatalf("an event of %d bytes of text and %d of arguments", len(e.Text), len(e.Fields["args"]))
		}
	}
	if a := toolArgs(askArgs{Subject: long, Body: long}); len(a) > 2*1024+64 {
		t.Fatalf("a call's arguments encode to %d bytes before the event cuts them", len(a))
	}
}

// TestReporterRedactsEverySecret: the reporter is redacted of the one list
// of the harness's secrets, the egress service's credential among them.
func TestReporterRedactsEverySecret(t *testing.T) {
	h := &harness{cfg: Config{Token: "worker-token-0123456789", GitCredential: "git-credential-0123456789",
		AnthropicKey: "sk-ant-0123456789abcdef", OpenAIKey: "sk-openai-0123456789", EgressSecret: "egress-secret-0123456789"}}
	r := newReporter(h)
	defer r.close()
	for _, secret := range h.secrets() {
		if secret == "" {
			continue
		}
		if got := r.redact("it was " + secret + "."); got != "it was "+redacted+"." {
			t.Errorf("redacted to %q", got)
		}
	}
}
