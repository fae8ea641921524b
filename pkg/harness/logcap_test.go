package harness

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A log flood stops at the budget: whole lines until then, one line saying
// the log was cut, nothing after; writers never see an error.
func TestCappedWriterCutsAtTheBudget(t *testing.T) {
	const limit = 8192
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(CappedWriter(&out, limit), nil))
	for i := range 10000 {
		log.Info("agent stderr", "line", strings.Repeat("y", 100), "i", i)
	}
	if out.Len() > limit {
		t.Fatalf("wrote %d bytes, budget %d", out.Len(), limit)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1] + "\n"; last != CutLine(limit) {
		t.Fatalf("last line %q", last)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") {
			t.Fatalf("a line was cut in two: %q", l)
		}
	}
	if strings.Count(out.String(), "log cut") != 1 {
		t.Fatal("the cut line appears more than once")
	}
}

func TestLogLimitFromEnv(t *testing.T) {
	for v, want := range map[string]int64{"": DefaultLogLimit, "65536": 65536} {
		got, err := LogLimitFromEnv(func(string) string { return v })
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"x", "-1", "100"} {
		if _, err := LogLimitFromEnv(func(string) string { return v }); err == nil {
			t.Errorf("%q accepted", v)
		}
	}
}
