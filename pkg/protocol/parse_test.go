package protocol

import (
	"fmt"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

const (
	wRes    = `{"kind":"worker","backend":"sandbox","handle":"w-17"}`
	bRes    = `{"kind":"branch","backend":"sandbox","handle":"kitchen/x"}`
	receipt = `{"reference":"req-17","created":[` + wRes + `,` + bRes + `],"touched":[]}`
)

type parseCase struct {
	body string
	kind galleyerr.Kind // accepted when it parses
}

func runParseCases(t *testing.T, parse func([]byte) error, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.body[:min(len(tc.body), 60)], func(t *testing.T) {
			wantKind(t, parse([]byte(tc.body)), tc.kind, "")
		})
	}
}

const (
	A = accepted
	I = galleyerr.Invalid
	M = galleyerr.Malformed
)

func TestParseEffectOutcome(t *testing.T) {
	resources := func(n int) string {
		var rs []string
		for i := range n {
			rs = append(rs, fmt.Sprintf(`{"kind":"worktree","backend":"sandbox","handle":"wt-%d"}`, i))
		}
		return strings.Join(rs, ",")
	}
	runParseCases(t, func(b []byte) error { _, err := ParseEffectOutcome(b, "sandbox"); return err }, []parseCase{
		{`{"status":"applied","receipt":` + receipt + `}`, A},
		{`{"status":"applied","receipt":{"reference":"r","created":[` + resources(16) + `],"touched":[]}}`, A},
		{`{"status":"applied","receipt":{"reference":"r","created":[` + resources(9) + `],"touched":[` + resources(8) + `]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[],"touched":[{"kind":"worker","backend":"other","handle":"w"}]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[],"touched":null}}`, I},
		{`{"status":"applied","receipt":{"created":[],"touched":[]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[],"touched":[],"at":1}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[{"kind":"worker","backend":"sandbox","handle":"w","x":1}],"touched":[]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[{"kind":"pod","backend":"sandbox","handle":"w"}],"touched":[]}}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":["w"],"touched":[]}}`, M},
		{`{"status":"applied","receipt":{"reference":"r","created":{},"touched":[]}}`, M},
		{`{"status":"applied"}`, I},
		{`{"status":"applied","receipt":` + receipt + `,"reason":"rejected"}`, I},
		{`{"status":"not-applied","reason":"rejected"}`, A},
		{`{"status":"not-applied","reason":"cross-house"}`, A},
		{`{"status":"not-applied","reason":"foreign-backend"}`, A},
		{`{"status":"not-applied","reason":"rate-limited"}`, A},
		{`{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":30}`, A},
		{`{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":1.5}`, M},
		{`{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":"30"}`, M},
		{`{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":-1}`, I},
		{`{"status":"not-applied","reason":"rejected","retryAfterSeconds":30}`, I},
		{`{"status":"not-applied","reason":"unsupported"}`, A},
		{`{"status":"not-applied","reason":"unsupported","capability":"worker.cancel"}`, A},
		{`{"status":"not-applied","reason":"unsupported","capability":"effect.idempotent.reply-to-worker"}`, A},
		{`{"status":"not-applied","reason":"unsupported","capability":"schedule.manage"}`, I},
		{`{"status":"not-applied","reason":"rejected","capability":"worker.cancel"}`, I},
		{`{"status":"not-applied","reason":"already-exists"}`, I},
		{`{"status":"not-applied"}`, I},
		{`{"status":"not-applied","reason":"rejected","message":"no"}`, I},
		{`{"status":"absent"}`, I},
		{`{"reason":"rejected"}`, I},
		{`{"status":1}`, M},
		{`[]`, M},
		{`not json`, M},
	})
}

func TestParseLookupAnswer(t *testing.T) {
	runParseCases(t, func(b []byte) error { _, err := ParseLookupAnswer(b, "sandbox"); return err }, []parseCase{
		{`{"status":"applied","receipt":` + receipt + `}`, A},
		{`{"status":"absent"}`, A},
		{`{"status":"unknown"}`, A},
		{`{"status":"absent","receipt":` + receipt + `}`, I},
		{`{"status":"applied"}`, I},
		{`{"status":"not-applied","reason":"rejected"}`, I},
		{`{"status":"applied","receipt":{"reference":"r","created":[{"kind":"worker","backend":"elsewhere","handle":"w"}],"touched":[]}}`, I},
		{`{}`, I},
	})
}

