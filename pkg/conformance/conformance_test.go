package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run the suite's client layer and some checks against
// httptest servers that answer canned wire bytes; the whole suite runs
// against a real `galley serve` in the lead's end-to-end test.

const testToken = "test-token-for-conformance-tests"

func testConfig(endpoint string, only ...string) Config {
	return Config{Endpoint: endpoint, Token: testToken, House: "h1", Backend: "b1", Credential: "c1", Only: only}
}

func descriptorJSON(house string, caps map[string]string, selection bool) string {
	all := map[string]string{}
	for _, c := range requiredCapabilities {
		all[c] = "supported"
	}
	for c, v := range caps {
		if v == "" {
			delete(all, c)
		} else {
			all[c] = v
		}
	}
	d := map[string]any{"backend": "b1", "house": house, "capabilities": all}
	if selection {
		d["workerSelection"] = map[string]any{"families": []string{"claude", "codex"}, "model": true, "effort": "with-model"}
	}
	b, _ := json.Marshal(d)
	return string(b)
}

func only(t *testing.T, rep Report, name string) Result {
	t.Helper()
	if rep.Err != nil {
		t.Fatalf("run did not start: %v", rep.Err)
	}
	for _, r := range rep.Results {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result for %s in %+v", name, rep.Results)
	return Result{}
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func TestDescriptorHouse(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		status Status
		reason string
	}{
		{"good", descriptorJSON("h1", nil, true), Pass, ""},
		{"wrong house", descriptorJSON("other", nil, true), Fail, `house is "other", the binding says "h1"`},
		{"partial capability", descriptorJSON("h1", map[string]string{"usage.attribution": "partial"}, true), Fail, "not supported: usage.attribution"},
		{"missing capability", descriptorJSON("h1", map[string]string{"effect.lookup": ""}, true), Fail, "missing effect.lookup"},
		{"no workerSelection", descriptorJSON("h1", nil, false), Fail, "no workerSelection"},
		{"unreadable support value", descriptorJSON("h1", map[string]string{"run.transfer": "yes"}, true), Fail, "supported or partial"},
		{"unknown field", strings.Replace(descriptorJSON("h1", nil, true), `{`, `{"extra":1,`, 1), Fail, "extra"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != "/kitchen/v1/descriptor" {
					t.Errorf("got %s %s", r.Method, r.URL.Path)
				}
				if got := r.Header.Get("Authorization"); got != "Bearer "+testToken {
					t.Errorf("Authorization = %q", got)
				}
				if got := r.Header.Get("Accept"); got != "application/json" {
					t.Errorf("Accept = %q", got)
				}
				if got := r.Header.Get("Content-Type"); got != "" {
					t.Errorf("Content-Type on a call without a body: %q", got)
				}
				io.WriteString(w, tc.body)
			}))
			// The endpoint has a path; every route is below it.
			res := only(t, Run(context.Background(), testConfig(srv.URL+"/kitchen/", "descriptor-house")), "descriptor-house")
			if res.Status != tc.status || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("got %s", res)
			}
		})
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/descriptor", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/moved/v1/descriptor", http.StatusFound)
	})
	mux.HandleFunc("/moved/v1/descriptor", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, descriptorJSON("h1", nil, true))
	})
	srv := serve(t, mux)
	res := only(t, Run(context.Background(), testConfig(srv.URL, "descriptor-house")), "descriptor-house")
	if res.Status != Fail || !strings.Contains(res.Reason, "status 302: a redirect") {
		t.Fatalf("got %s", res)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

func TestAnswerLimit(t *testing.T) {
	good := descriptorJSON("h1", nil, true)
	tests := []struct {
		name   string
		size   int // total body size; padded with JSON white space
		status Status
	}{
		{"exactly 1 MiB", 1 << 20, Pass},
		{"one byte more", 1<<20 + 1, Fail},
		{"2 MiB", 2 << 20, Fail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := good + strings.Repeat(" ", tc.size-len(good))
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
			res := only(t, Run(context.Background(), testConfig(srv.URL, "descriptor-house")), "descriptor-house")
			if res.Status != tc.status {
				t.Fatalf("got %s", res)
			}
			if tc.status == Fail && !strings.Contains(res.Reason, "larger than 1 MiB") {
				t.Fatalf("got %s", res)
			}
		})
	}
}

