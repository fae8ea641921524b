package history

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// builder writes histories by hand: each op is (client, route, body,
// status, answer, call, return).
type builder struct{ ops []Op }

func (b *builder) op(client string, route Route, body string, status int, answer string, call, ret int64) *builder {
	op := Op{ID: len(b.ops), Client: client, Route: route, Call: call, Return: ret, Status: status}
	if body != "" {
		op.Body = []byte(body)
	}
	if answer != "" {
		op.Answer = []byte(answer)
	}
	if status == 0 {
		op.Return = Pending
	}
	b.ops = append(b.ops, op)
	return b
}

func (b *builder) arrived(at int64) *builder {
	b.ops[len(b.ops)-1].Arrived = at
	return b
}

func (b *builder) post(worker, run, kind, body string, id string, call, ret int64) *builder {
	status, answer := 200, fmt.Sprintf(`{"id":%q}`, id)
	if id == "" {
		status, answer = 0, ""
	}
	b.op(worker, Post, fmt.Sprintf(`{"kind":%q,"body":%q}`, kind, body), status, answer, call, ret)
	b.ops[len(b.ops)-1].Run = run
	return b
}

func effectBody(key, effect string) string {
	return fmt.Sprintf(`{"run":"run-1","request":{"house":"origin89","backend":"galley","credential":"galley-token","task":"t-1","attempt":1,"key":%q,"effect":{"executor":"worker","effect":%s}}}`, key, effect)
}

func launch(brief string) string {
	return fmt.Sprintf(`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":%q,"branch":"b-%s"}`, brief, brief)
}

func receipt(ref, worker, branch string) string {
	return fmt.Sprintf(`{"status":"applied","receipt":{"reference":%q,"created":[{"kind":"worker","backend":"galley","handle":%q},{"kind":"branch","backend":"galley","handle":%q}],"touched":[]}}`, ref, worker, branch)
}

func cancelEffect(worker string) string {
	return fmt.Sprintf(`{"type":"cancel-worker","worker":{"kind":"worker","backend":"galley","handle":%q}}`, worker)
}

func observeBody(worker string) string {
	return fmt.Sprintf(`{"worker":{"kind":"worker","backend":"galley","handle":%q}}`, worker)
}

func mailBody(run, c string) string { return fmt.Sprintf(`{"run":%q,"coordinator":%q}`, run, c) }

func ackBody(run, c, d string) string {
	return fmt.Sprintf(`{"run":%q,"coordinator":%q,"delivery":%q}`, run, c, d)
}

func delivery(id string, rows ...string) string {
	var ms []string
	for _, r := range rows {
		w, body, _ := strings.Cut(r, ":")
		ms = append(ms, fmt.Sprintf(`{"id":"m-%s","kind":"status","worker":{"kind":"worker","backend":"galley","handle":%q},"body":%q}`, body, w, body))
	}
	return fmt.Sprintf(`{"status":"delivery","delivery":{"id":%q,"messages":[%s],"unreadable":0}}`, id, strings.Join(ms, ","))
}

const (
	empty  = `{"status":"empty"}`
	fenced = `{"status":"fenced"}`
)