func TestParseObservation(t *testing.T) {
	for _, tc := range []struct {
		body  string
		kind  galleyerr.Kind
		state string
	}{
		{`{"state":"starting"}`, A, StateStarting},
		{`{"state":"ready"}`, A, StateReady},
		{`{"state":"awaiting-reply"}`, A, StateAwaitingReply},
		{`{"state":"user-takeover"}`, A, StateUserTakeover},
		{`{"state":"missing"}`, A, StateMissing},
		{`{"state":"unknown"}`, A, StateUnknown},
		{`{"state":"settled","outcome":"failed"}`, A, StateSettled},
		{`{"state":"running"}`, A, StateUnknown},
		{`{"state":"Ready"}`, A, StateUnknown},
		{`{"state":"settled"}`, I, ""},
		{`{"state":"settled","outcome":"done"}`, I, ""},
		{`{"state":"ready","outcome":"succeeded"}`, I, ""},
		{`{"state":"ready","since":1}`, I, ""},
		{`{}`, I, ""},
		{`{"state":true}`, M, ""},
	} {
		o, err := ParseObservation([]byte(tc.body))
		wantKind(t, err, tc.kind, "")
		if err == nil && o.State != tc.state {
			t.Errorf("%s: state %q, want %q", tc.body, o.State, tc.state)
		}
	}
}

func TestParseInventory(t *testing.T) {
	row := `{"resource":` + wRes + `,"owner":"k-8d2f","liveness":"live"}`
	rows := func(n int) string { return strings.TrimSuffix(strings.Repeat(row+",", n), ",") }
	runParseCases(t, func(b []byte) error { _, err := ParseInventory(b); return err }, []parseCase{
		{`{"resources":[]}`, A},
		{`{"resources":[` + row + `]}`, A},
		{`{"resources":[` + rows(1024) + `]}`, A},
		{`{"resources":[` + rows(1025) + `]}`, I},
		{`{"resources":[{"resource":` + wRes + `,"owner":null,"liveness":"exited"}]}`, A},
		{`{"resources":[{"resource":` + wRes + `,"liveness":"exited"}]}`, I},
		{`{"resources":[{"resource":` + wRes + `,"owner":"a b","liveness":"exited"}]}`, I},
		{`{"resources":[{"resource":` + wRes + `,"owner":null}]}`, I},
		{`{"resources":[{"resource":` + wRes + `,"owner":null,"liveness":"live","since":0}]}`, I},
		{`{"resources":[{"owner":null,"liveness":"live"}]}`, I},
		{`{"resources":[{"resource":` + wRes + `,"owner":1,"liveness":"live"}]}`, M},
		{`{"resources":[1]}`, M},
		{`{"resources":null}`, I},
		{`{}`, I},
		{`{"resources":[],"next":"x"}`, I},
	})
	inv, err := ParseInventory([]byte(`{"resources":[{"resource":` + wRes + `,"owner":null,"liveness":"dunno"}]}`))
	if err != nil || inv.Resources[0].Liveness != LivenessUnverifiable || inv.Resources[0].Owner != nil {
		t.Fatalf("unknown liveness: %+v, %v", inv, err)
	}
}

func TestParseUsageAnswer(t *testing.T) {
	runParseCases(t, func(b []byte) error { _, err := ParseUsageAnswer(b); return err }, []parseCase{
		{`{"status":"none"}`, A},
		{`{"status":"reported","report":{"source":"run-42","agent":"codex","model":"gpt-6-sol","tokens":{"input":1200,"output":300},"cost":{"amount":51000,"basis":"reported"}}}`, A},
		{`{"status":"reported","report":{"source":"s","tokens":{"cacheRead":5,"cacheWrite":6}}}`, A},
		{`{"status":"reported","report":{"source":"s"}}`, I},
		{`{"status":"reported","report":{"source":"s","agent":"script"}}`, I},
		{`{"status":"reported","report":{"source":"s","agent":""}}`, I},
		{`{"status":"reported","report":{"source":"s","tokens":{}}}`, I},
		{`{"status":"reported","report":{"source":"s","tokens":{"input":-1}}}`, I},
		{`{"status":"reported","report":{"source":"s","tokens":{"input":1.5}}}`, M},
		{`{"status":"reported","report":{"source":"s","tokens":{"in":1}}}`, I},
		{`{"status":"reported","report":{"source":"s","cost":{"amount":1}}}`, I},
		{`{"status":"reported","report":{"source":"s","cost":{"basis":"computed"}}}`, I},
		{`{"status":"reported","report":{"source":"s","cost":{"amount":1,"basis":"guessed"}}}`, I},
		{`{"status":"reported","report":{"source":"s","cost":{"amount":1,"basis":"computed","currency":"usd"}}}`, I},
		{`{"status":"reported","report":{"agent":"codex"}}`, I},
		{`{"status":"reported","report":{"source":"s","agent":"codex","extra":1}}`, I},
		{`{"status":"reported"}`, I},
		{`{"status":"none","report":{"source":"s","agent":"codex"}}`, I},
		{`{"status":"partial"}`, I},
	})
}

