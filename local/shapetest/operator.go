package shapetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// Operated is a shape under the operator scenario.
type Operated struct {
	// Start starts galley in the shape, its default agent the scripted
	// one.
	Start func(t *testing.T) OperatorHouse
	// Live is how the shape's console follows a worker, as its session
	// says (operator.LiveStream or operator.LivePoll).
	Live string
	// Compute is how the shape's runtime records a worker's compute.
	Compute Compute
}

// Compute is how a shape's runtime records a worker's compute in its
// event log (kind compute), besides the service's "started" at launch.
type Compute struct {
	// Running, if set, is the event of its task running (aws-local: the
	// reconciler's "task-running"); Stopped is the event of its end, the
	// last of its log ("stopped": the local runtime saw the harness end;
	// "task-stopped": the reconciler's).
	Running, Stopped string
	// StopFields must be set in the Stopped event (aws-local: stopCode),
	// and its code, when Code is set, be Code.
	StopFields []string
	Code       string
}

// OperatorHouse is a shape started for the operator scenario.
type OperatorHouse interface {
	Kitchn
	// Galley is the galley command; OperatorTokenFile and TokenFile the
	// operator's and kitchn's token files, for its --token-file.
	Galley() string
	OperatorTokenFile() string
	TokenFile() string
}

// Restarter is an OperatorHouse whose galley can be killed and started
// again on the same data (the local shape's galley serve).
type Restarter interface {
	// Restart ends galley with SIGKILL and starts it again on the same
	// data, and answers the house it serves.
	Restart(t *testing.T) OperatorHouse
}

// EventWriter is an OperatorHouse whose event log the test can write to as
// galley writes it (aws-local's table, as a function's role reaches it).
type EventWriter interface {
	AppendEvent(ctx context.Context, handle string, e store.Event) error
}