var effectChecks = []string{
	"probe-receipt", "lookup-matches-receipt", "idempotent-resubmission", "launch-receipt", "launch-observable",
	"inventory-lists-launch", "message-recovery", "cancel-observed", "release-keeps-branch",
}

func TestEffectChecksAgainstFake(t *testing.T) {
	f := newFake(t)
	srv := serve(t, f)
	rep := Run(context.Background(), testConfig(srv.URL, append(effectChecks, "descriptor-house", "unknown-key-not-applied", "bad-token")...))
	for _, r := range rep.Results {
		if r.Status != Pass {
			t.Errorf("%s", r)
		}
	}
	if !rep.OK() || len(rep.Notes) != 0 {
		t.Fatalf("report: %s, notes %v", rep.Summary(), rep.Notes)
	}
	if got, want := rep.Summary(), "12 passed, 0 failed"; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}

	// The wire, as kitchn's client sends it.
	f.mu.Lock()
	defer f.mu.Unlock()
	var effects int
	for i, r := range f.calls {
		body := f.bodies[i]
		if r.Header.Get("Authorization") != "Bearer "+testToken || r.Header.Get("Accept") != "application/json" {
			t.Errorf("%s %s: headers %v", r.Method, r.URL.Path, r.Header)
		}
		if r.Method != http.MethodPost {
			continue
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", r.URL.Path, ct)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil || !bytes.Equal(compact.Bytes(), body) {
			t.Errorf("%s: body is not compact JSON: %q", r.URL.Path, body)
		}
		if r.URL.Path != "/v1/effects" {
			if k := r.Header.Get("Idempotency-Key"); k != "" {
				t.Errorf("%s carries Idempotency-Key %q", r.URL.Path, k)
			}
			continue
		}
		effects++
		var call struct {
			Run     string
			Request struct {
				House, Backend, Credential, Task, Key string
				Attempt                               int
				Effect                                struct {
					Executor string
					Effect   struct{ Type, Brief, Branch string }
				}
			}
		}
		if err := json.Unmarshal(body, &call); err != nil {
			t.Fatal(err)
		}
		rq := call.Request
		if k := r.Header.Get("Idempotency-Key"); k == "" || k != rq.Key {
			t.Errorf("Idempotency-Key %q, request.key %q", k, rq.Key)
		}
		if rq.House != "h1" || rq.Backend != "b1" || rq.Credential != "c1" || rq.Attempt != 1 || rq.Effect.Executor != "worker" || call.Run == "" {
			t.Errorf("envelope %s", body)
		}
		if e := rq.Effect.Effect; e.Type == "launch-worker" && e.Branch != "" {
			if !strings.HasPrefix(e.Branch, "galley-conformance/") || !strings.HasPrefix(e.Brief, "#!galley-script\n") {
				t.Errorf("shared launch: branch %q brief %q", e.Branch, e.Brief)
			}
		}
	}
	// launch, resubmission, message, cancel, release, and the bad-token try
	// (refused before it reached the handler's bookkeeping).
	if effects != 5 {
		t.Errorf("%d effect calls reached the service, want 5", effects)
	}
}

func TestEffectChecksCatchBrokenService(t *testing.T) {
	tests := []struct {
		name   string
		breaks func(*fake)
		check  string
		reason string
	}{
		{"receipt in another namespace", func(f *fake) { f.foreignReceipt = true }, "probe-receipt", "uncertain"},
		{"lookup not byte for byte", func(f *fake) { f.respaceLookup = true }, "lookup-matches-receipt", "not byte for byte"},
		{"owner null", func(f *fake) { f.ownerless = true }, "inventory-lists-launch", "owner null"},
		// The fake's worker turns ready in a goroutine of its own, so the
		// state the broken cancel leaves is starting or ready.
		{"cancel not settled", func(f *fake) { f.noCancel = true }, "cancel-observed", "the first observe after the cancel answers "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			tc.breaks(f)
			srv := serve(t, f)
			res := only(t, Run(context.Background(), testConfig(srv.URL, tc.check)), tc.check)
			if res.Status != Fail || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("got %s, want a failure saying %q", res, tc.reason)
			}
			if tc.check == "cancel-observed" && !strings.HasSuffix(res.Reason, ", want settled cancelled") {
				t.Fatalf("got %s, want it to say the worker is not settled cancelled", res)
			}
		})
	}
}