func TestParseMailboxAnswer(t *testing.T) {
	row := func(fields string) string {
		return `{"status":"delivery","delivery":{"id":"d-4","messages":[{` + fields + `}],"unreadable":0}}`
	}
	runParseCases(t, func(b []byte) error { _, err := ParseMailboxAnswer(b); return err }, []parseCase{
		{`{"status":"empty"}`, A},
		{`{"status":"fenced"}`, A},
		{`{"status":"delivery","delivery":{"id":"d-4","messages":[],"unreadable":2}}`, A},
		{row(`"id":"m","kind":"question","worker":` + wRes + `,"subject":"Which API?","body":"v1 or v2?"`), A},
		{row(`"id":"m","kind":"worker-done","worker":` + wRes + `,"outcome":"succeeded"`), A},
		{row(`"id":"m","kind":"note","worker":` + wRes), A},
		{row(`"id":"m","kind":"question"`), I},
		{row(`"id":"m","worker":` + wRes), I},
		{row(`"kind":"status","worker":` + wRes), I},
		{row(`"id":"m","kind":"status","worker":` + bRes), I},
		{row(`"id":"m","kind":"status","worker":` + wRes + `,"outcome":"failed"`), I},
		{row(`"id":"m","kind":"worker-done","worker":` + wRes + `,"outcome":"done"`), I},
		{row(`"id":"m","kind":"status","worker":` + wRes + `,"body":""`), I},
		{row(`"id":"m","kind":"status","worker":` + wRes + `,"body":"\u0000"`), I},
		{row(`"id":"m","kind":"status","worker":` + wRes + `,"at":1`), I},
		{row(`"id":"m","kind":"","worker":` + wRes), I},
		{row(`"id":"m","kind":"status","worker":"w-17"`), M},
		{`{"status":"delivery","delivery":{"id":"d-4","messages":[]}}`, I},
		{`{"status":"delivery","delivery":{"id":"d-4","unreadable":0}}`, I},
		{`{"status":"delivery","delivery":{"messages":[],"unreadable":0}}`, I},
		{`{"status":"delivery","delivery":{"id":"d-4","messages":[],"unreadable":-1}}`, I},
		{`{"status":"delivery","delivery":{"id":"d-4","messages":[]},"unreadable":0}`, I},
		{`{"status":"delivery"}`, I},
		{`{"status":"empty","delivery":null}`, I},
		{`{"status":"closed"}`, I},
	})
}

func TestParseAdoptAnswer(t *testing.T) {
	for _, tc := range []struct {
		body   string
		fenced bool
		ok     bool
	}{
		{`{}`, false, true},
		{` { } `, false, true},
		{`{"status":"fenced"}`, true, true},
		{`{"status":"adopted"}`, false, false},
		{`{"status":"fenced","by":"c2"}`, false, false},
		{`{"status":null}`, false, false},
		{`{"ok":true}`, false, false},
		{`[]`, false, false},
		{``, false, false},
		{`null`, false, false},
	} {
		fenced, err := ParseAdoptAnswer([]byte(tc.body))
		if (err == nil) != tc.ok || fenced != tc.fenced {
			t.Errorf("%q: fenced %v, err %v", tc.body, fenced, err)
		}
	}
}

func TestParseDescriptor(t *testing.T) {
	const ws = `"workerSelection":{"families":["claude","codex"],"model":true,"effort":"with-model"}`
	runParseCases(t, func(b []byte) error { _, err := ParseDescriptor(b); return err }, []parseCase{
		{`{"backend":"sandbox","house":"origin89","capabilities":{"worker.cancel":"supported","usage.attribution":"partial"},` + ws + `}`, A},
		{`{"backend":"sandbox","house":"origin89","capabilities":{}}`, A},
		{`{"backend":"sandbox","house":"origin89","capabilities":{"schedule.manage":"supported"}}`, A},
		{`{"backend":"sandbox","house":"origin89","capabilities":{"worker.cancel":"yes"}}`, I},
		{`{"backend":"sandbox","house":"origin89","capabilities":{"worker.cancel":"unsupported"}}`, I},
		{`{"backend":"sandbox","house":"origin89","capabilities":{"worker.cancel":true}}`, M},
		{`{"backend":"sandbox","house":"origin89"}`, I},
		{`{"backend":"sandbox","capabilities":{}}`, I},
		{`{"backend":"sand box","house":"h","capabilities":{}}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"version":2}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":["claude"],"model":false,"effort":"always"}}`, A},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[],"model":false,"effort":"sometimes"}}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[],"model":false}}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"model":false,"effort":"always"}}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[],"effort":"always"}}`, I},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[],"model":"yes","effort":"always"}}`, M},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[1],"model":true,"effort":"always"}}`, M},
		{`{"backend":"sandbox","house":"h","capabilities":{},"workerSelection":{"families":[],"model":true,"effort":"always","agents":[]}}`, I},
	})
}
