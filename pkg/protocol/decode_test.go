package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

const exampleCall = `{
  "run": "run-1",
  "request": {
    "house": "origin89",
    "backend": "sandbox",
    "credential": "sandbox-token",
    "task": "issue-195",
    "attempt": 1,
    "key": "k-8d2f",
    "effect": {
      "executor": "worker",
      "effect": {
        "type": "launch-worker",
        "role": "station-cook",
        "workspace": { "type": "isolated" },
        "brief": "Fix the flaky test.",
        "branch": "kitchen/issue-195",
        "agent": { "agent": "codex", "model": "gpt-6-sol" }
      }
    }
  }
}`

func TestDecodeEffectCallExample(t *testing.T) {
	c, err := DecodeEffectCall([]byte(exampleCall))
	if err != nil {
		t.Fatal(err)
	}
	want := EffectRequest{House: "origin89", Backend: "sandbox", Credential: "sandbox-token",
		Task: "issue-195", Attempt: 1, Key: "k-8d2f"}
	got := c.Request
	got.Effect = EffectTarget{}
	if c.Run != "run-1" || !reflect.DeepEqual(got, want) || c.Request.Effect.Executor != ExecutorWorker {
		t.Fatalf("decoded %+v", c)
	}
	e, err := DecodeWorkerEffect(c.Request.Effect.Effect)
	if err != nil {
		t.Fatal(err)
	}
	wantE := WorkerEffect{
		Type: OpLaunch, Role: RoleStationCook, Workspace: &Workspace{Type: WorkspaceIsolated},
		Brief: ptr("Fix the flaky test."), Branch: ptr("kitchen/issue-195"),
		Agent: &AgentSelection{Agent: AgentCodex, Model: "gpt-6-sol"},
	}
	if !reflect.DeepEqual(e, wantE) {
		t.Fatalf("effect %+v, want %+v", e, wantE)
	}
}

