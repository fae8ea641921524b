package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/store"
)

// operatorCmd runs one galley operator command against s with the
// server's operator token and answers its stdout.
func operatorCmd(t *testing.T, s *server, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append(args, "--endpoint", s.Endpoint, "--token-file", filepath.Join(s.Data, "private", "operator-token"))
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "galley"), full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("galley %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// eventsOf reads a worker's whole retained log with `galley events --json`.
func eventsOf(t *testing.T, s *server, handle string) []store.Event {
	t.Helper()
	var out []store.Event
	for _, line := range strings.Split(strings.TrimSpace(operatorCmd(t, s, "events", handle, "--json")), "\n") {
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

// checkUnbroken fails unless es are numbered 1, 2, ... without a gap or
// a repeat.
func checkUnbroken(t *testing.T, what string, es []store.Event) {
	t.Helper()
	for i, e := range es {
		if e.Seq != int64(i+1) {
			t.Fatalf("%s: event %d has number %d (a gap or a repeat): %v", what, i, e.Seq, es)
		}
	}
}

func hasEvent(es []store.Event, kind string, fields map[string]string) bool {
	return slices.ContainsFunc(es, func(e store.Event) bool {
		if e.Kind != kind {
			return false
		}
		for k, v := range fields {
			if e.Fields[k] != v {
				return false
			}
		}
		return true
	})
}

func opCall(t *testing.T, s *server, method, path, token string, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.Endpoint+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes()
}

// TestOperator runs the operator's commands against a real server: the
// operator token and kitchn's open only their own routes; a scripted
// worker's events (state, mailbox, usage, what the harness saw) are
// numbered without a gap; a follower sees the reply as it happens; a
// SIGKILL of the server loses no acknowledged event and repeats none; a
// reconnecting stream resumes after its Last-Event-ID; cancel and revoke
// act through the service, and kitchn's observe agrees.
func TestOperator(t *testing.T) {
	s := startServer(t, t.TempDir())
	b, err := os.ReadFile(filepath.Join(s.Data, "private", "operator-token"))
	if err != nil {
		t.Fatal(err)
	}
	opToken := strings.TrimSpace(string(b))
	if st, _ := opCall(t, s, "GET", "/operator/v1/workers", s.Token); st != http.StatusUnauthorized {
		t.Errorf("kitchn's token opened the operator API: %d", st)
	}
	if st, _ := opCall(t, s, contract.RouteDescriptor.Method, contract.PathDescriptor, opToken); st != http.StatusUnauthorized {
		t.Errorf("the operator token opened kitchn's routes: %d", st)
	}
	if st, _ := opCall(t, s, "GET", "/operator/v1/workers", ""); st != http.StatusUnauthorized {
		t.Errorf("the operator API answered without a token: %d", st)
	}
	if st, body := opCall(t, s, "GET", "/operator/v1/workers", opToken); st != http.StatusOK {
		t.Fatalf("the operator token was refused: %d %s", st, body)
	}
	// The console's session: a login's cookie opens the API until its
	// logout, and after it the old cookie, replayed, is refused.
	ended := consoleLogin(t, s, opToken)
	if st, body := opCall(t, s, "GET", "/operator/v1/workers", "", "Cookie", ended); st != http.StatusOK {
		t.Fatalf("a read with the session cookie: %d %s", st, body)
	}
	if st, body := opCall(t, s, "POST", "/operator/v1/logout", "", "Cookie", ended, "X-Galley-Operator", "1"); st != http.StatusOK {
		t.Fatalf("logout: %d %s", st, body)
	}
	if st, _ := opCall(t, s, "GET", "/operator/v1/workers", "", "Cookie", ended); st != http.StatusUnauthorized {
		t.Errorf("after logout the old session cookie opened the API: %d, want 401", st)
	}
	// A session lives in the store: it outlives the server's kill below.
	kept := consoleLogin(t, s, opToken)

	const run = "run-op"
	brief := "#!galley-script\nstatus hello <b>there</b>\nusage 120 30\nask need input :: which way?\nsleep 1h\n"
	h := launchScripted(t, s, run, "k-op-launch", brief, "op/one")
	m := &mailbox{s: s, run: run}
	q := m.next(t, "the question", kindBody("question", "which way"))

	// A follower from the start sees every event so far, then the reply
	// as it happens.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	follow := exec.CommandContext(ctx, filepath.Join(binDir, "galley"), "events", h, "--follow", "--json",
		"--endpoint", s.Endpoint, "--token-file", filepath.Join(s.Data, "private", "operator-token"))
	out, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = follow.Wait() }()
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
	workerEffect(t, s, run, "k-op-reply", fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"left"}`, workerRes(h), q.ID))
	var got []store.Event
	deadline := time.After(60 * time.Second)
	for !hasEvent(got, "mailbox", map[string]string{"kind": "reply", "question": q.ID}) {
		select {
		case e, ok := <-followed:
			if !ok {
				t.Fatalf("the follower ended; it saw %v", got)
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("the follower did not see the reply; it saw %v", got)
		}
	}
	checkUnbroken(t, "followed", got)
	m.next(t, "the status after the reply", kindBody("status", "reply: left"))

	before := eventsOf(t, s, h)
	checkUnbroken(t, "before the kill", before)
	for _, want := range []struct {
		kind   string
		fields map[string]string
	}{
		{"state", map[string]string{"state": "ready"}},
		{"state", map[string]string{"state": "awaiting-reply"}},
		{"mailbox", map[string]string{"kind": "status"}},
		{"mailbox", map[string]string{"kind": "question", "id": q.ID}},
		{"mailbox", map[string]string{"kind": "reply"}},
		{"usage", map[string]string{"input": "120", "output": "30"}},
		{"compute", map[string]string{"event": "started"}},
		{"harness", map[string]string{"event": "workspace"}},
		{"harness", map[string]string{"event": "agent-started"}},
		{"harness", map[string]string{"event": "tool", "tool": "ask_coordinator"}},
	} {
		if !hasEvent(before, want.kind, want.fields) {
			t.Errorf("no %s event with %v in %v", want.kind, want.fields, before)
		}
	}
	for _, e := range before {
		if strings.Contains(e.Text, s.Token) || strings.Contains(e.Text, opToken) {
			t.Errorf("event %d holds a token", e.Seq)
		}
	}

	// SIGKILL the server; a new one on the same data keeps every event
	// and numbers on from the last.
	s.kill()
	s2 := startServer(t, s.Data)
	after := eventsOf(t, s2, h)
	if len(after) < len(before) {
		t.Fatalf("after the kill the log has %d events, before it %d", len(after), len(before))
	}
	for i := range before {
		if before[i].Seq != after[i].Seq || before[i].Kind != after[i].Kind || before[i].Text != after[i].Text {
			t.Fatalf("event %d changed across the kill: %+v, now %+v", i+1, before[i], after[i])
		}
	}

	if st, body := opCall(t, s2, "GET", "/operator/v1/workers", "", "Cookie", kept); st != http.StatusOK {
		t.Errorf("a session issued before the kill, after it: %d %s", st, body)
	}
	if st, _ := opCall(t, s2, "POST", "/operator/v1/logout", "", "Cookie", kept, "X-Galley-Operator", "1"); st != http.StatusOK {
		t.Errorf("logout after the kill: %d", st)
	}
	if st, _ := opCall(t, s2, "GET", "/operator/v1/workers", "", "Cookie", kept); st != http.StatusUnauthorized {
		t.Errorf("after logout the old session cookie opened the API: %d, want 401", st)
	}

	// A stream resumes after its Last-Event-ID.
	req, _ := http.NewRequestWithContext(ctx, "GET", s2.Endpoint+"/operator/v1/workers/"+h+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Last-Event-ID", "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	firstID := ""
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			firstID = id
			break
		}
	}
	resp.Body.Close()
	if firstID != "3" {
		t.Errorf("a stream with Last-Event-ID 2 began at %q, want 3", firstID)
	}

	if list := operatorCmd(t, s2, "workers"); !strings.Contains(list, h) || !strings.Contains(list, "ready") {
		t.Errorf("galley workers does not show %s ready:\n%s", h, list)
	}
	if out := operatorCmd(t, s2, "cancel", h); !strings.Contains(out, "cancelled "+h) {
		t.Errorf("galley cancel said %q", out)
	}
	operatorCmd(t, s2, "cancel", h) // again: the same idempotent path
	if st, oc := observe(t, s2, h); st != "settled" || oc != "cancelled" {
		t.Errorf("observe after galley cancel: %s %s, want settled cancelled", st, oc)
	}
	if out := operatorCmd(t, s2, "revoke", h, "--json"); !strings.Contains(out, `"action":"revoked"`) {
		t.Errorf("galley revoke --json said %q", out)
	}
	var ws struct {
		Workers []struct{ Handle, State, Outcome string }
	}
	if err := json.Unmarshal([]byte(operatorCmd(t, s2, "workers", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	if len(ws.Workers) != 1 || ws.Workers[0].State != "settled" || ws.Workers[0].Outcome != "cancelled" {
		t.Errorf("galley workers --json: %+v", ws)
	}
	// The events the actions made arrive (the recorder is asynchronous).
	var final []store.Event
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		final = eventsOf(t, s2, h)
		if hasEvent(final, "state", map[string]string{"state": "settled", "outcome": "cancelled"}) && hasEvent(final, "credential", nil) {
			break
		}
	}
	checkUnbroken(t, "after the actions", final)
	if !hasEvent(final, "action", map[string]string{"action": "cancel"}) || !hasEvent(final, "credential", nil) ||
		!hasEvent(final, "state", map[string]string{"state": "settled", "outcome": "cancelled"}) {
		t.Errorf("the log lacks the cancel or the revoke: %v", final)
	}
}

// consoleLogin logs in to the console's API with the operator token, as
// the page does, and answers the session cookie as a Cookie header's
// value.
func consoleLogin(t *testing.T, s *server, opToken string) string {
	t.Helper()
	req, err := http.NewRequest("POST", s.Endpoint+"/operator/v1/login", strings.NewReader(`{"token":"`+opToken+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Galley-Operator", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "galley_operator" && resp.StatusCode == http.StatusOK {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("login: %d, no session cookie", resp.StatusCode)
	return ""
}

// launchScripted launches a worker of the server's default agent (the
// scripted one) and answers its handle.
func launchScripted(t *testing.T, s *server, run, key, brief, branch string) string {
	t.Helper()
	st, ans := s.kitchn(t, contract.RouteEffects, effectBody(run, key, launchEffect(brief, branch)), "Idempotency-Key", key)
	var out struct {
		Status  string
		Receipt struct {
			Created []struct{ Kind, Handle string }
		}
	}
	_ = json.Unmarshal(ans, &out)
	for _, c := range out.Receipt.Created {
		if st == 200 && out.Status == "applied" && c.Kind == "worker" {
			return c.Handle
		}
	}
	t.Fatalf("launch: %d %s", st, ans)
	return ""
}
