package snapshot_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/snapshot"
)

// BenchmarkSnapshot saves and restores a worktree of 2,000 small files
// (100 folders of 20 source-like files, 1 to 4 KiB each, about 5 MiB in
// all) on this machine's disk: save alone (to memory), restore alone
// (over the worktree restored before, as a resume restores over a fresh
// clone), and both; beside them, the same files written and removed
// without an archive, the floor of any restore on this disk.
func BenchmarkSnapshot(b *testing.B) {
	src := b.TempDir()
	var total int
	for d := range 100 {
		dir := filepath.Join(src, fmt.Sprintf("pkg%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 20 {
			var lines strings.Builder
			for l := range 20 + (d*20+f)%4*30 {
				fmt.Fprintf(&lines, "func f%d_%d_%d(x int) int { return x*%d + %d }\n", d, f, l, d*f+l, (d+1)*(f+1)*(l+7)%1013)
			}
			body := lines.String()
			total += len(body)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%02d.go", f)), []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	var archive bytes.Buffer
	if _, err := snapshot.Save(b.Context(), src, &archive, snapshot.Limits{}); err != nil {
		b.Fatal(err)
	}
	b.Logf("2,000 files, %d bytes, archived in %d bytes", total, archive.Len())
	dst := filepath.Join(b.TempDir(), "wt")

	// What any restore costs at least: the same files written and removed
	// with the standard library, no archive.
	b.Run("write-files", func(b *testing.B) {
		bodies := map[string][]byte{}
		for d := range 100 {
			for f := range 20 {
				p := filepath.Join(fmt.Sprintf("pkg%03d", d), fmt.Sprintf("file%02d.go", f))
				body, err := os.ReadFile(filepath.Join(src, p))
				if err != nil {
					b.Fatal(err)
				}
				bodies[p] = body
			}
		}
		plain := filepath.Join(b.TempDir(), "plain")
		for b.Loop() {
			if err := os.RemoveAll(plain); err != nil {
				b.Fatal(err)
			}
			for d := range 100 {
				if err := os.MkdirAll(filepath.Join(plain, fmt.Sprintf("pkg%03d", d)), 0o755); err != nil {
					b.Fatal(err)
				}
			}
			for p, body := range bodies {
				if err := os.WriteFile(filepath.Join(plain, p), body, 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	})

	b.Run("save", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if _, err := snapshot.Save(b.Context(), src, &buf, snapshot.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(buf.Len()), "archive-bytes")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			if _, err := snapshot.Restore(b.Context(), bytes.NewReader(archive.Bytes()), dst, snapshot.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("save+restore", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if _, err := snapshot.Save(b.Context(), src, &buf, snapshot.Limits{}); err != nil {
				b.Fatal(err)
			}
			if _, err := snapshot.Restore(b.Context(), &buf, dst, snapshot.Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