func TestDecodeEffectCallEnvelope(t *testing.T) {
	const (
		M = galleyerr.Malformed
		I = galleyerr.Invalid
		A = accepted
	)
	set := func(path, key string, v any) func(obj) {
		return func(m obj) { at(m, path)[key] = v }
	}
	del := func(path, key string) func(obj) {
		return func(m obj) { delete(at(m, path), key) }
	}
	for _, tc := range []struct {
		name  string
		mod   func(obj)
		kind  galleyerr.Kind
		field string
	}{
		{"valid", func(obj) {}, A, ""},
		{"extra top field", set("", "extra", 1), I, `"extra"`},
		{"extra request field", set("request", "priority", "high"), I, `"priority" in request`},
		{"extra effect target field", set("request.effect", "version", 2), I, `request.effect`},
		{"top field case", func(m obj) { m["RUN"] = m["run"]; delete(m, "run") }, I, `"RUN"`},
		{"long unknown key not echoed", set("", strings.Repeat("k", 65), 1), I, "a field"},
		{"unknown key with a space not echoed", set("", "my "+secret, 1), I, "a field"},

		{"run missing", del("", "run"), I, "run: missing"},
		{"run null", set("", "run", nil), I, "run: missing"},
		{"run empty", set("", "run", ""), I, "run"},
		{"run with space", set("", "run", "run "+secret), I, "run"},
		{"run 256", set("", "run", strings.Repeat("r", 256)), A, ""},
		{"run 257", set("", "run", strings.Repeat("r", 257)), I, "run"},
		{"run number", set("", "run", 1), M, "run"},
		{"request missing", del("", "request"), I, "request: missing"},
		{"request string", set("", "request", "x"), M, "request"},
		{"request array", set("", "request", []any{}), M, "request"},

		{"house missing", del("request", "house"), I, "request.house: missing"},
		{"house bad", set("request", "house", "origin 89"+secret), I, "request.house"},
		{"house 64", set("request", "house", strings.Repeat("h", 64)), A, ""},
		{"house 65", set("request", "house", strings.Repeat("h", 65)), I, "request.house"},
		{"house leading dash", set("request", "house", "-h"), I, "request.house"},
		{"house number", set("request", "house", 89), M, "request.house"},
		{"backend missing", del("request", "backend"), I, "request.backend"},
		{"backend dot", set("request", "backend", "a.b"), I, "request.backend"},
		{"backend bool", set("request", "backend", true), M, "request.backend"},
		{"credential missing", del("request", "credential"), I, "request.credential"},
		{"credential slash", set("request", "credential", "a/b"), I, "request.credential"},
		{"credential object", set("request", "credential", obj{}), M, "request.credential"},
		{"task missing", del("request", "task"), I, "request.task"},
		{"task empty", set("request", "task", ""), I, "request.task"},
		{"task underscore start", set("request", "task", "_t"), I, "request.task"},

		{"attempt missing", del("request", "attempt"), I, "request.attempt: missing"},
		{"attempt zero", set("request", "attempt", 0), I, "request.attempt"},
		{"attempt negative", set("request", "attempt", -1), I, "request.attempt"},
		{"attempt large", set("request", "attempt", int64(1)<<62), A, ""},
		{"attempt fraction", set("request", "attempt", 1.5), M, "request.attempt"},
		{"attempt overflow", set("request", "attempt", json.Number("9223372036854775808")), M, "request.attempt"},
		{"attempt exponent", set("request", "attempt", json.Number("1e0")), M, "request.attempt"},
		{"attempt string", set("request", "attempt", "1"), M, "request.attempt"},

		{"key missing", del("request", "key"), I, "request.key: missing"},
		{"key empty", set("request", "key", ""), I, "request.key"},
		{"key space", set("request", "key", "k "+secret), I, "request.key"},
		{"key tab", set("request", "key", "k\t1"), I, "request.key"},
		{"key non-ASCII", set("request", "key", "ké"), I, "request.key"},
		{"key DEL", set("request", "key", "k\x7f"), I, "request.key"},
		{"key 256", set("request", "key", strings.Repeat("k", 256)), A, ""},
		{"key 257", set("request", "key", strings.Repeat("k", 257)), I, "request.key"},
		{"key printable extremes", set("request", "key", "!~\"\\{}"), A, ""},
		{"key number", set("request", "key", 7), M, "request.key"},

		{"effect missing", del("request", "effect"), I, "request.effect: missing"},
		{"effect string", set("request", "effect", "worker"), M, "request.effect"},
		{"executor missing", del("request.effect", "executor"), I, "request.effect.executor: missing"},
		{"executor empty", set("request.effect", "executor", ""), I, "request.effect.executor"},
		{"executor number", set("request.effect", "executor", 1), M, "request.effect.executor"},
		{"inner effect missing", del("request.effect", "effect"), I, "request.effect.effect: missing"},
		{"other executor, any effect", func(m obj) {
			at(m, "request.effect")["executor"] = "github"
			at(m, "request.effect")["effect"] = obj{"anything": []any{1, "two"}}
		}, A, ""},
		{"worker effect left unread", set("request.effect", "effect", "not an object"), A, ""},
		{"worker effect null", set("request.effect", "effect", nil), A, ""},

		{"type error wins over an earlier rule", func(m obj) {
			m["aaa"] = 1
			m["run"] = ""
			at(m, "request")["attempt"] = "x"
		}, M, "request.attempt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := callWith(launchEffect())
			tc.mod(m)
			_, err := DecodeEffectCall(mustJSON(t, m))
			wantKind(t, err, tc.kind, tc.field)
		})
	}
}

