package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// chromiumPath is Debian's Chromium, which the console's browser test
// drives (make test installs it when missing: scripts/browser-deps.sh).
const chromiumPath = "/usr/bin/chromium"

// TestConsoleBrowser runs the operator console in headless Chromium,
// driven by playwright-core (testdata/console.mjs), against the server
// `make run` runs: a scripted worker whose status and question carry
// markup and script; its events appear live, a reload shows the same
// timeline, a cancel from the console settles it (and kitchn's observe
// agrees), nothing the agent wrote runs or becomes an element, the token
// is never in storage or the URL, after a logout the session's old
// cookie is refused, and screenshots are taken at phone and desktop width
// (under GALLEY_CONSOLE_SHOTS when set). It also times the list render of
// 1,000 workers (docs/BENCHMARKS.md).
func TestConsoleBrowser(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	if _, err := os.Stat(chromiumPath); err != nil {
		missing = chromiumPath
	} else if _, err := os.Stat(filepath.Join(root, "node_modules", "playwright-core", "package.json")); err != nil {
		missing = "node_modules/playwright-core (npm ci)"
	}
	if missing != "" {
		if os.Getenv("GALLEY_REQUIRE_BROWSER") == "1" {
			t.Fatalf("the browser test needs %s (make test installs it: scripts/browser-deps.sh)", missing)
		}
		t.Skipf("no %s; GALLEY_REQUIRE_BROWSER=1 (make test) makes this a failure", missing)
	}
	shots := os.Getenv("GALLEY_CONSOLE_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o700); err != nil {
		t.Fatal(err)
	}

	s := startServer(t, t.TempDir())
	const run = "run-console"
	brief := "#!galley-script\n" +
		"status <img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>\n" +
		"usage 1000 200\n" +
		"ask hostile <b>subject</b> :: <script>window.__pwned=1</script> which way?\n" +
		"sleep 1h\n"
	h := launchScripted(t, s, run, "k-console-launch", brief, "console/one")
	m := &mailbox{s: s, run: run}
	q := m.next(t, "the question", kindBody("question", "<script>"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(root, "local", "e2e", "testdata", "console.mjs"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GALLEY_ENDPOINT="+s.Endpoint, "GALLEY_OPERATOR_TOKEN_FILE="+filepath.Join(s.Data, "private", "operator-token"),
		"GALLEY_TOKEN_FILE="+filepath.Join(s.Data, "private", "token"), "GALLEY_WORKER="+h, "GALLEY_RUN="+run,
		"GALLEY_QUESTION="+q.ID, "GALLEY_SHOT_DIR="+shots, "GALLEY_CHROMIUM="+chromiumPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("console.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var r struct {
		Screenshots                      []string
		Alerts, Errors                   []string
		TokenInStorage                   bool
		ListRows                         int
		ReplyStatus                      int
		LiveAdded                        int
		SameAfterReload                  bool
		Pwned                            bool
		Injected                         int
		MarkupShownAsText, PhoneOverflow bool
		Cancelled                        bool
		CookieAfterLogout                int
		List1000Ms                       struct {
			Median, Max float64
			Rows        int
		}
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err != nil {
		t.Fatalf("console.mjs printed %q: %v", stdout.String(), err)
	}
	switch {
	case r.TokenInStorage:
		t.Error("the operator token is in the page's storage, cookie or URL")
	case r.ListRows != 1:
		t.Errorf("the list shows %d rows, want the one worker", r.ListRows)
	case r.ReplyStatus != 200:
		t.Errorf("kitchn's reply answered %d", r.ReplyStatus)
	case r.LiveAdded < 2:
		t.Errorf("the reply added %d events to the open timeline, want the reply and the status after it", r.LiveAdded)
	case !r.SameAfterReload:
		t.Error("the timeline after a reload differs from before it")
	case r.Pwned || r.Injected != 0 || len(r.Alerts) != 0:
		t.Errorf("the agent's text ran or became markup: pwned %v, %d elements, alerts %v", r.Pwned, r.Injected, r.Alerts)
	case !r.MarkupShownAsText:
		t.Error("the agent's markup is not shown as text")
	case r.PhoneOverflow:
		t.Error("the page is wider than a phone's screen")
	case !r.Cancelled || len(r.Screenshots) != 4:
		t.Errorf("cancelled %v, screenshots %v", r.Cancelled, r.Screenshots)
	case r.CookieAfterLogout != http.StatusUnauthorized:
		t.Errorf("after the console's logout its old session cookie, replayed, answered %d, want 401 (0: no cookie, or not cleared)", r.CookieAfterLogout)
	}
	for _, e := range r.Errors {
		t.Errorf("page error: %s", e)
	}
	if st, oc := observe(t, s, h); st != "settled" || oc != "cancelled" {
		t.Errorf("observe after the console's cancel: %s %s, want settled cancelled", st, oc)
	}
	for _, f := range r.Screenshots {
		if fi, err := os.Stat(filepath.Join(shots, f)); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	t.Logf("console list render of 1,000 workers: median %.1f ms, max %.1f ms (5 runs); screenshots in %s",
		r.List1000Ms.Median, r.List1000Ms.Max, shots)
}
