//go:build unix

package localproc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/service"
)

// A harness is told its log budget, and a log written past it around the
// harness (a 1 MiB flood straight to the file) is cut to the budget when
// the harness ends, its first lines kept and a last line saying why.
func TestLogCutToItsBudget(t *testing.T) {
	const limit = 64 << 10
	script := filepath.Join(t.TempDir(), "harness")
	body := "#!/bin/sh\necho \"budget $" + contract.EnvLogLimit + "\"\nhead -c 1048576 /dev/zero | tr '\\000' x\nexit 0\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, "", WithHarness(script), WithLogLimit(limit))
	spec := fakeSpec(r, "w-logflood", "run")
	if err := r.Start(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	awaitLiveness(t, r, spec.Handle, service.LivenessExited)
	b, err := os.ReadFile(r.logFile(spec.Handle))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > limit {
		t.Fatalf("the log is %d bytes, budget %d", len(b), limit)
	}
	if !bytes.HasPrefix(b, []byte("budget 65536\n")) {
		t.Fatalf("the harness was not told its budget, or the log's start was lost: %q", b[:min(len(b), 40)])
	}
	if !strings.HasSuffix(string(b), harness.CutLine(limit)) {
		t.Fatalf("the log does not end saying it was cut: %q", b[max(0, len(b)-200):])
	}
}

func TestLogLimitRefusedBelowMinimum(t *testing.T) {
	if _, err := New(WithDir(t.TempDir()), WithHarness(fakeHarness), WithEndpoint(testEndpoint), WithLogLimit(100)); err == nil {
		t.Fatal("a 100-byte log budget was accepted")
	}
}
