package localproc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// niceOf reads a process's niceness (field 19 of /proc/<pid>/stat).
func niceOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, err := strconv.Atoi(f[16]) // f[0] is field 3
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWorkersRunNiced: the harness and what it starts run at the
// runtime's niceness, so the server keeps the CPU; WithNice(0) leaves them
// at the server's own.
func TestWorkersRunNiced(t *testing.T) {
	own := niceOf(t, os.Getpid())
	for _, c := range []struct {
		name string
		opts []Option
		want int
	}{
		{"default", nil, DefaultNice},
		{"off", []Option{WithNice(0)}, own},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want < own {
				t.Fatalf("this test runs at niceness %d, above the %d it expects", own, c.want)
			}
			r := newRuntime(t, "", c.opts...)
			spec := fakeSpec(r, "w-nice", "family")
			if err := r.Start(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			child, err := strconv.Atoi(string(awaitFile(t, filepath.Join(spec.WorkspacePath, "child-pid"))))
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(r.pidFile(spec.Handle))
			if err != nil {
				t.Fatal(err)
			}
			harness, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if got := niceOf(t, harness); got != c.want {
				t.Errorf("harness niceness %d, want %d", got, c.want)
			}
			if got := niceOf(t, child); got != c.want {
				t.Errorf("the harness's child niceness %d, want %d", got, c.want)
			}
		})
	}
}
