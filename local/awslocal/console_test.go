package awslocal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
)

// chromiumPath is Debian's Chromium (scripts/browser-deps.sh installs it).
const chromiumPath = "/usr/bin/chromium"

// TestConsoleLongPollAWSLocal runs the operator console as the stack
// serves it, in headless Chromium driven by playwright-core
// (testdata/console-poll.mjs): /operator redirects to the console, whose
// session says to long poll (the stack cannot stream through Lambda); a
// scripted worker's statuses appear live without a stream request, the
// timeline is numbered without a gap or a repeat and the same after a
// reload, and a cancel from the console settles the worker, as kitchn's
// observe agrees.
func TestConsoleLongPollAWSLocal(t *testing.T) {
	root, err := moduleRoot()
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
	s, token := startStack(t)
	h := launchScript(t, s, token, "run-console", "k-console-1",
		"#!galley-script\nstatus status-one\nsleep 2s\nstatus status-two\nsleep 2s\nstatus status-three\nsleep 1h")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(root, "local", "awslocal", "testdata", "console-poll.mjs"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GALLEY_ENDPOINT="+s.Endpoint(), "GALLEY_OPERATOR_TOKEN_FILE="+s.OperatorTokenFile(),
		"GALLEY_WORKER="+h, "GALLEY_CHROMIUM="+chromiumPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("console-poll.mjs: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var r struct {
		URL             string
		Errors          []string
		Streams, Polls  int
		Seqs            []int64
		SameAfterReload bool
		Cancelled       bool
		Live            string
		AfterCancel     string
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err != nil {
		t.Fatalf("console-poll.mjs printed %q: %v", stdout.String(), err)
	}
	if !strings.HasSuffix(r.URL, "/operator/console") {
		t.Errorf("/operator led to %s, want the console", r.URL)
	}
	if r.Streams != 0 || r.Polls == 0 {
		t.Errorf("%d stream requests and %d long polls, want long polls only", r.Streams, r.Polls)
	}
	for i, seq := range r.Seqs {
		if seq != int64(i+1) {
			t.Errorf("timeline numbered %v: a gap or a repeat", r.Seqs)
			break
		}
	}
	if !r.SameAfterReload || !r.Cancelled || r.Live != "live" {
		t.Errorf("same after reload %v, cancelled %v, status %q", r.SameAfterReload, r.Cancelled, r.Live)
	}
	if r.AfterCancel != "cancel done" && r.AfterCancel != "live" {
		t.Errorf("status after the cancel %q, want the cancel done (or the poll's live, which races it)", r.AfterCancel)
	}
	for _, e := range r.Errors {
		t.Errorf("page error: %s", e)
	}
	observe := `{"worker":{"kind":"worker","backend":"galley","handle":"` + h + `"}}`
	var obs protocol.Observation
	call(t, s, token, "POST", "/v1/workers/observe", observe, &obs)
	if obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeCancelled {
		t.Errorf("observe after the console's cancel: %s %s, want settled cancelled", obs.State, obs.Outcome)
	}
}
