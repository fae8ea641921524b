package protocol

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

func res(kind, handle string) Resource {
	return Resource{Kind: kind, Backend: "sandbox", Handle: handle}
}

func TestEncodeReceipt(t *testing.T) {
	b, err := EncodeReceipt(Receipt{Reference: "req-17"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"reference":"req-17","created":[],"touched":[]}` {
		t.Fatalf("nil lists: %s", got)
	}
	b, err = EncodeReceipt(Receipt{Reference: "req-17", Created: []Resource{res(KindWorker, "w-17"), res(KindBranch, "kitchen/issue-195")}, Touched: []Resource{}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"reference":"req-17","created":[{"kind":"worker","backend":"sandbox","handle":"w-17"},{"kind":"branch","backend":"sandbox","handle":"kitchen/issue-195"}],"touched":[]}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}

	many := func(n int) []Resource {
		var rs []Resource
		for i := range n {
			rs = append(rs, res(KindWorktree, "wt-"+strconv.Itoa(i)))
		}
		return rs
	}
	for _, tc := range []struct {
		name string
		r    Receipt
		ok   bool
	}{
		{"16 resources", Receipt{Reference: "r", Created: many(10), Touched: many(6)}, true},
		{"17 resources", Receipt{Reference: "r", Created: many(10), Touched: many(7)}, false},
		{"17 created", Receipt{Reference: "r", Created: many(17)}, false},
		{"no reference", Receipt{Created: many(1)}, false},
		{"reference with space", Receipt{Reference: "r 1"}, false},
		{"bad kind", Receipt{Reference: "r", Touched: []Resource{res("pod", "p")}}, false},
		{"bad backend", Receipt{Reference: "r", Touched: []Resource{{Kind: KindWorker, Backend: "", Handle: "h"}}}, false},
		{"bad handle", Receipt{Reference: "r", Created: []Resource{res(KindWorker, "")}}, false},
	} {
		_, err := EncodeReceipt(tc.r)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
		if err != nil && galleyerr.KindOf(err) != galleyerr.Other {
			t.Errorf("%s: an encoder error must be kind Other (uncertain), got %v", tc.name, galleyerr.KindOf(err))
		}
	}
}

func TestReceiptValidate(t *testing.T) {
	r := Receipt{Reference: "req-1", Created: []Resource{res(KindWorker, "w")}, Touched: []Resource{res(KindBranch, "b")}}
	if err := r.Validate("sandbox"); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate("other"); err == nil || !strings.Contains(err.Error(), "created[0].backend") {
		t.Fatalf("foreign backend: %v", err)
	}
	r.Created[0].Backend = "other"
	r.Created = append([]Resource{res(KindWorker, "w0")}, r.Created...)
	if err := r.Validate("sandbox"); err == nil || !strings.Contains(err.Error(), "created[1].backend") {
		t.Fatalf("foreign resource: %v", err)
	}
	r = Receipt{Reference: "req-1", Touched: []Resource{res(KindTerminal, "t"), {Kind: KindWorker, Backend: "x", Handle: "w"}}}
	if err := r.Validate("sandbox"); err == nil || !strings.Contains(err.Error(), "touched[1].backend") {
		t.Fatalf("foreign touched: %v", err)
	}
}

func TestReceiptValidateFor(t *testing.T) {
	branch := "kitchen/issue-195"
	launch := WorkerEffect{Type: OpLaunch, Branch: &branch}
	plain := WorkerEffect{Type: OpLaunch}
	release := func(kind string) WorkerEffect {
		r := res(kind, "x")
		return WorkerEffect{Type: OpRelease, Resource: &r}
	}
	w, b, wt := res(KindWorker, "w"), res(KindBranch, branch), res(KindWorktree, "wt")
	for _, tc := range []struct {
		name string
		e    WorkerEffect
		r    Receipt
		ok   bool
	}{
		{"launch with branch", launch, Receipt{Created: []Resource{w, b, wt}}, true},
		{"launch without its branch", launch, Receipt{Created: []Resource{w, wt}}, false},
		{"launch with another branch", launch, Receipt{Created: []Resource{w, res(KindBranch, "main")}}, false},
		{"launch with two branches", launch, Receipt{Created: []Resource{w, b, b}}, false},
		{"launch with branch touched", launch, Receipt{Created: []Resource{w, b}, Touched: []Resource{b}}, false},
		{"launch without worker", launch, Receipt{Created: []Resource{b}}, false},
		{"launch with two workers", plain, Receipt{Created: []Resource{w, w}}, false},
		{"plain launch", plain, Receipt{Created: []Resource{w, wt}}, true},
		{"release worker", release(KindWorker), Receipt{Touched: []Resource{w}}, true},
		{"release worker naming branch", release(KindWorker), Receipt{Touched: []Resource{w, b}}, false},
		{"release worktree naming branch", release(KindWorktree), Receipt{Touched: []Resource{wt, b}}, false},
		{"release branch", release(KindBranch), Receipt{Touched: []Resource{b}}, true},
		{"cancel", WorkerEffect{Type: OpCancel}, Receipt{Touched: []Resource{w}}, true},
	} {
		if err := tc.r.ValidateFor(tc.e); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestOutcomeHelpers(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    EffectOutcome
		want string
	}{
		{"rejected", NotApplied(ReasonRejected), `{"status":"not-applied","reason":"rejected"}`},
		{"cross-house", NotApplied(ReasonCrossHouse), `{"status":"not-applied","reason":"cross-house"}`},
		{"foreign-backend", NotApplied(ReasonForeignBackend), `{"status":"not-applied","reason":"foreign-backend"}`},
		{"rate limited", RateLimited(30), `{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":30}`},
		{"rate limited without hint", RateLimited(0), `{"status":"not-applied","reason":"rate-limited"}`},
		{"rate limited negative", RateLimited(-5), `{"status":"not-applied","reason":"rate-limited"}`},
		{"unsupported", UnsupportedOutcome(CapMessaging), `{"status":"not-applied","reason":"unsupported","capability":"worker.messaging"}`},
		{"unsupported per op", UnsupportedOutcome(LookupCapability(OpCancel)), `{"status":"not-applied","reason":"unsupported","capability":"effect.lookup.cancel-worker"}`},
		{"unsupported made-up capability dropped", UnsupportedOutcome("executor.github"), `{"status":"not-applied","reason":"unsupported"}`},
		{"applied", Applied(Receipt{Reference: "r"}), `{"status":"applied","receipt":{"reference":"r","created":[],"touched":[]}}`},
	} {
		b, err := EncodeEffectOutcome(tc.o)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: %s, %v\nwant %s", tc.name, b, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		o    EffectOutcome
	}{
		{"unknown reason", NotApplied("already-exists")},
		{"empty reason", NotApplied("")},
		{"unknown status", EffectOutcome{Status: "done"}},
		{"applied without receipt", EffectOutcome{Status: StatusApplied}},
		{"applied with reason", EffectOutcome{Status: StatusApplied, Receipt: &Receipt{Reference: "r"}, Reason: ReasonRejected}},
		{"not applied with receipt", EffectOutcome{Status: StatusNotApplied, Reason: ReasonRejected, Receipt: &Receipt{Reference: "r"}}},
		{"retry on rejected", EffectOutcome{Status: StatusNotApplied, Reason: ReasonRejected, RetryAfterSeconds: 3}},
		{"capability on rejected", EffectOutcome{Status: StatusNotApplied, Reason: ReasonRejected, Capability: CapCancel}},
		{"made-up capability", EffectOutcome{Status: StatusNotApplied, Reason: ReasonUnsupported, Capability: "x.y"}},
		{"receipt over 16", Applied(Receipt{Reference: "r", Created: make([]Resource, 17)})},
	} {
		if _, err := EncodeEffectOutcome(tc.o); err == nil || galleyerr.KindOf(err) != galleyerr.Other {
			t.Errorf("%s: encoded, or not kind Other: %v", tc.name, err)
		}
	}
}

func TestValidUsageReport(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name  string
		r     UsageReport
		field string // empty when valid
	}{
		{"tokens", UsageReport{Source: "run-42", Tokens: &Tokens{Input: n(1200), Output: n(300)}}, ""},
		{"everything", UsageReport{Source: "s", Agent: AgentCodex, Model: "gpt-6-sol", Tokens: &Tokens{Input: n(0), Output: n(1), CacheRead: n(2), CacheWrite: n(3)}, Cost: &Cost{Amount: 51000, Basis: BasisReported}}, ""},
		{"cost only", UsageReport{Source: "s", Cost: &Cost{Amount: 0, Basis: BasisComputed}}, ""},
		{"agent only", UsageReport{Source: "s", Agent: AgentClaude}, ""},
		{"source only", UsageReport{Source: "s"}, "report"},
		{"no source", UsageReport{Agent: AgentClaude}, "report.source"},
		{"source with space", UsageReport{Source: "a b", Agent: AgentClaude}, "report.source"},
		{"other agent", UsageReport{Source: "s", Agent: "script"}, "report.agent"},
		{"bad model", UsageReport{Source: "s", Model: "-m"}, "report.model"},
		{"empty tokens", UsageReport{Source: "s", Tokens: &Tokens{}}, "report.tokens"},
		{"negative tokens", UsageReport{Source: "s", Tokens: &Tokens{CacheWrite: n(-1)}}, "report.tokens.cacheWrite"},
		{"negative cost", UsageReport{Source: "s", Cost: &Cost{Amount: -1, Basis: BasisReported}}, "report.cost.amount"},
		{"bad basis", UsageReport{Source: "s", Cost: &Cost{Amount: 1, Basis: "estimated"}}, "report.cost.basis"},
		{"empty basis", UsageReport{Source: "s", Cost: &Cost{Amount: 1}}, "report.cost.basis"},
	} {
		err := ValidUsageReport(tc.r)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if galleyerr.KindOf(err) != galleyerr.Invalid || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%s: %v, want Invalid naming %s", tc.name, err, tc.field)
		}
	}
}

