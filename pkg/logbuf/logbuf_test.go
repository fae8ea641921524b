package logbuf

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer the test can read while the flusher writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestInfoWaitsForTheIntervalWarnDoesNot(t *testing.T) {
	var out lockedBuffer
	w := New(&out, time.Hour) // the interval never fires in this test
	log := NewJSONLogger(w, nil)
	log.Info("request", "path", "/v1/descriptor")
	if got := out.String(); got != "" {
		t.Fatalf("an info line was written before any flush: %q", got)
	}
	log.Warn("store slow")
	got := out.String()
	if !strings.Contains(got, `"/v1/descriptor"`) || !strings.Contains(got, `"store slow"`) {
		t.Fatalf("a warning did not write out itself and what waited before it: %q", got)
	}
	if strings.Index(got, "/v1/descriptor") > strings.Index(got, "store slow") {
		t.Fatalf("lines out of order: %q", got)
	}
}

func TestIntervalFlushes(t *testing.T) {
	var out lockedBuffer
	w := New(&out, 5*time.Millisecond)
	defer w.Close()
	NewJSONLogger(w, nil).Info("request")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), `"request"`); {
		if time.Now().After(deadline) {
			t.Fatal("the interval never wrote the line out")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCloseWritesEverythingAndLaterWritesGoThrough(t *testing.T) {
	path := filepath.Join(t.TempDir(), "serve.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := New(f, time.Hour)
	log := NewJSONLogger(w, nil).With("house", "h")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 500 {
				log.Info("request", "client", i, "n", j)
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	log.Info("after close")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 8*500+1 {
		t.Fatalf("got %d lines, want %d", len(lines), 8*500+1)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "{") || !strings.HasSuffix(l, "}") || !strings.Contains(l, `"house":"h"`) {
			t.Fatalf("torn or unattributed line: %q", l)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "after close") {
		t.Fatalf("a write after Close did not go through: %q", lines[len(lines)-1])
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestWithGroupKeepsFlushOnWarn(t *testing.T) {
	var out lockedBuffer
	w := New(&out, time.Hour)
	NewJSONLogger(w, nil).WithGroup("g").Log(context.Background(), slog.LevelError, "boom", "k", "v")
	if !strings.Contains(out.String(), `"g":{"k":"v"}`) {
		t.Fatalf("an error through a group was not written at once: %q", out.String())
	}
}

func BenchmarkRequestLine(b *testing.B) {
	for _, c := range []struct {
		name string
		log  func(f *os.File) (*slog.Logger, func())
	}{
		{"unbuffered", func(f *os.File) (*slog.Logger, func()) { return slog.New(slog.NewJSONHandler(f, nil)), func() {} }},
		{"logbuf", func(f *os.File) (*slog.Logger, func()) {
			w := New(f, 0)
			return NewJSONLogger(w, nil), func() { _ = w.Close() }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "serve.log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			log, done := c.log(f)
			defer done()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					log.Info("request", "id", "0123456789abcdef", "method", "POST", "path", "/v1/workers/observe", "status", 200, "ms", 0.123)
				}
			})
		})
	}
}