func TestWholeSuiteAgainstFake(t *testing.T) {
	f := newFake(t)
	srv := serve(t, f)
	cfg := testConfig(srv.URL)
	cfg.wakeWait = 5 * time.Second
	var lines []string
	cfg.OnResult = func(r Result) { lines = append(lines, r.String()) }
	rep := Run(context.Background(), cfg)
	for _, r := range rep.Results {
		if r.Status != Pass {
			t.Errorf("%s", r)
		}
	}
	if len(rep.Results) != len(allChecks) || len(lines) != len(allChecks) || len(rep.Notes) != 0 {
		t.Fatalf("%d results, %d lines, notes %v", len(rep.Results), len(lines), rep.Notes)
	}
	if got, want := rep.Summary(), fmt.Sprintf("%d passed, 0 failed", len(allChecks)); got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	// Every worker the suite launched is settled when it returns.
	f.mu.Lock()
	defer f.mu.Unlock()
	for h, w := range f.workers {
		if w.obs.State != "settled" {
			t.Errorf("worker %s left %s", h, w.obs.State)
		}
	}
}

func TestMailboxChecksCatchBrokenService(t *testing.T) {
	tests := []struct {
		name   string
		breaks func(*fake)
		check  string
		reason string
	}{
		{"rows without worker", func(f *fake) { f.rowsNoWorker = true }, "delivery-order", "worker: missing"},
		{"a new batch on every read", func(f *fake) { f.resealEachRead = true }, "delivery-replayed", "want the same batch in every field"},
		{"no fencing", func(f *fake) { f.noFencing = true }, "adoption-replays", "by the superseded coordinator is not fenced"},
		{"a stale acknowledgement consumes", func(f *fake) { f.ackAnyBatch = true }, "duplicate-acknowledgement", "want the current batch"},
		{"await does not wake", func(f *fake) { f.awaitNoWake = true }, "await-wakes", "did not wake"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			tc.breaks(f)
			srv := serve(t, f)
			cfg := testConfig(srv.URL, tc.check)
			cfg.wakeWait = 2 * time.Second
			cfg.Wait = 5 * time.Second
			res := only(t, Run(context.Background(), cfg), tc.check)
			if res.Status != Fail || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("got %s, want a failure saying %q", res, tc.reason)
			}
			if tc.check == "cancel-observed" && !strings.HasSuffix(res.Reason, ", want settled cancelled") {
				t.Fatalf("got %s, want it to say the worker is not settled cancelled", res)
			}
		})
	}
}

func TestCleanupCancelsLaunchedWorker(t *testing.T) {
	f := newFake(t)
	srv := serve(t, f)
	rep := Run(context.Background(), testConfig(srv.URL, "launch-receipt"))
	if !rep.OK() {
		t.Fatalf("%v", rep.Results)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.workers["w-1"].obs; got.State != "settled" || got.Outcome != "cancelled" {
		t.Fatalf("after the run the worker reads %+v, want it cancelled by the clean-up", got)
	}
}

func TestNoEffectsSkips(t *testing.T) {
	f := newFake(t)
	srv := serve(t, f)
	cfg := testConfig(srv.URL, "descriptor-house", "probe-receipt", "delivery-order")
	cfg.NoEffects = true
	rep := Run(context.Background(), cfg)
	if got, want := rep.Summary(), "1 passed, 0 failed, 2 skipped"; got != want {
		t.Fatalf("summary %q, want %q (%v)", got, want, rep.Results)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.calls {
		if r.URL.Path == "/v1/effects" {
			t.Fatalf("an effect was sent with NoEffects")
		}
	}
	if got := only(t, rep, "probe-receipt").String(); got != "SKIP probe-receipt: performs real effects (--no-effects)" {
		t.Fatalf("line %q", got)
	}
}

func TestBadTokenCatchesOpenService(t *testing.T) {
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, descriptorJSON("h1", nil, true))
	}))
	res := only(t, Run(context.Background(), testConfig(srv.URL, "bad-token")), "bad-token")
	if res.Status != Fail || !strings.Contains(res.Reason, "with a wrong token answers status 200, want 401 or 403") {
		t.Fatalf("got %s", res)
	}
}