// TestEncodersRoundTrip encodes every answer and reads it back with the
// client-side parser: what galley sends, the client reads unchanged.
func TestEncodersRoundTrip(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	w := res(KindWorker, "w-17")
	receipt := Receipt{Reference: "req-17", Created: []Resource{w, res(KindBranch, "kitchen/x")}, Touched: []Resource{}}
	owner := "k-8d2f"
	check := func(name string, b []byte, err error, parse func([]byte) (any, error), want any) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: encode: %v", name, err)
			return
		}
		got, err := parse(b)
		if err != nil {
			t.Errorf("%s: parse %s: %v", name, b, err)
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %#v\nwant %#v", name, got, want)
		}
	}
	outcome := func(b []byte) (any, error) { return ParseEffectOutcome(b, "sandbox") }
	for _, o := range []EffectOutcome{Applied(receipt), RateLimited(9), UnsupportedOutcome(CapCancel), NotApplied(ReasonForeignBackend)} {
		b, err := EncodeEffectOutcome(o)
		check("outcome "+o.Status+o.Reason, b, err, outcome, o)
	}
	lookup := func(b []byte) (any, error) { return ParseLookupAnswer(b, "sandbox") }
	for _, a := range []LookupAnswer{{Status: StatusApplied, Receipt: &receipt}, {Status: StatusAbsent}, {Status: StatusUnknown}} {
		b, err := EncodeLookupAnswer(a)
		check("lookup "+a.Status, b, err, lookup, a)
	}
	observe := func(b []byte) (any, error) { return ParseObservation(b) }
	for _, o := range []Observation{{State: StateStarting}, {State: StateAwaitingReply}, {State: StateSettled, Outcome: OutcomeCancelled}, {State: StateMissing}} {
		b, err := EncodeObservation(o)
		check("observe "+o.State, b, err, observe, o)
	}
	inventory := func(b []byte) (any, error) { return ParseInventory(b) }
	inv := Inventory{Resources: []InventoryRow{
		{Resource: w, Owner: &owner, Liveness: LivenessLive},
		{Resource: res(KindBranch, "kitchen/x"), Owner: nil, Liveness: LivenessUnverifiable},
	}}
	b, err := EncodeInventory(inv)
	check("inventory", b, err, inventory, inv)
	b, err = EncodeInventory(Inventory{})
	check("empty inventory", b, err, inventory, Inventory{Resources: []InventoryRow{}})
	usage := func(b []byte) (any, error) { return ParseUsageAnswer(b) }
	for _, u := range []UsageAnswer{
		{Status: UsageNone},
		{Status: UsageReported, Report: &UsageReport{Source: "run-42", Agent: AgentCodex, Model: "gpt-6-sol",
			Tokens: &Tokens{Input: n(1200), Output: n(300)}, Cost: &Cost{Amount: 51000, Basis: BasisReported}}},
		{Status: UsageReported, Report: &UsageReport{Source: "s", Tokens: &Tokens{CacheWrite: n(0)}}},
	} {
		b, err := EncodeUsageAnswer(u)
		check("usage "+u.Status, b, err, usage, u)
	}
	mailbox := func(b []byte) (any, error) { return ParseMailboxAnswer(b) }
	del := MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d-4", Unreadable: 1, Messages: []MailMessage{
		{ID: "msg-3", Kind: MsgQuestion, Worker: &w, Subject: "Which API?", Body: "v1 or v2?"},
		{ID: "msg-4", Kind: MsgWorkerDone, Worker: &w, Outcome: OutcomeSucceeded},
		{ID: "msg-5", Kind: MsgHeartbeat, Worker: &w},
	}}}
	for _, a := range []MailboxAnswer{{Status: MailEmpty}, {Status: MailFenced}, del,
		{Status: MailDelivery, Delivery: &Delivery{ID: "d-5", Messages: []MailMessage{}}}} {
		b, err := EncodeMailboxAnswer(a)
		check("mailbox "+a.Status, b, err, mailbox, a)
	}
	b, err = EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d-6"}})
	if err != nil || string(b) != `{"status":"delivery","delivery":{"id":"d-6","messages":[],"unreadable":0}}` {
		t.Errorf("nil messages: %s, %v", b, err)
	}
	for _, fenced := range []bool{false, true} {
		got, err := ParseAdoptAnswer(EncodeAdoptAnswer(fenced))
		if err != nil || got != fenced {
			t.Errorf("adopt %v: %v, %v", fenced, got, err)
		}
	}
	descriptor := func(b []byte) (any, error) { return ParseDescriptor(b) }
	caps := map[string]string{}
	for _, c := range Capabilities {
		caps[c] = SupportSupported
	}
	caps[CapUsageAttribution] = SupportPartial
	d := Descriptor{Backend: "sandbox", House: "origin89", Capabilities: caps,
		WorkerSelection: &WorkerSelection{Families: []string{AgentClaude, AgentCodex}, Model: true, Effort: EffortWithModel}}
	b, err = EncodeDescriptor(d)
	check("descriptor", b, err, descriptor, d)
	d.WorkerSelection = nil
	b, err = EncodeDescriptor(d)
	check("descriptor without selection", b, err, descriptor, d)
}