func TestDecodeEffectCallSyntax(t *testing.T) {
	valid := string(mustJSON(t, callWith(launchEffect())))
	for _, tc := range []struct {
		name string
		body string
		kind galleyerr.Kind
	}{
		{"empty", "", galleyerr.Malformed},
		{"spaces", "  \n", galleyerr.Malformed},
		{"not JSON", "run=1", galleyerr.Malformed},
		{"truncated", valid[:len(valid)-1], galleyerr.Malformed},
		{"trailing object", valid + "{}", galleyerr.Malformed},
		{"trailing garbage", valid + " x", galleyerr.Malformed},
		{"trailing whitespace", valid + " \r\n\t", accepted},
		{"leading whitespace", "\n " + valid, accepted},
		{"byte order mark", "\ufeff" + valid, galleyerr.Malformed},
		{"array", "[" + valid + "]", galleyerr.Malformed},
		{"string", `"x"`, galleyerr.Malformed},
		{"null", "null", galleyerr.Malformed},
		{"number", "1", galleyerr.Malformed},
		{"single quotes", strings.ReplaceAll(valid, `"`, `'`), galleyerr.Malformed},
		{"trailing comma", valid[:len(valid)-1] + ",}", galleyerr.Malformed},
		{"comment", "/*x*/" + valid, galleyerr.Malformed},
		{"raw newline in string", strings.Replace(valid, "run-1", "run\n1", 1), galleyerr.Malformed},
		{"bad escape", strings.Replace(valid, "run-1", `run\x1`, 1), galleyerr.Malformed},
		{"NaN", strings.Replace(valid, `"attempt":1`, `"attempt":NaN`, 1), galleyerr.Malformed},
		{"leading zero", strings.Replace(valid, `"attempt":1`, `"attempt":01`, 1), galleyerr.Malformed},
		{"plus sign", strings.Replace(valid, `"attempt":1`, `"attempt":+1`, 1), galleyerr.Malformed},
		{"escaped key", strings.Replace(valid, `"run"`, `"r\u0075n"`, 1), accepted},
		{"duplicate key, last wins valid", strings.Replace(valid, `"run":"run-1"`, `"run":"bad run","run":"run-1"`, 1), accepted},
		{"duplicate key, last wins invalid", strings.Replace(valid, `"run":"run-1"`, `"run":"run-1","run":""`, 1), galleyerr.Invalid},
		{"deep nesting", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), galleyerr.Malformed},
		{"invalid UTF-8 in a key value", strings.Replace(valid, "run-1", "run-\xff", 1), galleyerr.Invalid},
		{"invalid UTF-8 in an unknown key", "{\"x\xff\":1," + valid[1:], galleyerr.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeEffectCall([]byte(tc.body))
			wantKind(t, err, tc.kind, "")
		})
	}
}