func invariants(r Report) []string {
	var out []string
	for _, v := range r.Violations {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	slices.Sort(out)
	return out
}

func TestCheckers(t *testing.T) {
	kA := effectBody("k-a", launch("a"))
	inv := func(rows ...string) string {
		return `{"resources":[` + strings.Join(rows, ",") + `]}`
	}
	row := func(kind, handle, owner string) string {
		return fmt.Sprintf(`{"resource":{"kind":%q,"backend":"galley","handle":%q},"owner":%q,"liveness":"live"}`, kind, handle, owner)
	}
	for _, tc := range []struct {
		name string
		b    *builder
		want []string
	}{
		{"receipts replay", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Lookup, kA, 200, receipt("r-a", "w-a", "b-a"), 3, 4).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 5, 6).
			op("c", Inventory, "", 200, inv(row("worker", "w-a", "k-a"), row("branch", "b-a", "k-a")), 7, 8), nil},
		{"receipt changed", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Lookup, kA, 200, receipt("r-a2", "w-a", "b-a"), 3, 4), []string{"receipt-changed"}},
		{"key reused with another payload", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, effectBody("k-a", launch("other")), 200, receipt("r-a", "w-a", "b-a"), 3, 4), []string{"key-reused-applied"}},
		{"two keys one worker", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, effectBody("k-b", launch("b")), 200, receipt("r-b", "w-a", "b-b"), 3, 4), []string{"duplicate-worker"}},
		{"key owns two workers", new(builder).
			op("c", Inventory, "", 200, inv(row("worker", "w-a", "k-a"), row("worker", "w-a2", "k-a")), 1, 2), []string{"duplicate-worker"}},
		{"absent then an earlier copy applies", new(builder).
			op("c", Lookup, kA, 200, `{"status":"absent"}`, 10, 11).
			op("d", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 5, 20).arrived(6), []string{"absent-broken"}},
		{"absent then a later copy applies", new(builder).
			op("c", Lookup, kA, 200, `{"status":"absent"}`, 10, 11).
			op("d", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 5, 20).arrived(12), nil},
		{"absent after applied", new(builder).
			op("d", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Lookup, kA, 200, `{"status":"absent"}`, 10, 11), []string{"absent-broken"}},
		{"not-applied then an earlier copy applies", new(builder).
			op("c", Effect, kA, 200, `{"status":"not-applied","reason":"rate-limited"}`, 10, 11).
			op("d", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 20).arrived(3), []string{"not-applied-broken"}},
		{"applied launch missing from the inventory", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Inventory, "", 200, inv(row("worker", "w-a", "k-a")), 3, 4), []string{"applied-lost"}},
		{"released resource may leave", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, effectBody("k-r", `{"type":"release-resource","resource":{"kind":"branch","backend":"galley","handle":"b-a"}}`), 0, "", 3, 4).
			op("c", Inventory, "", 200, inv(row("worker", "w-a", "k-a")), 5, 6), nil},

		{"mailbox good", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			post("w1", "r", "status", "2", "m-2", 3, 4).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1", "w1:2"), 5, 6).
			op("c2", Next, mailBody("r", "c2"), 200, delivery("d-1", "w1:1", "w1:2"), 5, 7).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 8, 9).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 10, 11), nil},
		{"replay differs", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			post("w1", "r", "status", "2", "m-2", 3, 4).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 5, 6).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1", "w1:2"), 7, 8), []string{"replay-differs"}},
		{"batch reused", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 5, 6).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 7, 8).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 9, 10), []string{"batch-reused"}},
		{"message lost", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 5, 6), []string{"message-lost"}},
		{"message in flight is not lost", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 10).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 5, 6), nil},
		{"order", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			post("w1", "r", "status", "2", "m-2", 3, 4).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:2", "w1:1"), 5, 6), []string{"order"}},
		{"fencing good", new(builder).
			op("old", Next, mailBody("r", "old"), 200, empty, 1, 2).
			op("new", Adopt, mailBody("r", "new"), 200, `{}`, 3, 4).
			op("old", Next, mailBody("r", "old"), 200, fenced, 5, 6).
			op("old", Adopt, mailBody("r", "old"), 200, fenced, 7, 8).
			op("newer", Adopt, mailBody("r", "newer"), 200, `{}`, 9, 10).
			op("newer", Next, mailBody("r", "newer"), 200, empty, 11, 12), nil},
		{"fenced not enforced", new(builder).
			op("old", Next, mailBody("r", "old"), 200, empty, 1, 2).
			op("new", Adopt, mailBody("r", "new"), 200, `{}`, 3, 4).
			op("old", Next, mailBody("r", "old"), 200, empty, 5, 6), []string{"fenced-not-enforced"}},
		{"adopted back", new(builder).
			op("old", Adopt, mailBody("r", "old"), 200, `{}`, 1, 2).
			op("new", Adopt, mailBody("r", "new"), 200, `{}`, 3, 4).
			op("old", Adopt, mailBody("r", "old"), 200, `{}`, 5, 6), []string{"adopted-back"}},
		{"new adopter fenced", new(builder).
			op("old", Adopt, mailBody("r", "old"), 200, `{}`, 1, 2).
			op("new", Adopt, mailBody("r", "new"), 200, fenced, 3, 4), []string{"new-adopter-fenced"}},
		{"racing the adoption may succeed", new(builder).
			op("old", Next, mailBody("r", "old"), 200, empty, 1, 2).
			op("new", Adopt, mailBody("r", "new"), 200, `{}`, 3, 6).
			op("old", Next, mailBody("r", "old"), 200, empty, 4, 5), nil},

		{"cancel settles", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, effectBody("k-c", cancelEffect("w-a")), 200, `{"status":"applied","receipt":{"reference":"r-c","created":[],"touched":[{"kind":"worker","backend":"galley","handle":"w-a"}]}}`, 3, 4).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"settled","outcome":"cancelled"}`, 5, 6), nil},
		{"cancel not settled", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Effect, effectBody("k-c", cancelEffect("w-a")), 200, `{"status":"applied","receipt":{"reference":"r-c","created":[],"touched":[{"kind":"worker","backend":"galley","handle":"w-a"}]}}`, 3, 4).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"ready"}`, 5, 6), []string{"cancel-not-settled"}},
		{"settled changed", new(builder).
			op("c", Effect, kA, 200, receipt("r-a", "w-a", "b-a"), 1, 2).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"settled","outcome":"failed"}`, 5, 6).
			op("c", Observe, observeBody("w-a"), 200, `{"state":"settled","outcome":"succeeded"}`, 7, 8), []string{"settled-changed"}},
		{"phantom settled", new(builder).
			op("c", Observe, observeBody("w-ghost"), 200, `{"state":"settled","outcome":"failed"}`, 5, 6), []string{"phantom-settled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.b.ops, Options{})
			if got := invariants(r); !slices.Equal(got, tc.want) {
				t.Fatalf("violations %v, want %v\n%s", got, tc.want, r)
			}
		})
	}
}

func TestLinearizable(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    *builder
		ok   bool
	}{
		{"sequential", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			post("w1", "r", "status", "2", "m-2", 5, 6).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 7, 8).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, delivery("d-2", "w1:2"), 9, 10).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, delivery("d-2", "w1:2"), 11, 12).
			op("c1", Acknowledge, ackBody("r", "c1", "d-2"), 200, empty, 13, 14), true},
		{"concurrent post lands in the batch", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 10).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4), true},
		{"a post whose answer was lost", new(builder).
			post("w1", "r", "status", "1", "", 1, 0).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 5, 6), true},
		{"a failed post that never landed", new(builder).
			post("w1", "r", "status", "1", "", 1, 0).
			post("w1", "r", "status", "2", "m-2", 3, 4).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:2"), 5, 6).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 7, 8), true},
		{"acknowledged batch comes back", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 5, 6).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 7, 8), false},
		{"stale ack consumed", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-9"), 200, empty, 5, 6), false},
		{"empty while a row waits", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 3, 4), false},
		{"read after being superseded", new(builder).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 1, 2).
			op("c2", Adopt, mailBody("r", "c2"), 200, `{}`, 3, 4).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 5, 6), false},
		{"await touches before an adoption, then fenced for good", new(builder).
			op("c1", Await, `{"run":"r","coordinator":"c1","waitMs":100}`, 200, fenced, 1, 10).
			op("c2", Adopt, mailBody("r", "c2"), 200, `{}`, 3, 4).
			op("c1", Adopt, mailBody("r", "c1"), 200, fenced, 11, 12), true},
		{"ack consumes then reads a later post", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, delivery("d-2", "w1:2"), 5, 20).
			op("c2", Next, mailBody("r", "c2"), 200, empty, 6, 7).
			post("w1", "r", "status", "2", "m-2", 8, 9), true},
		{"batch id reused for another batch", new(builder).
			post("w1", "r", "status", "1", "m-1", 1, 2).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 5, 6).
			post("w1", "r", "status", "2", "m-2", 7, 8).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:2"), 9, 10), false},
		{"a lost post that landed after an empty read", new(builder).
			post("w1", "r", "status", "1", "", 1, 0).
			op("c1", Next, mailBody("r", "c1"), 200, empty, 2, 3).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 4, 5), true},
		{"a lost post delivered before it was sent", new(builder).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 1, 2).
			post("w1", "r", "status", "1", "", 3, 0), false},
		{"a lost post's row delivered again after its ack", new(builder).
			post("w1", "r", "status", "1", "", 1, 0).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:1"), 3, 4).
			op("c1", Acknowledge, ackBody("r", "c1", "d-1"), 200, empty, 5, 6).
			op("c1", Next, mailBody("r", "c1"), 200, delivery("d-2", "w1:1"), 7, 8), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Linearizable(tc.b.ops, 10*time.Second)
			if res.Unknown || res.OK != tc.ok {
				t.Fatalf("linearizable = %+v, want ok=%v", res, tc.ok)
			}
		})
	}
}

// A post without an answer overlaps every later call (Pending), and a few
// hundred of them beside a coordinator's reads made porcupine's search
// run out of time. One whose row no answer delivered is left out (never
// taking effect explains it as well as any other choice), and one whose
// row was delivered returns, for the check, when the first answer that
// delivered it returned.
func TestLostPostsBounded(t *testing.T) {
	b := new(builder).
		post("w1", "r", "status", "landed", "", 1, 0).
		post("w2", "r", "status", "never", "", 2, 0).
		op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:landed"), 3, 4).
		op("c1", Next, mailBody("r", "c1"), 200, delivery("d-1", "w1:landed"), 5, 6)
	pops, _, bad := linOps(newIndex(b.ops), "r")
	if bad != "" {
		t.Fatal(bad)
	}
	var posts []string
	for _, o := range pops {
		if in := o.Input.(linIn); in.kind == linPost {
			posts = append(posts, fmt.Sprintf("%q@%d", in.key, o.Return))
		}
	}
	if len(posts) != 1 || !strings.Contains(posts[0], "landed") || !strings.HasSuffix(posts[0], "@4") {
		t.Fatalf("posts checked %q, want only the landed one, returning at 4", posts)
	}
}

func TestRecorderAndLoopback(t *testing.T) {
	rec := NewRecorder()
	c := rec.Begin("c1", Next, []byte(mailBody("r", "c1")))
	op := c.End(200, []byte(empty), nil)
	if op.ID != 0 || op.Return < op.Call || !op.Answered() {
		t.Fatalf("op = %+v", op)
	}
	lost := rec.Begin("c1", Next, []byte(mailBody("r", "c1"))).End(0, nil, fmt.Errorf("reset"))
	if lost.Return != Pending || lost.Answered() {
		t.Fatalf("an op without an answer must be pending: %+v", lost)
	}
	// A call under way when the server stopped takes effect, if at all,
	// before the cut.
	inflight := rec.Begin("c1", Next, []byte(mailBody("r", "c1")))
	rec.Cut()
	inflight.End(0, nil, fmt.Errorf("connection reset"))
	if ops := rec.Ops(); ops[len(ops)-1].Return == Pending || ops[len(ops)-1].Return < ops[len(ops)-1].Call {
		t.Fatalf("an op under way at a cut = %+v", ops[len(ops)-1])
	}
	if unsent := rec.Begin("c1", Next, nil).EndUnsent(fmt.Errorf("refused")); unsent.Return == Pending {
		t.Fatalf("an unsent op must return at once: %+v", unsent)
	}
	for ep, ok := range map[string]bool{
		"http://127.0.0.1:8080": true, "http://localhost:1": true, "http://[::1]:80/x": true,
		"https://127.0.0.1:8080": false, "http://example.com": false, "http://10.0.0.1:80": false,
		"http://u:p@127.0.0.1:80": false,
	} {
		if err := CheckLoopback(ep); (err == nil) != ok {
			t.Errorf("CheckLoopback(%s) = %v", ep, err)
		}
	}
}