func TestEncodersRefuse(t *testing.T) {
	w := res(KindWorker, "w")
	wt := res(KindWorktree, "wt")
	bad := "a b"
	for _, tc := range []struct {
		name string
		enc  func() ([]byte, error)
	}{
		{"lookup applied without receipt", func() ([]byte, error) { return EncodeLookupAnswer(LookupAnswer{Status: StatusApplied}) }},
		{"lookup absent with receipt", func() ([]byte, error) {
			return EncodeLookupAnswer(LookupAnswer{Status: StatusAbsent, Receipt: &Receipt{Reference: "r"}})
		}},
		{"lookup not-applied", func() ([]byte, error) { return EncodeLookupAnswer(LookupAnswer{Status: StatusNotApplied}) }},
		{"observe unknown state", func() ([]byte, error) { return EncodeObservation(Observation{State: "running"}) }},
		{"observe settled without outcome", func() ([]byte, error) { return EncodeObservation(Observation{State: StateSettled}) }},
		{"observe ready with outcome", func() ([]byte, error) {
			return EncodeObservation(Observation{State: StateReady, Outcome: OutcomeSucceeded})
		}},
		{"inventory 1025 rows", func() ([]byte, error) {
			return EncodeInventory(Inventory{Resources: make([]InventoryRow, 1025)})
		}},
		{"inventory bad liveness", func() ([]byte, error) {
			return EncodeInventory(Inventory{Resources: []InventoryRow{{Resource: w, Liveness: "running"}}})
		}},
		{"inventory bad owner", func() ([]byte, error) {
			return EncodeInventory(Inventory{Resources: []InventoryRow{{Resource: w, Owner: &bad, Liveness: LivenessLive}}})
		}},
		{"usage source only", func() ([]byte, error) {
			return EncodeUsageAnswer(UsageAnswer{Status: UsageReported, Report: &UsageReport{Source: "s"}})
		}},
		{"usage none with report", func() ([]byte, error) {
			return EncodeUsageAnswer(UsageAnswer{Status: UsageNone, Report: &UsageReport{Source: "s", Agent: AgentCodex}})
		}},
		{"usage reported without report", func() ([]byte, error) { return EncodeUsageAnswer(UsageAnswer{Status: UsageReported}) }},
		{"mailbox row without worker", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Messages: []MailMessage{{ID: "m", Kind: MsgStatus}}}})
		}},
		{"mailbox row from a worktree", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Messages: []MailMessage{{ID: "m", Kind: MsgStatus, Worker: &wt}}}})
		}},
		{"mailbox outcome on a question", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Messages: []MailMessage{{ID: "m", Kind: MsgQuestion, Worker: &w, Outcome: OutcomeFailed}}}})
		}},
		{"mailbox unknown kind", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Messages: []MailMessage{{ID: "m", Kind: "note", Worker: &w}}}})
		}},
		{"mailbox body NUL", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Messages: []MailMessage{{ID: "m", Kind: MsgStatus, Worker: &w, Body: "\x00"}}}})
		}},
		{"mailbox negative unreadable", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{ID: "d", Unreadable: -1}})
		}},
		{"mailbox delivery without id", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailDelivery, Delivery: &Delivery{}})
		}},
		{"mailbox empty with delivery", func() ([]byte, error) {
			return EncodeMailboxAnswer(MailboxAnswer{Status: MailEmpty, Delivery: &Delivery{ID: "d"}})
		}},
		{"descriptor bad support", func() ([]byte, error) {
			return EncodeDescriptor(Descriptor{Backend: "b", House: "h", Capabilities: map[string]string{CapCancel: "yes"}})
		}},
		{"descriptor bad house", func() ([]byte, error) { return EncodeDescriptor(Descriptor{Backend: "b", House: "h.1"}) }},
		{"descriptor bad effort", func() ([]byte, error) {
			return EncodeDescriptor(Descriptor{Backend: "b", House: "h", WorkerSelection: &WorkerSelection{Effort: "sometimes"}})
		}},
	} {
		if b, err := tc.enc(); err == nil || galleyerr.KindOf(err) != galleyerr.Other {
			t.Errorf("%s: %s, %v", tc.name, b, err)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s/", "\n\r\t\b\f\x00\x1f\x7f", "é🍳\u2028", "<&>"} {
		b := appendString(nil, s)
		v, err := parseJSON(b)
		if err != nil || v.kind != jString || v.s != s || v.bad {
			t.Errorf("%q encoded as %s, read back %q, %v", s, b, v.s, err)
		}
	}
	if got := string(appendString(nil, "a\xffb")); got != `"a\ufffdb"` {
		t.Errorf("invalid UTF-8 encoded as %s", got)
	}
}

func TestResourceValidate(t *testing.T) {
	for _, tc := range []struct {
		r     Resource
		field string
	}{
		{res(KindWorker, "w"), ""},
		{Resource{Kind: "vm", Backend: "b", Handle: "h"}, "resource.kind"},
		{Resource{Kind: KindWorker, Backend: "", Handle: "h"}, "resource.backend"},
		{Resource{Kind: KindWorker, Backend: "b", Handle: "h h"}, "resource.handle"},
	} {
		err := tc.r.Validate()
		if tc.field == "" && err != nil || tc.field != "" && (galleyerr.KindOf(err) != galleyerr.Invalid || !strings.Contains(err.Error(), tc.field)) {
			t.Errorf("%+v: %v", tc.r, err)
		}
	}
	for _, op := range []string{OpLaunch, OpMessage, OpReply, OpCancel, OpRelease} {
		if !IsOp(op) {
			t.Errorf("IsOp(%q) false", op)
		}
	}
	if IsOp("launch") {
		t.Error(`IsOp("launch")`)
	}
}