func TestTokenNeverPrinted(t *testing.T) {
	// A service that echoes the Authorization header in its error.
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "denied: "+r.Header.Get("Authorization"), http.StatusInternalServerError)
	}))
	rep := Run(context.Background(), testConfig(srv.URL, "descriptor-house"))
	res := only(t, rep, "descriptor-house")
	if res.Status != Fail || strings.Contains(res.String(), testToken) || !strings.Contains(res.Reason, "[token]") {
		t.Fatalf("got %s", res)
	}
}

func TestAwaitHolds(t *testing.T) {
	tests := []struct {
		name   string
		hold   time.Duration
		status Status
	}{
		{"holds", 1500 * time.Millisecond, Pass},
		{"answers at once", 0, Fail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var waitMs atomic.Int64
			srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var c struct{ WaitMs int64 }
				json.NewDecoder(r.Body).Decode(&c)
				waitMs.Store(c.WaitMs)
				time.Sleep(tc.hold)
				io.WriteString(w, `{"status":"empty"}`)
			}))
			res := only(t, Run(context.Background(), testConfig(srv.URL, "await-holds")), "await-holds")
			if res.Status != tc.status {
				t.Fatalf("got %s", res)
			}
			if n := waitMs.Load(); n != 1500 {
				t.Fatalf("waitMs %d", n)
			}
		})
	}
}

func TestValidateEndpoint(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"https://sandbox.example.com/kitchen", true},
		{"https://sandbox.example.com:8443", true},
		{"http://127.0.0.1:8080", true},
		{"http://localhost:8080/k", true},
		{"http://[::1]:8080", true},
		{"https://[2001:db8::1]", true},
		{"http://sandbox.example.com", false},
		{"http://10.0.0.1:8080", false},
		{"https://user:pw@sandbox.example.com", false},
		{"https://sandbox.example.com/?q=1", false},
		{"https://sandbox.example.com/#f", false},
		{"https://sandbox.example.com:0", false},
		{"https://sandbox.example.com:70000", false},
		{"https://bad_host.example.com", false},
		{"ftp://sandbox.example.com", false},
		{"sandbox.example.com", false},
	}
	for _, tc := range tests {
		if err := ValidateEndpoint(tc.url); (err == nil) != tc.ok {
			t.Errorf("ValidateEndpoint(%q) = %v, want ok=%v", tc.url, err, tc.ok)
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "tok-123\n", 0o600)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"good", good, "tok-123"},
		{"exposed", write("exposed", "tok-123", 0o644), ""},
		{"symbolic link", link, ""},
		{"empty", write("empty", "\n", 0o600), ""},
		{"too large", write("large", strings.Repeat("a", 16<<10+1), 0o600), ""},
		{"missing", filepath.Join(dir, "nope"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTokenFile(tc.path)
			if got != tc.want || (err == nil) != (tc.want != "") {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "tok-123") {
				t.Fatalf("error quotes the token: %v", err)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:1", "no-such-check")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "no-such-check") {
		t.Fatalf("unknown check: %v", err)
	}
	cfg = testConfig("http://127.0.0.1:1")
	cfg.Timeout = 30 * time.Second
	if err := cfg.Validate(); err == nil {
		t.Fatal("a 30s deadline is outside the client's range")
	}
	cfg = testConfig("http://127.0.0.1:1")
	if err := cfg.Validate(); err != nil || cfg.Timeout != DefaultTimeout || cfg.Wait != DefaultWait {
		t.Fatalf("defaults: %v %+v", err, cfg)
	}
}