func TestDecodeEffectCallKeepsRawEffect(t *testing.T) {
	body := `{"run":"r","request":{"house":"h","backend":"b","credential":"c","task":"t","attempt":2,"key":"k",` +
		`"effect":{"executor":"roger","effect": {"b" : [1, 2],"a":null} }}}`
	c, err := DecodeEffectCall([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(c.Request.Effect.Effect); got != `{"b" : [1, 2],"a":null}` {
		t.Fatalf("raw effect %q", got)
	}
	if c.Request.Effect.Executor != "roger" || c.Request.Attempt != 2 {
		t.Fatalf("decoded %+v", c)
	}
}

func TestDecodeWorkerEffect(t *testing.T) {
	const (
		I = galleyerr.Invalid
		A = accepted
	)
	hex40 := strings.Repeat("ab", 20)
	launch := func(mod func(obj)) obj { e := launchEffect(); mod(e); return e }
	set := func(key string, v any) func(obj) { return func(m obj) { m[key] = v } }
	del := func(key string) func(obj) { return func(m obj) { delete(m, key) } }
	withAgent := func(a obj) obj { return launch(set("agent", a)) }
	withPinned := func(p obj) obj { return launch(set("pinned", p)) }
	worktree := obj{"kind": KindWorktree, "backend": "sandbox", "handle": "wt-1"}
	message := func(mod func(obj)) obj {
		e := obj{"type": OpMessage, "worker": workerRes(), "body": "hello"}
		mod(e)
		return e
	}
	noop := func(obj) {}
	for _, tc := range []struct {
		name   string
		effect any
		kind   galleyerr.Kind
		field  string
	}{
		{"launch", launchEffect(), A, ""},
		{"launch minimal", obj{"type": OpLaunch, "role": RoleCommis, "workspace": obj{"type": "isolated"}, "brief": "b"}, A, ""},
		{"launch every role", launch(set("role", RoleDishwasher)), A, ""},
		{"launch role missing", launch(del("role")), I, "role: missing"},
		{"launch role unknown", launch(set("role", "head-chef")), I, ".role"},
		{"launch role number", launch(set("role", 3)), I, ".role"},
		{"launch workspace missing", launch(del("workspace")), I, "workspace: missing"},
		{"launch workspace string", launch(set("workspace", "isolated")), I, "workspace"},
		{"launch workspace type missing", launch(set("workspace", obj{})), I, "workspace.type: missing"},
		{"launch workspace type unknown", launch(set("workspace", obj{"type": "shared"})), I, "workspace.type"},
		{"launch isolated with resource", launch(set("workspace", obj{"type": "isolated", "resource": worktree})), I, `"resource" in request.effect.effect.workspace`},
		{"launch isolated with null resource", launch(set("workspace", obj{"type": "isolated", "resource": nil})), I, "workspace"},
		{"launch existing", launch(set("workspace", obj{"type": "existing", "resource": worktree})), A, ""},
		{"launch existing without resource", launch(set("workspace", obj{"type": "existing"})), I, "workspace.resource: missing"},
		{"launch existing on a worker", launch(set("workspace", obj{"type": "existing", "resource": workerRes()})), I, "workspace.resource.kind"},
		{"launch existing extra field", launch(set("workspace", obj{"type": "existing", "resource": worktree, "path": "/x"})), I, `"path"`},
		{"launch brief missing", launch(del("brief")), I, "brief: missing"},
		{"launch brief null", launch(set("brief", nil)), I, "brief: missing"},
		{"launch brief empty", launch(set("brief", "")), I, ".brief"},
		{"launch brief 64 KiB", launch(set("brief", strings.Repeat("b", 64<<10))), A, ""},
		{"launch brief over 64 KiB", launch(set("brief", strings.Repeat("b", 64<<10+1))), I, ".brief"},
		{"launch brief NUL", launch(set("brief", "a\x00"+secret)), I, ".brief"},
		{"launch brief unicode", launch(set("brief", "réparer 🍳\n")), A, ""},
		{"launch brief object", launch(set("brief", obj{})), I, ".brief"},
		{"launch branch absent", launch(del("branch")), A, ""},
		{"launch branch null", launch(set("branch", nil)), A, ""},
		{"launch branch empty", launch(set("branch", "")), I, ".branch"},
		{"launch branch dotdot", launch(set("branch", "a..b")), I, ".branch"},
		{"launch branch lock", launch(set("branch", "a.lock")), I, ".branch"},
		{"launch branch at", launch(set("branch", "@")), I, ".branch"},
		{"launch branch 256", launch(set("branch", strings.Repeat("b", 256))), I, ".branch"},
		{"launch pinned", withPinned(obj{"head": hex40, "report_path": "reports/out.md"}), A, ""},
		{"launch pinned sha256", withPinned(obj{"head": strings.Repeat("0", 64), "report_path": "r"}), A, ""},
		{"launch pinned head upper", withPinned(obj{"head": strings.ToUpper(hex40), "report_path": "r"}), I, "pinned.head"},
		{"launch pinned head short", withPinned(obj{"head": hex40[:12], "report_path": "r"}), I, "pinned.head"},
		{"launch pinned head missing", withPinned(obj{"report_path": "r"}), I, "pinned.head: missing"},
		{"launch pinned path missing", withPinned(obj{"head": hex40}), I, "pinned.report_path: missing"},
		{"launch pinned path camel case", withPinned(obj{"head": hex40, "reportPath": "r"}), I, `"reportPath"`},
		{"launch pinned path absolute", withPinned(obj{"head": hex40, "report_path": "/r"}), I, "pinned.report_path"},
		{"launch pinned path escapes", withPinned(obj{"head": hex40, "report_path": "a/../../r"}), I, "pinned.report_path"},
		{"launch pinned path 4097", withPinned(obj{"head": hex40, "report_path": strings.Repeat("p", 4097)}), I, "pinned.report_path"},
		{"launch pinned path NUL", withPinned(obj{"head": hex40, "report_path": "a\x00"}), I, "pinned.report_path"},
		{"launch pinned string", launch(set("pinned", hex40)), I, ".pinned"},
		{"launch agent claude only", withAgent(obj{"agent": "claude"}), A, ""},
		{"launch agent with effort", withAgent(obj{"agent": "claude", "model": "opus", "effort": "high"}), A, ""},
		{"launch agent effort without model", withAgent(obj{"agent": "codex", "effort": "low"}), A, ""},
		{"launch agent unknown family", withAgent(obj{"agent": "gemini"}), I, "agent.agent"},
		{"launch agent missing family", withAgent(obj{"model": "m"}), I, "agent.agent: missing"},
		{"launch agent empty model", withAgent(obj{"agent": "codex", "model": ""}), I, "agent.model"},
		{"launch agent model dash", withAgent(obj{"agent": "codex", "model": "-x"}), I, "agent.model"},
		{"launch agent model space", withAgent(obj{"agent": "codex", "model": "a b"}), I, "agent.model"},
		{"launch agent model 128", withAgent(obj{"agent": "codex", "model": strings.Repeat("m", 128)}), A, ""},
		{"launch agent model 129", withAgent(obj{"agent": "codex", "model": strings.Repeat("m", 129)}), I, "agent.model"},
		{"launch agent empty effort", withAgent(obj{"agent": "codex", "effort": ""}), I, "agent.effort"},
		{"launch agent effort upper", withAgent(obj{"agent": "codex", "effort": "HIGH"}), I, "agent.effort"},
		{"launch agent effort 65", withAgent(obj{"agent": "codex", "effort": strings.Repeat("e", 65)}), I, "agent.effort"},
		{"launch agent extra", withAgent(obj{"agent": "codex", "temperature": 1}), I, `"temperature"`},
		{"launch agent null", launch(set("agent", nil)), A, ""},
		{"launch with worker field", launch(set("worker", workerRes())), I, `"worker" is not allowed in launch-worker`},
		{"launch with null body field", launch(set("body", nil)), I, `"body" is not allowed`},
		{"launch with unknown field", launch(set("priority", 1)), I, `"priority"`},

		{"message", message(noop), A, ""},
		{"message body missing", message(del("body")), I, "body: missing"},
		{"message body empty", message(set("body", "")), I, ".body"},
		{"message body NUL", message(set("body", "\x00")), I, ".body"},
		{"message worker missing", message(del("worker")), I, "worker: missing"},
		{"message worker is a worktree", message(set("worker", worktree)), I, "worker.kind"},
		{"message worker kind unknown", message(set("worker", obj{"kind": "pod", "backend": "b", "handle": "h"})), I, "worker.kind"},
		{"message worker backend bad", message(set("worker", obj{"kind": "worker", "backend": "b.c", "handle": "h"})), I, "worker.backend"},
		{"message worker handle bad", message(set("worker", obj{"kind": "worker", "backend": "b", "handle": "h " + secret})), I, "worker.handle"},
		{"message worker handle 257", message(set("worker", obj{"kind": "worker", "backend": "b", "handle": strings.Repeat("h", 257)})), I, "worker.handle"},
		{"message worker extra field", message(set("worker", obj{"kind": "worker", "backend": "b", "handle": "h", "id": 1})), I, `"id"`},
		{"message worker missing handle", message(set("worker", obj{"kind": "worker", "backend": "b"})), I, "worker.handle: missing"},
		{"message worker string", message(set("worker", "w-17")), I, ".worker"},
		{"message with question", message(set("question", "q-1")), I, `"question" is not allowed in message-worker`},
		{"message with brief", message(set("brief", "b")), I, `"brief" is not allowed`},

		{"reply", obj{"type": OpReply, "worker": workerRes(), "question": "msg-3", "body": "v2"}, A, ""},
		{"reply question missing", obj{"type": OpReply, "worker": workerRes(), "body": "v2"}, I, "question: missing"},
		{"reply question with space", obj{"type": OpReply, "worker": workerRes(), "question": "msg 3", "body": "v2"}, I, ".question"},
		{"reply body missing", obj{"type": OpReply, "worker": workerRes(), "question": "q"}, I, "body: missing"},

		{"cancel", obj{"type": OpCancel, "worker": workerRes()}, A, ""},
		{"cancel with body", obj{"type": OpCancel, "worker": workerRes(), "body": "bye"}, I, `"body" is not allowed in cancel-worker`},
		{"cancel worker missing", obj{"type": OpCancel}, I, "worker: missing"},
		{"cancel a branch", obj{"type": OpCancel, "worker": obj{"kind": "branch", "backend": "b", "handle": "h"}}, I, "worker.kind"},

		{"release a worktree", obj{"type": OpRelease, "resource": worktree}, A, ""},
		{"release a schedule", obj{"type": OpRelease, "resource": obj{"kind": "schedule", "backend": "b", "handle": "h"}}, A, ""},
		{"release resource missing", obj{"type": OpRelease}, I, "resource: missing"},
		{"release with worker", obj{"type": OpRelease, "resource": worktree, "worker": workerRes()}, I, `"worker" is not allowed in release-resource`},

		{"type missing", obj{"worker": workerRes()}, I, "type: missing"},
		{"type null", obj{"type": nil}, I, "type: missing"},
		{"type unknown", obj{"type": "launch-schedule"}, I, ".type"},
		{"type case", obj{"type": "Cancel-Worker", "worker": workerRes()}, I, ".type"},
		{"type number", obj{"type": 1}, I, ".type"},
		{"not an object", []any{}, I, "request.effect.effect"},
		{"null", nil, I, "request.effect.effect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := DecodeWorkerEffect(mustJSON(t, tc.effect))
			wantKind(t, err, tc.kind, tc.field)
			if err == nil {
				// What was accepted encodes back to an equal effect.
				again, err := DecodeWorkerEffect(EncodeWorkerEffect(e))
				if err != nil || !reflect.DeepEqual(again, e) {
					t.Fatalf("re-decoded %+v, %v; want %+v", again, err, e)
				}
			}
		})
	}
}

func TestDecodeWorkerEffectStrings(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  string
		kind galleyerr.Kind
		want string
	}{
		{"escaped brief", `{"type":"message-worker","worker":{"kind":"worker","backend":"b","handle":"h"},"body":"a\n\"b\"\u00e9\ud83c\udf73"}`, accepted, "a\n\"b\"é🍳"},
		{"escaped NUL", `{"type":"message-worker","worker":{"kind":"worker","backend":"b","handle":"h"},"body":"a\u0000"}`, galleyerr.Invalid, ""},
		{"lone surrogate", `{"type":"message-worker","worker":{"kind":"worker","backend":"b","handle":"h"},"body":"a\ud800"}`, galleyerr.Invalid, ""},
		{"raw invalid UTF-8", "{\"type\":\"message-worker\",\"worker\":{\"kind\":\"worker\",\"backend\":\"b\",\"handle\":\"h\"},\"body\":\"a\xc3\"}", galleyerr.Invalid, ""},
		{"not JSON", `{"type":`, galleyerr.Malformed, ""},
		{"duplicate type, last wins", `{"type":"launch-worker","type":"cancel-worker","worker":{"kind":"worker","backend":"b","handle":"h"}}`, accepted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := DecodeWorkerEffect(json.RawMessage(tc.raw))
			wantKind(t, err, tc.kind, "")
			if tc.want != "" && (e.Body == nil || *e.Body != tc.want) {
				t.Fatalf("body %q, want %q", *e.Body, tc.want)
			}
		})
	}
}

