package drive

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/localserver"
)

// The real local server, with /bin/true for the worker binary: launches
// record workers that never run, enough for the read and write runs. The
// mixed run needs real scripted workers; local/e2e runs it.
func startServer(t *testing.T) Target {
	t.Helper()
	truth := "/bin/true"
	if _, err := os.Stat(truth); err != nil {
		truth = "/usr/bin/true"
	}
	data := t.TempDir()
	srv, err := localserver.Start(context.Background(), localserver.Options{Listen: "127.0.0.1:0", House: "drive", Data: data,
		WorkerBin: truth, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	tok, err := os.ReadFile(filepath.Join(data, "private", "token"))
	if err != nil {
		t.Fatal(err)
	}
	return Target{Endpoint: srv.Endpoint, Token: strings.TrimSpace(string(tok)), House: "drive", Backend: "galley", Credential: "galley-token"}
}

func TestReadsAgainstBaseline(t *testing.T) {
	res, err := RunReads(context.Background(), ReadsConfig{Target: startServer(t), Clients: 2, Duration: 800 * time.Millisecond, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Phases) != 2 || res.Phases[0].Server != "bare" || res.Phases[1].Server != "galley" {
		t.Fatalf("phases = %+v", res.Phases)
	}
	for _, p := range res.Phases {
		if p.Calls == 0 || p.Errors != 0 {
			t.Fatalf("%s: %d calls, %d errors", p.Server, p.Calls, p.Errors)
		}
	}
	for _, route := range []string{"descriptor", "observe", "inventory", "next"} {
		if res.PerRoute[route].N == 0 {
			t.Errorf("route %s was not called", route)
		}
	}
	if len(res.Ratios) != 1 || res.MedianRatio <= 0 {
		t.Fatalf("ratios = %v", res.Ratios)
	}
}

func TestWritesDurableAndChecked(t *testing.T) {
	res, err := RunWrites(context.Background(), WritesConfig{Target: startServer(t), Clients: 2, Duration: 1200 * time.Millisecond,
		ProbeDir: t.TempDir(), Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.StoreSerial <= 0 || res.StoreConcurrent <= 0 || len(res.Phases) != 2 {
		t.Fatalf("store %.0f/%.0f writes/s, phases %+v", res.StoreSerial, res.StoreConcurrent, res.Phases)
	}
	for _, p := range res.Phases {
		if p.PerSec <= 0 || p.Errors != 0 {
			t.Fatalf("phase %s: %.0f/s, %d errors", p.Name, p.PerSec, p.Errors)
		}
	}
	if strings.Contains(fmt.Sprintf("%+v", res), res.Config.Token) {
		t.Fatal("the result prints the token")
	}
	if !res.Report.OK() || res.Report.Checked["receipts"] == 0 || res.Report.Checked["promises"] == 0 {
		t.Fatalf("history: %s", res.Report)
	}
}

func TestRefusesOffMachineEndpoints(t *testing.T) {
	for _, ep := range []string{"http://10.1.2.3:8080", "https://127.0.0.1:8080", "http://example.com"} {
		if _, err := RunReads(context.Background(), ReadsConfig{Target: Target{Endpoint: ep}}); err == nil {
			t.Errorf("reads against %s started", ep)
		}
		if _, err := RunMixed(context.Background(), MixedConfig{Target: Target{Endpoint: ep}}); err == nil {
			t.Errorf("mixed against %s started", ep)
		}
		if _, err := RunWrites(context.Background(), WritesConfig{Target: Target{Endpoint: ep}}); err == nil {
			t.Errorf("writes against %s started", ep)
		}
	}
}
