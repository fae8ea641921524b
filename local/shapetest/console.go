package shapetest

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
)

// chromiumPath is Debian's Chromium, which the console's browser test
// drives (make test installs it when missing: scripts/browser-deps.sh).
const chromiumPath = "/usr/bin/chromium"

// Consoled is a shape under the console scenario.
type Consoled struct {
	// Name names the shape: screenshots are kept under
	// $GALLEY_CONSOLE_SHOTS/<Name> when that is set.
	Name string
	// Start starts galley in the shape, its default agent the scripted
	// one, for the run it answers the kitchn client of.
	Start func(t *testing.T) Kitchn
	// Live is how the shape's console follows a worker, as its session
	// says: operator.LiveStream (galley serve) or operator.LivePoll (the
	// stack, which cannot stream through Lambda).
	Live string
}

// Console runs the operator console in headless Chromium, driven by
// playwright-core (testdata/console.mjs), against the shape: /operator
// leads to the console; a scripted worker whose status and question carry
// markup and script is in the list; its events appear live as kitchn
// replies, followed the way the console's session says (a stream, or long
// polls and no stream request); the timeline is numbered without a gap or
// a repeat and the same after a reload; a cancel from the console settles
// the worker (and kitchn's observe agrees); nothing the agent wrote runs
// or becomes an element; the operator token is never in storage or the
// URL; after a logout the session's old cookie is refused; screenshots are
// taken at phone and desktop width. It also times the list render of
// 1,000 workers (docs/BENCHMARKS.md).
func Console(t *testing.T, c Consoled) {
	root := moduleRoot(t)
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
	} else if shots = filepath.Join(shots, c.Name); os.MkdirAll(shots, 0o700) != nil {
		t.Fatalf("cannot make %s", shots)
	}

	k := c.Start(t)
	const run = "run-console"
	brief := "#!galley-script\n" +
		"status <img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=1</script>\n" +
		"usage 1000 200\n" +
		"ask hostile <b>subject</b> :: <script>window.__pwned=1</script> which way?\n" +
		"sleep 1h\n"
	h := launchScripted(t, k, "k-console-launch", "console/one", brief)
	q := k.Next(t, "the question", Kind(protocol.MsgQuestion, "<script>"))

	tokens := t.TempDir()
	opFile, kitchnFile := filepath.Join(tokens, "operator-token"), filepath.Join(tokens, "token")
	for f, tok := range map[string]string{opFile: k.OperatorToken(), kitchnFile: k.Token()} {
		if err := os.WriteFile(f, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var r struct {
		URL                              string
		Screenshots                      []string
		Alerts, Errors                   []string
		TokenInStorage                   bool
		ListRows                         int
		ReplyStatus                      int
		LiveAdded                        int
		Streams, Polls                   int
		Seqs                             []int64
		SameAfterReload                  bool
		Live, AfterCancel                string
		Pwned                            bool
		Injected                         int
		MarkupShownAsText, PhoneOverflow bool
		Cancelled                        bool
		CookieAfterLogout                int
		List1000Ms                       struct {
			Median, Max             float64
			Rows                    int
			ParkedState, ReadyState string
		}
	}
	runNode(t, root, "console.mjs", []string{"GALLEY_ENDPOINT=" + k.Endpoint(), "GALLEY_OPERATOR_TOKEN_FILE=" + opFile,
		"GALLEY_TOKEN_FILE=" + kitchnFile, "GALLEY_WORKER=" + h, "GALLEY_RUN=" + run, "GALLEY_HOUSE=" + k.House(),
		"GALLEY_QUESTION=" + q.ID, "GALLEY_SHOT_DIR=" + shots, "GALLEY_CHROMIUM=" + chromiumPath}, &r)
	if !strings.HasSuffix(r.URL, operator.PathConsole) {
		t.Errorf("/operator led to %s, want the console", r.URL)
	}
	if r.TokenInStorage {
		t.Error("the operator token is in the page's storage, cookie or URL")
	}
	if r.ListRows != 1 {
		t.Errorf("the list shows %d rows, want the one worker", r.ListRows)
	}
	if r.ReplyStatus != 200 {
		t.Errorf("kitchn's reply answered %d", r.ReplyStatus)
	}
	if r.LiveAdded < 2 {
		t.Errorf("the reply added %d events to the open timeline, want the reply and the status after it", r.LiveAdded)
	}
	switch c.Live {
	case operator.LivePoll:
		if r.Streams != 0 || r.Polls == 0 {
			t.Errorf("%d stream requests and %d long polls, want long polls only", r.Streams, r.Polls)
		}
	case operator.LiveStream:
		if r.Streams == 0 || r.Polls != 0 {
			t.Errorf("%d stream requests and %d long polls, want the stream only", r.Streams, r.Polls)
		}
	default:
		t.Fatalf("the shape's console follows by %q", c.Live)
	}
	for i, seq := range r.Seqs {
		if seq != int64(i+1) {
			t.Errorf("timeline numbered %v: a gap or a repeat", r.Seqs)
			break
		}
	}
	if !r.SameAfterReload || r.Live != "live" {
		t.Errorf("same after reload %v, status %q", r.SameAfterReload, r.Live)
	}
	if r.Pwned || r.Injected != 0 || len(r.Alerts) != 0 {
		t.Errorf("the agent's text ran or became markup: pwned %v, %d elements, alerts %v", r.Pwned, r.Injected, r.Alerts)
	}
	if !r.MarkupShownAsText {
		t.Error("the agent's markup is not shown as text")
	}
	if r.PhoneOverflow {
		t.Error("the page is wider than a phone's screen")
	}
	if !r.Cancelled || len(r.Screenshots) != 4 {
		t.Errorf("cancelled %v, screenshots %v", r.Cancelled, r.Screenshots)
	}
	if r.AfterCancel != "cancel done" && r.AfterCancel != "live" {
		t.Errorf("status after the cancel %q, want the cancel done (or the follow's live, which races it)", r.AfterCancel)
	}
	if r.CookieAfterLogout != http.StatusUnauthorized {
		t.Errorf("after the console's logout its old session cookie, replayed, answered %d, want 401 (0: no cookie, or not cleared)", r.CookieAfterLogout)
	}
	if r.List1000Ms.Rows != 1000 || r.List1000Ms.ParkedState != "awaiting-reply, parked" || r.List1000Ms.ReadyState != "ready" {
		t.Errorf("the list of 1,000 shows %d rows, a parked worker's state %q, a ready one's %q; want 1000, \"awaiting-reply, parked\", \"ready\"",
			r.List1000Ms.Rows, r.List1000Ms.ParkedState, r.List1000Ms.ReadyState)
	}
	for _, e := range r.Errors {
		t.Errorf("page error: %s", e)
	}
	if obs := k.Observe(t, h); obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeCancelled {
		t.Errorf("observe after the console's cancel: %s %s, want settled cancelled", obs.State, obs.Outcome)
	}
	for _, f := range r.Screenshots {
		if fi, err := os.Stat(filepath.Join(shots, f)); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", f, err)
		}
	}
	t.Logf("console list render of 1,000 workers: median %.1f ms, max %.1f ms (5 runs); screenshots in %s",
		r.List1000Ms.Median, r.List1000Ms.Max, shots)
}

// launchScripted launches a worker of the shape's default agent (the
// scripted one) and answers its handle.
func launchScripted(t *testing.T, k Kitchn, key, branch, brief string) string {
	t.Helper()
	b, _ := json.Marshal(brief)
	rc := apply(t, k, key, `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":`+string(b)+`,"branch":"`+branch+`"}`)
	for _, c := range rc.Created {
		if c.Kind == protocol.KindWorker {
			return c.Handle
		}
	}
	t.Fatalf("launch %s created no worker: %+v", key, rc)
	return ""
}

// moduleRoot is the galley module's root folder.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		t.Fatalf("go env GOMOD: %q %v", out, err)
	}
	return filepath.Dir(mod)
}