func TestDecodeMailboxCall(t *testing.T) {
	const (
		M = galleyerr.Malformed
		I = galleyerr.Invalid
		A = accepted
	)
	base := func(extra obj) obj {
		m := obj{"run": "run-1", "coordinator": "coordinator-1"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		op    string
		body  any
		kind  galleyerr.Kind
		field string
	}{
		{"next", MailboxNext, base(nil), A, ""},
		{"adopt", MailboxAdopt, base(nil), A, ""},
		{"next run missing", MailboxNext, obj{"coordinator": "c"}, I, "run: missing"},
		{"next coordinator missing", MailboxNext, obj{"run": "r"}, I, "coordinator: missing"},
		{"next coordinator space", MailboxNext, base(obj{"coordinator": "c " + secret}), I, "coordinator"},
		{"next coordinator 257", MailboxNext, base(obj{"coordinator": strings.Repeat("c", 257)}), I, "coordinator"},
		{"next run number", MailboxNext, base(obj{"run": 1}), M, "run"},
		{"next with delivery", MailboxNext, base(obj{"delivery": "d-1"}), I, `"delivery" is not allowed in next`},
		{"next with null delivery", MailboxNext, base(obj{"delivery": nil}), I, `"delivery"`},
		{"next with waitMs", MailboxNext, base(obj{"waitMs": 5}), I, `"waitMs" is not allowed in next`},
		{"adopt with waitMs", MailboxAdopt, base(obj{"waitMs": 5}), I, `"waitMs"`},
		{"next unknown", MailboxNext, base(obj{"limit": 5}), I, `"limit"`},
		{"next array", MailboxNext, []any{}, M, "body"},

		{"acknowledge", MailboxAcknowledge, base(obj{"delivery": "d-4"}), A, ""},
		{"acknowledge delivery missing", MailboxAcknowledge, base(nil), I, "delivery: missing"},
		{"acknowledge delivery empty", MailboxAcknowledge, base(obj{"delivery": ""}), I, "delivery"},
		{"acknowledge delivery number", MailboxAcknowledge, base(obj{"delivery": 4}), M, "delivery"},
		{"acknowledge with waitMs", MailboxAcknowledge, base(obj{"delivery": "d", "waitMs": 1}), I, `"waitMs"`},

		{"await", MailboxAwait, base(obj{"waitMs": 25000}), A, ""},
		{"await zero", MailboxAwait, base(obj{"waitMs": 0}), A, ""},
		{"await max", MailboxAwait, base(obj{"waitMs": 900000}), A, ""},
		{"await over max", MailboxAwait, base(obj{"waitMs": 900001}), I, "waitMs"},
		{"await negative", MailboxAwait, base(obj{"waitMs": -1}), I, "waitMs"},
		{"await missing", MailboxAwait, base(nil), I, "waitMs: missing"},
		{"await fraction", MailboxAwait, base(obj{"waitMs": 1.5}), M, "waitMs"},
		{"await string", MailboxAwait, base(obj{"waitMs": "100"}), M, "waitMs"},
		{"await with delivery", MailboxAwait, base(obj{"waitMs": 1, "delivery": "d"}), I, `"delivery"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeMailboxCall(mustJSON(t, tc.body), tc.op)
			wantKind(t, err, tc.kind, tc.field)
			if err != nil {
				return
			}
			m := tc.body.(obj)
			if c.Run != m["run"] || c.Coordinator != m["coordinator"] {
				t.Fatalf("decoded %+v", c)
			}
			if d, _ := m["delivery"].(string); c.Delivery != d {
				t.Fatalf("delivery %q", c.Delivery)
			}
			if w, ok := m["waitMs"].(int); ok != (c.WaitMs != nil) || ok && int64(w) != *c.WaitMs {
				t.Fatalf("waitMs %v", c.WaitMs)
			}
		})
	}
	if _, err := DecodeMailboxCall([]byte(`{}`), "peek"); err == nil || galleyerr.KindOf(err) != galleyerr.Other {
		t.Fatalf("unknown op: %v", err)
	}
}

func TestDecodeWorkerCall(t *testing.T) {
	const (
		M = galleyerr.Malformed
		I = galleyerr.Invalid
		A = accepted
	)
	for _, tc := range []struct {
		name  string
		body  any
		kind  galleyerr.Kind
		field string
	}{
		{"worker", obj{"worker": workerRes()}, A, ""},
		{"missing", obj{}, I, "worker: missing"},
		{"extra", obj{"worker": workerRes(), "verbose": true}, I, `"verbose"`},
		{"not a worker", obj{"worker": obj{"kind": "worktree", "backend": "b", "handle": "h"}}, I, "worker.kind"},
		{"bad handle", obj{"worker": obj{"kind": "worker", "backend": "b", "handle": ""}}, I, "worker.handle"},
		{"extra resource field", obj{"worker": obj{"kind": "worker", "backend": "b", "handle": "h", "x": 1}}, I, `"x" in worker`},
		{"string", obj{"worker": "w-17"}, M, "worker"},
		{"kind number", obj{"worker": obj{"kind": 1, "backend": "b", "handle": "h"}}, M, "worker.kind"},
		{"array", []any{}, M, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeWorkerCall(mustJSON(t, tc.body))
			wantKind(t, err, tc.kind, tc.field)
			if err == nil && c.Worker != (Resource{KindWorker, "sandbox", "w-17"}) {
				t.Fatalf("decoded %+v", c)
			}
		})
	}
}
