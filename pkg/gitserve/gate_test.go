package gitserve_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/gitserve"
)

// gated is a worker's push gate for branch in front of h, as a harness
// wires it: the agent authenticates with a session secret, the gate
// forwards with the house credential. It returns the gate's URL and the
// session credential.
func gated(t testing.TB, h house, branch string) (url, user, session string) {
	t.Helper()
	houseURL, houseUser, housePass := served(t, h)
	var tok atomic.Value
	tok.Store(housePass)
	user, session = "agent", secret(t)
	gate := gitserve.BasicAuth("galley push gate", gitserve.Credential(user, session),
		gitserve.PushGate(gitserve.OnlyBranch(branch), upstreamOf(t, houseURL, houseUser, &tok)))
	srv := httptest.NewServer(gate)
	t.Cleanup(srv.Close)
	return srv.URL + "/house.git", user, session
}

func TestPushGate(t *testing.T) {
	const branch = "kitchen/w1"
	h := newHouse(t, "other")
	url, user, session := gated(t, h, branch)
	dir := filepath.Join(t.TempDir(), "agent")
	git := func(args ...string) string { t.Helper(); return must(t, dir, user, session, args...) }
	must(t, "", user, session, "clone", "--quiet", url, dir) // fetches pass

	// The worker's own branch: create, update, force.
	git("commit", "--quiet", "--allow-empty", "-m", "one")
	git("push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	git("commit", "--quiet", "--allow-empty", "-m", "two")
	git("push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
	git("reset", "--quiet", "--hard", "HEAD~2")
	git("commit", "--quiet", "--allow-empty", "-m", "rewritten")
	git("push", "--quiet", "--force", "origin", "HEAD:refs/heads/"+branch)
	own := git("rev-parse", "HEAD")
	if got := must(t, h.dir, "", "", "rev-parse", "refs/heads/"+branch); got != own {
		t.Fatalf("%s at %s, want the forced %s", branch, got, own)
	}
	git("fetch", "--quiet", "origin")

	before := h.refs(t)
	refused := []struct {
		name   string
		args   []string
		ref    string // as git names it in "[remote rejected] <ref>"
		reason string
	}{
		{"push to main", []string{"push", "origin", "HEAD:refs/heads/main"}, "main", "may push only refs/heads/" + branch},
		{"new branch", []string{"push", "origin", "HEAD:refs/heads/sneaky"}, "sneaky", "may push only refs/heads/" + branch},
		{"delete another branch", []string{"push", "origin", ":refs/heads/other"}, "other", "may push only refs/heads/" + branch},
		{"force another branch", []string{"push", "--force", "origin", "HEAD:refs/heads/other"}, "other", "may push only refs/heads/" + branch},
		{"a tag", []string{"push", "origin", "HEAD:refs/tags/v1"}, "v1", "tags may not be pushed"},
		{"delete own branch", []string{"push", "origin", ":refs/heads/" + branch}, branch, "may not be deleted"},
		{"own and main together", []string{"push", "origin", "HEAD:refs/heads/main", "HEAD~0:refs/heads/" + branch}, "main", "may push only"},
		{"with --no-verify", []string{"push", "--no-verify", "origin", "HEAD:main"}, "main", "may push only"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "own and main together" {
				git("commit", "--quiet", "--allow-empty", "-m", "more") // so the own ref has something to update
			}
			r := gitAs(dir, user, session, tc.args...)
			if r.err == nil {
				t.Fatalf("git %v succeeded:\n%s", tc.args, r.stderr)
			}
			named := strings.Contains(r.stderr, " -> "+tc.ref+" (") || strings.Contains(r.stderr, "] "+tc.ref+" (")
			if !strings.Contains(r.stderr, "! [remote rejected]") || !named || !strings.Contains(r.stderr, tc.reason) {
				t.Fatalf("git's stderr does not say why:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr, "remote: push of refs/") {
				t.Errorf("no remote: line explaining the refusal:\n%s", r.stderr)
			}
			if tc.name == "own and main together" && !strings.Contains(r.stderr, "atomic push failure") {
				t.Errorf("the allowed ref of a refused push is not reported as refused:\n%s", r.stderr)
			}
			if got := h.refs(t); got != before {
				t.Fatalf("the house changed:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

func TestPushGateNoBranch(t *testing.T) {
	h := newHouse(t)
	url, user, session := gated(t, h, "")
	dir := filepath.Join(t.TempDir(), "agent")
	must(t, "", user, session, "clone", "--quiet", url, dir)
	must(t, dir, "", "", "commit", "--quiet", "--allow-empty", "-m", "x")
	before := h.refs(t)
	r := gitAs(dir, user, session, "push", "origin", "HEAD:refs/heads/anything")
	if r.err == nil || !strings.Contains(r.stderr, "has no branch and may push nothing") {
		t.Fatalf("push from a branchless worker: %v\n%s", r.err, r.stderr)
	}
	if h.refs(t) != before {
		t.Fatal("the house changed")
	}
}

// recorder is a next handler that keeps what reached it.
type recorder struct {
	body     []byte
	encoding string
	calls    int
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.calls++
	rec.body, _ = io.ReadAll(r.Body)
	rec.encoding = r.Header.Get("Content-Encoding")
}

const (
	zero = "0000000000000000000000000000000000000000"
	idA  = "1111111111111111111111111111111111111111"
	idB  = "2222222222222222222222222222222222222222"
)

func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func post(t *testing.T, h http.Handler, body []byte, gz bool) *httptest.ResponseRecorder {
	t.Helper()
	if gz {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		zw.Write(body)
		zw.Close()
		body = b.Bytes()
	}
	req := httptest.NewRequest("POST", "/repo.git/git-receive-pack", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	if gz {
		req.Header.Set("Content-Encoding", "gzip")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestPushGateWire checks what git's client does not exercise: gzip
// bodies, push options and certificates, malformed commands, fetches.
func TestPushGateWire(t *testing.T) {
	pack := "PACK\x00\x00\x00\x02\x00\x00\x00\x00fake-pack-bytes"
	allowed := pktLine(zero+" "+idA+" refs/heads/w1\x00report-status side-band-64k agent=git/2.39\n") + "0000" + pack

	for _, gz := range []bool{false, true} {
		rec := &recorder{}
		w := post(t, gitserve.PushGate(gitserve.OnlyBranch("w1"), rec), []byte(allowed), gz)
		if rec.calls != 1 || string(rec.body) != allowed || rec.encoding != "" {
			t.Fatalf("gzip=%v: allowed push reached next %d times with %q (encoding %q); status %d",
				gz, rec.calls, rec.body, rec.encoding, w.Code)
		}
	}

	refusals := []struct {
		name, body, want string
		status           int
	}{
		{"gzipped refusal, no side-band",
			pktLine(idA+" "+idB+" refs/heads/main\x00report-status\n") + "0000" + pack,
			pktLine("unpack ok\n") + pktLine("ng refs/heads/main galley: this worker may push only refs/heads/w1\n") + "0000", 200},
		{"push options",
			pktLine(zero+" "+idA+" refs/heads/w1\x00report-status push-options\n") + "0000" + pktLine("ci.skip") + "0000" + pack,
			"ng refs/heads/w1 galley: push options are not accepted here", 200},
		{"push certificate",
			pktLine("push-cert\x00report-status\n") + pktLine("certificate version 0.1\n"),
			"push certificates", http.StatusForbidden},
		{"malformed command", pktLine("not a command\n") + "0000", "malformed push", http.StatusBadRequest},
		{"short id", pktLine(zero[:39]+" "+idA+" refs/heads/w1\n") + "0000", "malformed push", http.StatusBadRequest},
		{"truncated", pktLine(zero + " " + idA + " refs/heads/w1\n"), "malformed push", http.StatusBadRequest},
		{"bad length", "zzzz", "malformed push", http.StatusBadRequest},
		{"no report asked", pktLine(idA+" "+idB+" refs/heads/main\n") + "0000", "may push only", http.StatusForbidden},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			w := post(t, gitserve.PushGate(gitserve.OnlyBranch("w1"), rec), []byte(tc.body), strings.HasPrefix(tc.name, "gzipped"))
			if rec.calls != 0 {
				t.Fatal("a refused push reached next")
			}
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("answer %d %q, want %d with %q", w.Code, w.Body.String(), tc.status, tc.want)
			}
		})
	}

	// Fetches and the push advertisement pass untouched.
	rec := &recorder{}
	gate := gitserve.PushGate(gitserve.OnlyBranch(""), rec)
	for _, target := range []string{"/r.git/info/refs?service=git-receive-pack", "/r.git/info/refs?service=git-upload-pack"} {
		gate.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", target, nil))
	}
	gate.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/r.git/git-upload-pack", strings.NewReader("0000")))
	if rec.calls != 3 {
		t.Fatalf("%d of 3 fetch requests reached next", rec.calls)
	}
	if w := httptest.NewRecorder(); true {
		gate.ServeHTTP(w, httptest.NewRequest("GET", "/r.git/git-receive-pack", nil))
		if w.Code != http.StatusMethodNotAllowed || rec.calls != 3 {
			t.Fatalf("GET git-receive-pack: %d", w.Code)
		}
	}
}

func TestOnlyBranch(t *testing.T) {
	p := gitserve.OnlyBranch("w1")
	for _, tc := range []struct {
		u  gitserve.RefUpdate
		ok bool
	}{
		{gitserve.RefUpdate{"refs/heads/w1", zero, idA}, true},
		{gitserve.RefUpdate{"refs/heads/w1", idA, idB}, true},
		{gitserve.RefUpdate{"refs/heads/w1", idA, zero}, false},
		{gitserve.RefUpdate{"refs/heads/w10", zero, idA}, false},
		{gitserve.RefUpdate{"refs/heads/w1/x", zero, idA}, false},
		{gitserve.RefUpdate{"refs/tags/w1", zero, idA}, false},
		{gitserve.RefUpdate{"refs/remotes/origin/w1", zero, idA}, false},
		{gitserve.RefUpdate{"HEAD", idA, idB}, false},
		{gitserve.RefUpdate{"refs/heads/main", idA, idB}, false},
	} {
		if err := p(tc.u); (err == nil) != tc.ok {
			t.Errorf("OnlyBranch(w1)(%v) = %v, want allowed=%v", tc.u, err, tc.ok)
		}
	}
	if err := gitserve.OnlyBranch("")(gitserve.RefUpdate{"refs/heads/x", zero, idA}); err == nil {
		t.Error(`OnlyBranch("") allowed a push`)
	}
}
