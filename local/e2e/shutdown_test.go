package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/operator"
)

// shutdownBound is how long galley serve may take to end on Ctrl-C with
// calls held: loose, for a busy machine (it takes well under a second on
// a quiet one; it took the longest hold, 25 s, before held calls were
// answered at shutdown).
const shutdownBound = 10 * time.Second

// heldAnswer is what a held call got, and when.
type heldAnswer struct {
	what   string
	status int
	body   string
	err    error
	at     time.Time
}

// TestServeShutdownAnswersHeldCalls: Ctrl-C (SIGINT) on galley serve ends
// it promptly although calls are held. A deliveries/await answers 200
// empty at once, as its deadline would; the operator's event long poll
// answers 200 with no event; its event stream ends; a live worker's
// harness holds its inbox poll all along. The process exits 0, and what it
// wrote is whole: a server started again on the same data answers the
// launch's retry with the same receipt and holds the worker's events
// without a gap.
func TestServeShutdownAnswersHeldCalls(t *testing.T) {
	data := t.TempDir()
	addr := ""
	s := serverOn(t, data, &addr)

	key := "k-shutdown-launch"
	launchBody := effectBody("run-shutdown", key, launchEffect("#!galley-script\nstatus up\nsleep 1h", "shutdown/branch"))
	st, launch := s.call(t, "POST", "/v1/effects", launchBody, "Idempotency-Key", key)
	if st != 200 || !strings.Contains(string(launch), `"applied"`) {
		t.Fatalf("launch: %d %s", st, launch)
	}
	var out struct {
		Receipt struct {
			Created []struct{ Kind, Handle string }
		}
	}
	if err := json.Unmarshal(launch, &out); err != nil {
		t.Fatalf("launch answer %s: %v", launch, err)
	}
	worker := ""
	for _, c := range out.Receipt.Created {
		if c.Kind == "worker" {
			worker = c.Handle
		}
	}
	if worker == "" {
		t.Fatalf("launch answer %s names no worker", launch)
	}
	opToken, err := os.ReadFile(filepath.Join(data, "private", "operator-token"))
	if err != nil {
		t.Fatal(err)
	}
	// Calls that hold until their deadline or an event: an await on a run
	// nobody posts to, and the operator's poll and stream past any event
	// the worker will have.
	const far = 1_000_000
	answers := make(chan heldAnswer, 3)
	hold := func(what, method, path, body, token string, header ...string) {
		go func() {
			a := heldAnswer{what: what}
			defer func() { a.at = time.Now(); answers <- a }()
			req, err := http.NewRequest(method, s.Endpoint+path, strings.NewReader(body))
			if err != nil {
				a.err = err
				return
			}
			req.Header.Set("Authorization", "Bearer "+token)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				a.err = err
				return
			}
			defer resp.Body.Close()
			a.status = resp.StatusCode
			b, err := io.ReadAll(resp.Body)
			a.body, a.err = string(b), err
		}()
	}
	hold("await", "POST", "/v1/deliveries/await", `{"run":"run-held","coordinator":"c1","waitMs":25000}`, s.Token)
	hold("event poll", "GET", fmt.Sprintf("%s/%s/events?after=%d&wait=25", operator.PathWorkers, worker, far), "", strings.TrimSpace(string(opToken)))
	hold("event stream", "GET", fmt.Sprintf("%s/%s/stream", operator.PathWorkers, worker), "", strings.TrimSpace(string(opToken)),
		"Last-Event-ID", fmt.Sprint(far))
	select {
	case a := <-answers:
		t.Fatalf("the %s answered before the signal: %d %s %v", a.what, a.status, a.body, a.err)
	case <-time.After(1500 * time.Millisecond):
	}

	signalled := time.Now()
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	select {
	case err := <-exited:
		took := time.Since(signalled)
		t.Logf("galley serve ended %v after SIGINT", took.Round(time.Millisecond))
		if err != nil {
			t.Fatalf("galley serve exited with %v: %s", err, s.stderr.String())
		}
		if took > shutdownBound {
			t.Errorf("galley serve took %v to end on SIGINT, more than %v", took, shutdownBound)
		}
	case <-time.After(3 * shutdownBound):
		_ = s.cmd.Process.Kill()
		t.Fatalf("galley serve did not end within %v of SIGINT", 3*shutdownBound)
	}
	for range 3 {
		var a heldAnswer
		select {
		case a = <-answers:
		case <-time.After(shutdownBound):
			t.Fatal("a held call had no answer after galley serve ended")
		}
		t.Logf("the %s answered %v after SIGINT: %d %s", a.what, a.at.Sub(signalled).Round(time.Millisecond), a.status, strings.TrimSpace(a.body))
		if a.err != nil || a.status != 200 {
			t.Errorf("the %s: %d %v", a.what, a.status, a.err)
			continue
		}
		switch a.what {
		case "await":
			var ans struct{ Status string }
			if err := json.Unmarshal([]byte(a.body), &ans); err != nil || ans.Status != "empty" {
				t.Errorf("the await answered %s, want status empty", a.body)
			}
		case "event poll":
			var ans operator.EventsAnswer
			if err := json.Unmarshal([]byte(a.body), &ans); err != nil || len(ans.Events) != 0 || ans.Next != far {
				t.Errorf("the event poll answered %s, want no event and next %d", a.body, far)
			}
		case "event stream":
			if strings.Contains(a.body, "data:") {
				t.Errorf("the event stream sent an event past %d: %s", far, a.body)
			}
		}
	}

	// What the server wrote before it ended is whole.
	again := serverOn(t, data, &addr)
	st, replay := again.call(t, "POST", "/v1/effects", launchBody, "Idempotency-Key", key)
	if st != 200 || string(replay) != string(launch) {
		t.Fatalf("the launch's retry after the restart answered %d %s, want %s", st, replay, launch)
	}
	es := eventsOf(t, again, worker)
	if len(es) == 0 {
		t.Fatal("the worker's events are gone after the restart")
	}
	shapetest.CheckUnbroken(t, "the worker's events after the restart", es)
}