// Operator runs the operator's API and commands against the shape: the
// operator token and kitchn's open only their own routes; a console
// session's cookie opens the API until its logout and is refused after
// it; /operator leads to the console, which is served and told how to
// follow (a stream, or long polls: then no stream route); a scripted
// worker's events (state, mailbox, usage, compute, what the harness saw)
// are numbered without a gap and reach a follower (galley events
// --follow) as they happen, without a token in their text; where galley
// can be killed, a SIGKILL loses no acknowledged event, repeats none and
// keeps the sessions; a stream resumes after its Last-Event-ID; galley
// workers, cancel and revoke act through the service and kitchn's observe
// agrees, the actions in the log. A second worker's events, from its
// launch to its compute's end, reach a long-poll follower in order, a
// resumed cursor replays exactly what it missed, a long poll past the end
// answers nothing, a cursor older than the retained events gets one reset
// (where the test can write the log), and galley's commands read them,
// refusing kitchn's token file.
func Operator(t *testing.T, o Operated) {
	h := o.Start(t)
	opToken, token := h.OperatorToken(), h.Token()
	if opToken == token {
		t.Fatal("the operator token is kitchn's token")
	}

	// Each token opens its own routes only.
	for _, c := range []struct {
		token, method, path, body string
		want                      int
	}{
		{token, "GET", operator.PathWorkers, "", http.StatusUnauthorized},
		{token, "GET", operator.PathSession, "", http.StatusUnauthorized},
		{token, "POST", operator.PathWorkers + "/w-x/cancel", "", http.StatusUnauthorized},
		{"", "GET", operator.PathWorkers, "", http.StatusUnauthorized},
		{opToken, contract.RouteDescriptor.Method, contract.PathDescriptor, "", http.StatusUnauthorized},
		{opToken, contract.RouteNext.Method, contract.PathNext, `{"run":"r","coordinator":"c-1"}`, http.StatusUnauthorized},
		{opToken, contract.RouteInventory.Method, contract.PathInventory, "", http.StatusUnauthorized},
		{opToken, contract.RouteLookup.Method, contract.PathLookup, `{}`, http.StatusUnauthorized},
		{token, contract.RouteDescriptor.Method, contract.PathDescriptor, "", http.StatusOK},
	} {
		if got, body := call(t, h, c.method, c.path, c.token, c.body); got != c.want {
			who := "kitchn's token"
			if c.token == opToken {
				who = "the operator token"
			} else if c.token == "" {
				who = "no token"
			}
			t.Errorf("%s %s with %s: %d %s, want %d", c.method, c.path, who, got, body, c.want)
		}
	}
	if code, body := call(t, h, "GET", operator.PathWorkers, opToken, ""); code != http.StatusOK {
		t.Fatalf("the operator token was refused: %d %s", code, body)
	}
	// The console's session: a login's cookie opens the API until its
	// logout, and after it the old cookie, replayed, is refused (the
	// session is gone from the store, whichever process answers).
	cookie := consoleLogin(t, h)
	if code, body := call(t, h, "GET", operator.PathWorkers, "", "", "Cookie", cookie); code != http.StatusOK {
		t.Fatalf("a read with the session cookie: %d %s", code, body)
	}
	if code, body := call(t, h, "POST", operator.PathLogout, "", "", "Cookie", cookie, operator.CSRFHeader, "1"); code != http.StatusOK {
		t.Fatalf("logout: %d %s", code, body)
	}
	if code, _ := call(t, h, "GET", operator.PathWorkers, "", "", "Cookie", cookie); code != http.StatusUnauthorized {
		t.Errorf("after logout the old session cookie opened the API: %d, want 401", code)
	}

	// The console, served: /operator redirects to it, and its session says
	// how to follow a worker.
	if code, _ := call(t, h, "GET", "/operator", "", ""); code != http.StatusFound {
		t.Errorf("GET /operator: %d, want a redirect to the console", code)
	}
	if code, body := call(t, h, "GET", operator.PathConsole, "", ""); code != http.StatusOK || !strings.Contains(body, "app.js") {
		t.Errorf("GET %s: %d %.200s", operator.PathConsole, code, body)
	}
	if code, body := call(t, h, "GET", "/operator/app.js", "", ""); code != http.StatusOK || !strings.Contains(body, "events?after=") {
		t.Errorf("GET /operator/app.js: %d", code)
	}
	var sess operator.SessionAnswer
	if code, body := call(t, h, "GET", operator.PathSession, opToken, ""); code != http.StatusOK ||
		json.Unmarshal([]byte(body), &sess) != nil || sess.Live != o.Live {
		t.Errorf("session: %d %s, want live %q", code, body, o.Live)
	}
	if o.Live == operator.LivePoll {
		if code, _ := call(t, h, "GET", operator.PathWorkers+"/w-x/stream", opToken, ""); code != http.StatusNotFound {
			t.Errorf("stream: %d, want 404 (long poll only)", code)
		}
	}
	// A session lives in the store: it outlives a galley killed below.
	restarter, restarts := h.(Restarter)
	var kept string
	if restarts {
		kept = consoleLogin(t, h)
	}

	// A worker asks a question; a follower from the start sees every
	// event so far, then kitchn's reply as it happens.
	brief := "#!galley-script\nstatus hello <b>there</b>\nusage 120 30\nask need input :: which way?\nsleep 1h\n"
	w := launchScripted(t, h, "k-op-launch", "op/one", brief)
	q := h.Next(t, "the question", Kind(protocol.MsgQuestion, "which way"))
	followed := followEvents(t, h, w)
	apply(t, h, "k-op-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"left"}`, WorkerRes(w), q.ID))
	var got []store.Event
	deadline := time.After(2 * time.Minute)
	for !HasEvent(got, eventlog.KindMailbox, map[string]string{"kind": "reply", "question": q.ID}) {
		select {
		case e, ok := <-followed:
			if !ok {
				t.Fatalf("the follower ended; it saw %v", kinds(got))
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("the follower did not see the reply; it saw %v", kinds(got))
		}
	}
	CheckUnbroken(t, "followed", got)
	h.Next(t, "the status after the reply", Kind(protocol.MsgStatus, "reply: left"))

	before := eventsOf(t, h, w)
	CheckUnbroken(t, "the log", before)
	for _, want := range []struct {
		kind   string
		fields map[string]string
	}{
		{eventlog.KindState, map[string]string{"state": protocol.StateReady}},
		{eventlog.KindState, map[string]string{"state": protocol.StateAwaitingReply}},
		{eventlog.KindMailbox, map[string]string{"kind": protocol.MsgStatus}},
		{eventlog.KindMailbox, map[string]string{"kind": protocol.MsgQuestion, "id": q.ID}},
		{eventlog.KindMailbox, map[string]string{"kind": "reply"}},
		{eventlog.KindUsage, map[string]string{"input": "120", "output": "30"}},
		{eventlog.KindCompute, map[string]string{"event": "started"}},
		{eventlog.KindHarness, map[string]string{"event": "workspace"}},
		{eventlog.KindHarness, map[string]string{"event": "agent-started"}},
		{eventlog.KindHarness, map[string]string{"event": "tool", "tool": "ask_coordinator"}},
	} {
		if !HasEvent(before, want.kind, want.fields) {
			t.Errorf("no %s event with %v in %v", want.kind, want.fields, kinds(before))
		}
	}
	for _, e := range before {
		if strings.Contains(e.Text, token) || strings.Contains(e.Text, opToken) {
			t.Errorf("event %d holds a token", e.Seq)
		}
	}

	if restarts {
		// SIGKILL galley; a new one on the same data keeps every event,
		// numbers on from the last, and keeps the session.
		h = restarter.Restart(t)
		after := eventsOf(t, h, w)
		if len(after) < len(before) {
			t.Fatalf("after the kill the log has %d events, before it %d", len(after), len(before))
		}
		for i := range before {
			if before[i].Seq != after[i].Seq || before[i].Kind != after[i].Kind || before[i].Text != after[i].Text {
				t.Fatalf("event %d changed across the kill: %+v, now %+v", i+1, before[i], after[i])
			}
		}
		if code, body := call(t, h, "GET", operator.PathWorkers, "", "", "Cookie", kept); code != http.StatusOK {
			t.Errorf("a session issued before the kill, after it: %d %s", code, body)
		}
		if code, _ := call(t, h, "POST", operator.PathLogout, "", "", "Cookie", kept, operator.CSRFHeader, "1"); code != http.StatusOK {
			t.Errorf("logout after the kill: %d", code)
		}
		if code, _ := call(t, h, "GET", operator.PathWorkers, "", "", "Cookie", kept); code != http.StatusUnauthorized {
			t.Errorf("after logout the old session cookie opened the API: %d, want 401", code)
		}
	}
	if o.Live == operator.LiveStream {
		// A stream resumes after its Last-Event-ID.
		if first := streamFrom(t, h, w, "2"); first != "3" {
			t.Errorf("a stream with Last-Event-ID 2 began at %q, want 3", first)
		}
	}

	if list := galley(t, h, "workers"); !strings.Contains(list, w) || !strings.Contains(list, protocol.StateReady) {
		t.Errorf("galley workers does not show %s ready:\n%s", w, list)
	}
	if out := galley(t, h, "cancel", w); !strings.Contains(out, "cancelled "+w) {
		t.Errorf("galley cancel said %q", out)
	}
	galley(t, h, "cancel", w) // again: the same idempotent path
	if obs := h.Observe(t, w); obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeCancelled {
		t.Errorf("observe after galley cancel: %s %s, want settled cancelled", obs.State, obs.Outcome)
	}
	if out := galley(t, h, "revoke", w, "--json"); !strings.Contains(out, `"action":"revoked"`) {
		t.Errorf("galley revoke --json said %q", out)
	}
	var ws struct {
		Workers []struct{ Handle, State, Outcome string }
	}
	if err := json.Unmarshal([]byte(galley(t, h, "workers", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws.Workers) != 1 || ws.Workers[0].State != protocol.StateSettled || ws.Workers[0].Outcome != protocol.OutcomeCancelled {
		t.Errorf("galley workers --json: %+v", ws)
	}
	// The events the actions made arrive (the recorder is asynchronous).
	var final []store.Event
	settled := map[string]string{"state": protocol.StateSettled, "outcome": protocol.OutcomeCancelled}
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		final = eventsOf(t, h, w)
		if HasEvent(final, eventlog.KindState, settled) && HasEvent(final, eventlog.KindCredential, nil) {
			break
		}
	}
	CheckUnbroken(t, "after the actions", final)
	if !HasEvent(final, eventlog.KindAction, map[string]string{"action": "cancel"}) || !HasEvent(final, eventlog.KindCredential, nil) ||
		!HasEvent(final, eventlog.KindState, settled) {
		t.Errorf("the log lacks the cancel or the revoke: %v", kinds(final))
	}

	followToEnd(t, h, o.Compute)
}

// followToEnd launches a worker that posts three statuses and ends, and
// follows its events by long poll from its launch to its compute's end.
func followToEnd(t *testing.T, h OperatorHouse, compute Compute) {
	handle := launchScripted(t, h, "k-op-1", "op/k-op-1",
		"#!galley-script\nstatus one\nsleep 300ms\nstatus two\nsleep 300ms\nstatus three\ndone succeeded ok")
	client := operator.NewClient(h.Endpoint(), h.OperatorToken())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stopped := func(e store.Event) bool {
		return e.Kind == eventlog.KindCompute && e.Fields["event"] == compute.Stopped
	}
	// A first follower takes the first three events, then goes away.
	var early []store.Event
	var cursor int64
	for len(early) < 3 {
		a, err := client.Events(ctx, handle, cursor, operator.MaxWait)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range a.Events {
			if len(early) < 3 {
				early = append(early, e)
				cursor = e.Seq
			}
		}
	}
	// A second follows from the start until the worker's compute ended.
	var all []store.Event
	if err := client.Follow(ctx, handle, 0, func(e store.Event) bool {
		all = append(all, e)
		return !stopped(e)
	}); err != nil {
		t.Fatalf("follow: %v (events so far %v)", err, kinds(all))
	}
	if len(all) == 0 || !stopped(all[len(all)-1]) {
		t.Fatalf("the follow ended before the compute did: %v", kinds(all))
	}
	CheckUnbroken(t, "followed to the end", all)
	// What each part records is there: the launch, the posts and the state
	// changes, the compute's start and end.
	var statuses []string
	running, settled := compute.Running == "", false
	for _, e := range all {
		switch {
		case e.Kind == eventlog.KindMailbox && e.Fields["kind"] == protocol.MsgStatus:
			statuses = append(statuses, e.Text)
		case e.Kind == eventlog.KindCompute && compute.Running != "" && e.Fields["event"] == compute.Running:
			running = true
		case e.Kind == eventlog.KindState && e.Fields["state"] == protocol.StateSettled:
			settled = true
		}
	}
	if strings.Join(statuses, ",") != "one,two,three" {
		t.Errorf("status posts %v, want one, two, three in order", statuses)
	}
	last := all[len(all)-1]
	ended := compute.Code == "" || last.Fields["code"] == compute.Code
	for _, f := range compute.StopFields {
		ended = ended && last.Fields[f] != ""
	}
	if !running || !settled || !ended {
		t.Errorf("running %v settled %v end %+v; events %v", running, settled, last, kinds(all))
	}
	// The resumed cursor replays exactly what it missed: with what it
	// read before, the whole log as a reader from 0 reads it now (which
	// the follow read a prefix of).
	readAll := func(after int64) []store.Event {
		var out []store.Event
		for {
			a, err := client.Events(ctx, handle, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Events) == 0 {
				return out
			}
			out = append(out, a.Events...)
			after = a.Next
		}
	}
	resumed := append(append([]store.Event(nil), early...), readAll(cursor)...)
	full := readAll(0)
	if !sameEvents(resumed, full) || len(full) < len(all) || !sameEvents(full[:len(all)], all) {
		t.Errorf("resumed\n %v\nfull\n %v\nfollowed\n %v", seqs(resumed), seqs(full), seqs(all))
	}
	cursor = full[len(full)-1].Seq
	// A long poll at the end holds, then answers nothing and the same
	// cursor.
	a, err := client.Events(ctx, handle, cursor, time.Second)
	if err != nil || len(a.Events) != 0 || a.Next != cursor {
		t.Errorf("poll past the end: %+v %v", a, err)
	}

	if wr, ok := h.(EventWriter); ok {
		// A stale cursor: a log past its bound (written as galley writes
		// it) answers one reset event, then the retained events.
		stale := "w-stale-" + RandomHex(t)[:8]
		for i := range store.MaxEvents + 3 {
			if err := wr.AppendEvent(ctx, stale, store.Event{At: time.Now(), Kind: eventlog.KindHarness, Text: fmt.Sprint(i)}); err != nil {
				t.Fatal(err)
			}
		}
		a, err = client.Events(ctx, stale, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Events) < 2 || a.Events[0].Kind != eventlog.KindReset || a.Events[0].Seq != 3 || a.Events[1].Seq != 4 ||
			a.Events[0].Fields["from"] != "1" || a.Events[0].Fields["to"] != "3" {
			t.Fatalf("stale cursor: %v", seqs(a.Events))
		}
		for _, e := range a.Events[1:] {
			if e.Kind == eventlog.KindReset {
				t.Fatalf("a second reset at %d", e.Seq)
			}
		}
	}

	// The galley commands with the operator token's file; kitchn's token
	// file is refused.
	if out := galley(t, h, "workers", "--json"); !strings.Contains(out, `"handle":"`+handle+`"`) {
		t.Errorf("galley workers --json does not list %s:\n%s", handle, out)
	}
	if out := galley(t, h, "events", handle, "--json"); strings.Count(out, "\n") < len(all) || !strings.Contains(out, `"text":"three"`) {
		t.Errorf("galley events: %d lines for %d events\n%s", strings.Count(out, "\n"), len(all), out)
	}
	if out, err := exec.Command(h.Galley(), "workers", "--endpoint", h.Endpoint(), "--token-file", h.TokenFile()).CombinedOutput(); err == nil {
		t.Errorf("galley workers with kitchn's token file succeeded:\n%s", out)
	}
}

// call makes one request of galley with a bearer token (if any), a JSON
// body (if any) and the headers given, following no redirect, and answers
// its status and body.
func call(t *testing.T, k Kitchn, method, path, bearer, body string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, k.Endpoint()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// consoleLogin logs in with the operator token as the console does and
// answers the session cookie as a Cookie header's value.
func consoleLogin(t *testing.T, k Kitchn) string {
	t.Helper()
	req, _ := http.NewRequest("POST", k.Endpoint()+operator.PathLogin, strings.NewReader(`{"token":"`+k.OperatorToken()+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(operator.CSRFHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == "galley_operator" && resp.StatusCode == http.StatusOK {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("login: %d %s, no session cookie", resp.StatusCode, b)
	return ""
}

// galley runs one galley operator command against the shape with the
// operator token's file and answers its stdout.
func galley(t *testing.T, h OperatorHouse, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.Galley(), append(args, "--endpoint", h.Endpoint(), "--token-file", h.OperatorTokenFile())...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("galley %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// eventsOf reads a worker's whole retained log with `galley events --json`.
func eventsOf(t *testing.T, h OperatorHouse, handle string) []store.Event {
	t.Helper()
	var out []store.Event
	for _, line := range strings.Split(strings.TrimSpace(galley(t, h, "events", handle, "--json")), "\n") {
		if line == "" {
			continue
		}
		var e store.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("events --json line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// followEvents runs `galley events <handle> --follow --json` until the
// test ends and answers the events it prints.
func followEvents(t *testing.T, h OperatorHouse, handle string) <-chan store.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	follow := exec.CommandContext(ctx, h.Galley(), "events", handle, "--follow", "--json",
		"--endpoint", h.Endpoint(), "--token-file", h.OperatorTokenFile())
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = follow.Wait() })
	followed := make(chan store.Event, 1000)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e store.Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				followed <- e
			}
		}
		close(followed)
	}()
	return followed
}

// streamFrom opens the worker's event stream with Last-Event-ID after and
// answers the id of its first event.
func streamFrom(t *testing.T, h OperatorHouse, handle, after string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.Endpoint()+operator.PathWorkers+"/"+handle+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+h.OperatorToken())
	req.Header.Set("Last-Event-ID", after)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			return id
		}
	}
	return ""
}

// CheckUnbroken fails unless es are numbered 1, 2, ... without a gap or
// a repeat.
func CheckUnbroken(t *testing.T, what string, es []store.Event) {
	t.Helper()
	for i, e := range es {
		if e.Seq != int64(i+1) {
			t.Fatalf("%s: event %d has number %d (a gap or a repeat): %v", what, i, e.Seq, seqs(es))
		}
	}
}

func seqs(es []store.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%d:%s", e.Seq, e.Kind)
	}
	return out
}

func kinds(es []store.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%d:%s/%s/%s", e.Seq, e.Kind, e.Fields["kind"]+e.Fields["event"]+e.Fields["state"], e.Text)
	}
	return out
}

func sameEvents(a, b []store.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, _ := json.Marshal(a[i])
		y, _ := json.Marshal(b[i])
		if string(x) != string(y) {
			return false
		}
	}
	return true
}
