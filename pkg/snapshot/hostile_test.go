package snapshot_test

import (
	"archive/tar"
	"bytes"
	"cmp"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/snapshot"
)

// entry is one entry of a crafted archive.
type entry struct {
	hdr  tar.Header
	body []byte
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}}
}
func file(name, body string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: []byte(body)}
}
func link(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

// craft writes entries as Save's format would hold them (the version
// header first, a trailer counting them last), zstd-compressed; version
// and trailer false leave those out.
func craft(t *testing.T, version, trailer bool, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	must(t, err)
	tw := tar.NewWriter(zw)
	if version {
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"GALLEY.snapshot.version": "1"}}))
	}
	var n, size int64
	for _, e := range entries {
		must(t, tw.WriteHeader(&e.hdr))
		_, err := tw.Write(e.body)
		must(t, err)
		n++
		size += e.hdr.Size + int64(len(e.hdr.Linkname))
	}
	if trailer {
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{
			"GALLEY.snapshot.entries": strconv.FormatInt(n, 10), "GALLEY.snapshot.bytes": strconv.FormatInt(size, 10),
		}}))
	}
	must(t, tw.Close())
	must(t, zw.Close())
	return buf.Bytes()
}

// hostileSetup is a worktree holding one file, in a parent beside an
// outside folder that a hostile archive aims at.
type hostileSetup struct {
	parent, wt, outside string
}

func newHostileSetup(t *testing.T) hostileSetup {
	base := t.TempDir()
	h := hostileSetup{parent: filepath.Join(base, "workspaces"), outside: filepath.Join(base, "outside")}
	h.wt = filepath.Join(h.parent, "wt")
	must(t, os.MkdirAll(filepath.Join(h.wt, ".git"), 0o700))
	must(t, os.Mkdir(h.outside, 0o700))
	must(t, os.WriteFile(filepath.Join(h.wt, "earlier"), []byte("the agent's earlier work"), 0o644))
	return h
}

// unchanged checks that the failed restore left the worktree as it was,
// nothing beside it, and nothing in the outside folder or its parent.
func (h hostileSetup) unchanged(t *testing.T) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(h.wt, "earlier")); err != nil || string(b) != "the agent's earlier work" {
		t.Errorf("the worktree's file after a failed restore: %q, %v", b, err)
	}
	if names, _ := os.ReadDir(h.wt); len(names) != 2 {
		t.Errorf("the worktree holds %d entries after a failed restore, want 2", len(names))
	}
	if names, _ := os.ReadDir(h.parent); len(names) != 1 {
		var l []string
		for _, n := range names {
			l = append(l, n.Name())
		}
		t.Errorf("the worktree's folder holds %v after a failed restore, want only wt", l)
	}
	if names, _ := os.ReadDir(h.outside); len(names) != 0 {
		t.Errorf("the outside folder holds %d entries", len(names))
	}
	if names, _ := os.ReadDir(filepath.Dir(h.parent)); len(names) != 2 {
		t.Errorf("the folder above holds %d entries, want 2", len(names))
	}
}

func TestHostileArchivesRefused(t *testing.T) {
	big := strings.Repeat("x", 256)
	cases := []struct {
		name    string
		archive func(h hostileSetup) []byte
		limits  snapshot.Limits
		kind    galleyerr.Kind
		why     string
	}{
		{"dot-dot", func(h hostileSetup) []byte { return craft(t, true, true, file("../x", "evil")) }, snapshot.Limits{}, galleyerr.Invalid, "out of the worktree"},
		{"dot-dot-deep", func(h hostileSetup) []byte {
			return craft(t, true, true, dir("a"), file("a/../../outside/x", "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "out of the worktree"},
		{"absolute", func(h hostileSetup) []byte {
			return craft(t, true, true, file(filepath.Join(h.outside, "x"), "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "absolute"},
		{"etc", func(h hostileSetup) []byte { return craft(t, true, true, file("/etc/x-galley-test", "evil")) }, snapshot.Limits{}, galleyerr.Invalid, "absolute"},
		{"write-through-link", func(h hostileSetup) []byte {
			return craft(t, true, true, link("l", h.outside), file("l/x", "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "beneath a symbolic link"},
		{"write-through-inner-link", func(h hostileSetup) []byte {
			return craft(t, true, true, dir("d"), link("d/l", "../.."), file("d/l/outside/x", "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "beneath a symbolic link"},
		{"link-then-same-name", func(h hostileSetup) []byte {
			return craft(t, true, true, link("x", filepath.Join(h.outside, "x")), file("x", "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "already written"},
		{"beneath-a-file", func(h hostileSetup) []byte {
			return craft(t, true, true, file("f", ""), file("f/x", "evil"))
		}, snapshot.Limits{}, galleyerr.Invalid, "beneath a file"},
		{"before-its-folder", func(h hostileSetup) []byte { return craft(t, true, true, file("nodir/x", "evil")) }, snapshot.Limits{}, galleyerr.Invalid, "folder is not in the archive"},
		{"hard-link", func(h hostileSetup) []byte {
			return craft(t, true, true, entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "passwd", Linkname: "/etc/passwd"}})
		}, snapshot.Limits{}, galleyerr.Invalid, "hard link"},
		{"char-device", func(h hostileSetup) []byte {
			return craft(t, true, true, entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "mem", Devmajor: 1, Devminor: 1, Mode: 0o666}})
		}, snapshot.Limits{}, galleyerr.Invalid, "a device"},
		{"block-device", func(h hostileSetup) []byte {
			return craft(t, true, true, entry{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8, Mode: 0o666}})
		}, snapshot.Limits{}, galleyerr.Invalid, "a device"},
		{"fifo", func(h hostileSetup) []byte {
			return craft(t, true, true, entry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "p", Mode: 0o666}})
		}, snapshot.Limits{}, galleyerr.Invalid, "a fifo"},
		{"setuid", func(h hostileSetup) []byte {
			e := file("su", "#!/bin/sh\n")
			e.hdr.Mode = 0o4755
			return craft(t, true, true, e)
		}, snapshot.Limits{}, galleyerr.Invalid, "setuid"},
		{"setgid-folder", func(h hostileSetup) []byte {
			e := dir("g")
			e.hdr.Mode = 0o2775
			return craft(t, true, true, e)
		}, snapshot.Limits{}, galleyerr.Invalid, "setuid"},
		{"the-worktrees-git", func(h hostileSetup) []byte {
			return craft(t, true, true, dir(".git"), file(".git/config", "[core]\n\tfsmonitor = evil\n"))
		}, snapshot.Limits{}, galleyerr.Invalid, ".git"},
		{"long-component", func(h hostileSetup) []byte { return craft(t, true, true, file(big, "x")) }, snapshot.Limits{}, galleyerr.Invalid, "longer than 255"},
		{"long-path", func(h hostileSetup) []byte {
			var es []entry
			name := ""
			for i := 0; len(name) < 4100; i++ {
				if name != "" {
					name += "/"
				}
				name += strings.Repeat("d", 200)
				es = append(es, dir(name))
			}
			return craft(t, true, true, es...)
		}, snapshot.Limits{}, galleyerr.Invalid, "longer than 4095"},
		{"not-a-plain-path", func(h hostileSetup) []byte { return craft(t, true, true, file("./a", "x")) }, snapshot.Limits{}, galleyerr.Invalid, "plain relative path"},
		{"unknown-type", func(h hostileSetup) []byte {
			return craft(t, true, true, entry{hdr: tar.Header{Typeflag: 'V', Name: "vol"}})
		}, snapshot.Limits{}, galleyerr.Invalid, "type"},
		{"too-many-entries", func(h hostileSetup) []byte {
			return craft(t, true, true, file("a", ""), file("b", ""), file("c", ""), file("d", ""))
		}, snapshot.Limits{MaxEntries: 3}, galleyerr.TooLarge, "more than 3 entries"},
		{"one-huge-file", func(h hostileSetup) []byte {
			return craft(t, true, true, file("a", strings.Repeat("a", 100)), file("huge", strings.Repeat("z", 2000)))
		}, snapshot.Limits{MaxBytes: 1000}, galleyerr.TooLarge, "more than 1000 bytes"},
		{"huge-header", func(h hostileSetup) []byte {
			e := file("a", "x")
			e.hdr.PAXRecords = map[string]string{"comment": strings.Repeat("c", 512<<10)}
			return craft(t, true, true, e)
		}, snapshot.Limits{}, galleyerr.TooLarge, "stream budget"},
		{"no-version", func(h hostileSetup) []byte { return craft(t, false, true, file("a", "x")) }, snapshot.Limits{}, galleyerr.Malformed, "not a galley snapshot"},
		{"no-trailer", func(h hostileSetup) []byte { return craft(t, true, false, file("a", "x")) }, snapshot.Limits{}, galleyerr.Malformed, "truncated"},
		{"trailer-miscounts", func(h hostileSetup) []byte {
			var buf bytes.Buffer
			zw, _ := zstd.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"GALLEY.snapshot.version": "1"}}))
			must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"GALLEY.snapshot.entries": "5", "GALLEY.snapshot.bytes": "0"}}))
			must(t, tw.Close())
			must(t, zw.Close())
			return buf.Bytes()
		}, snapshot.Limits{}, galleyerr.Malformed, "does not count"},
		{"not-zstd", func(h hostileSetup) []byte { return []byte("PK\x03\x04 this is a zip, not a snapshot") }, snapshot.Limits{}, galleyerr.Malformed, ""},
		{"empty", func(h hostileSetup) []byte { return nil }, snapshot.Limits{}, galleyerr.Malformed, ""},
		{"truncated", func(h hostileSetup) []byte {
			a := craft(t, true, true, file("a", strings.Repeat("data ", 20000)), file("b", "x"))
			return a[:len(a)/2]
		}, snapshot.Limits{}, galleyerr.Malformed, ""},
		{"truncated-at-the-frame-end", func(h hostileSetup) []byte {
			a := craft(t, true, true, file("a", "x"))
			return a[:len(a)-4] // the frame's checksum cut
		}, snapshot.Limits{}, galleyerr.Malformed, ""},
		{"corrupt", func(h hostileSetup) []byte {
			a := craft(t, true, true, file("a", strings.Repeat("data ", 20000)), file("b", "x"))
			a = slices.Clone(a)
			for i := len(a) / 3; i < len(a)/3+16; i++ {
				a[i] ^= 0x5a
			}
			return a
		}, snapshot.Limits{}, galleyerr.Malformed, ""},
		{"data-after-the-end", func(h hostileSetup) []byte {
			a := craft(t, true, true, file("a", "x"))
			var buf bytes.Buffer
			zw, _ := zstd.NewWriter(&buf)
			dec, _ := zstd.NewReader(bytes.NewReader(a))
			_, err := io.Copy(zw, dec)
			must(t, err)
			zw.Write([]byte("trailing garbage"))
			must(t, zw.Close())
			return buf.Bytes()
		}, snapshot.Limits{}, galleyerr.Malformed, "after its end"},
	}
	// The most of the stream each reads before its refusal: 64 KiB, or
	// for long-path, its 21 folders' long names.
	streamBound := map[string]int64{"long-path": 21 * 10 << 10}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostileSetup(t)
			st, err := snapshot.Restore(t.Context(), bytes.NewReader(tc.archive(h)), h.wt, tc.limits)
			if galleyerr.KindOf(err) != tc.kind || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Restore: %v (kind %v), want kind %v saying %q", err, galleyerr.KindOf(err), tc.kind, tc.why)
			}
			if strings.Contains(err.Error(), "evil") || strings.Contains(err.Error(), h.outside) || strings.Contains(err.Error(), big[:100]) {
				t.Errorf("the refusal echoes the archive's names or contents: %v", err)
			}
			t.Logf("refused after %d bytes of the stream: %v", st.Stream, err)
			if bound := cmp.Or(streamBound[tc.name], 64<<10); st.Stream > bound {
				t.Errorf("read %d bytes of the stream before refusing, want at most %d", st.Stream, bound)
			}
			h.unchanged(t)
			if _, err := os.Lstat("/etc/x-galley-test"); !os.IsNotExist(err) {
				t.Error("/etc/x-galley-test exists")
			}
		})
	}
}

// A compression bomb: 1 GiB of zeros in 1 MiB files, a few KB compressed,
// against a budget of 10 MiB. The restore stops within the budget of the
// decompressed stream (the files accepted and a header's allowance each),
// having read a small part of the compressed bytes, and writes nothing.
func TestBombStopsWithinItsBudget(t *testing.T) {
	const files, size = 1024, 1 << 20
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	must(t, err)
	tw := tar.NewWriter(zw)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"GALLEY.snapshot.version": "1"}}))
	zeros := make([]byte, size)
	for i := range files {
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros-" + strconv.Itoa(i), Size: size, Mode: 0o644}))
		_, err := tw.Write(zeros)
		must(t, err)
	}
	must(t, tw.Close())
	must(t, zw.Close())
	compressed := buf.Len()
	if compressed > 1<<20 {
		t.Fatalf("the bomb compressed to %d bytes; want a few KB", compressed)
	}
	t.Logf("1 GiB of zeros in %d files compressed to %d bytes", files, compressed)

	h := newHostileSetup(t)
	src := &countingReader{r: bytes.NewReader(buf.Bytes())}
	const budget = 10 << 20
	st, err := snapshot.Restore(t.Context(), src, h.wt, snapshot.Limits{MaxBytes: budget})
	if !galleyerr.Is(galleyerr.TooLarge, err) {
		t.Fatalf("Restore of the bomb: %v, want TooLarge", err)
	}
	// Ten files fit the budget; the eleventh's header is refused.
	if bound := int64(budget + 16*10<<10); st.Stream > bound {
		t.Errorf("read %d bytes of the decompressed stream, want at most %d", st.Stream, bound)
	}
	if st.Files != 10 {
		t.Errorf("accepted %d files before the refusal, want 10", st.Files)
	}
	if src.n > int64(compressed)/4 {
		t.Errorf("read %d of the %d compressed bytes: the bomb was not stopped early", src.n, compressed)
	}
	t.Logf("stopped after %d decompressed and %d compressed bytes", st.Stream, src.n)
	h.unchanged(t)

	// The same stream as one declared 1 GiB file stops at its header.
	buf.Reset()
	zw.Reset(&buf)
	tw = tar.NewWriter(zw)
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"GALLEY.snapshot.version": "1"}}))
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "huge", Size: files * size, Mode: 0o644}))
	for range files {
		_, err := tw.Write(zeros)
		must(t, err)
	}
	must(t, tw.Close())
	must(t, zw.Close())
	st, err = snapshot.Restore(t.Context(), bytes.NewReader(buf.Bytes()), h.wt, snapshot.Limits{MaxBytes: budget})
	if !galleyerr.Is(galleyerr.TooLarge, err) || st.Stream > 64<<10 {
		t.Fatalf("Restore of one 1 GiB file: %v after %d bytes, want TooLarge at its header", err, st.Stream)
	}
	h.unchanged(t)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A restore interrupted between its renames (the process killed) is
// finished or undone by the next restore of the worktree, even one that
// then fails.
func TestInterruptedRestoreRecovered(t *testing.T) {
	corrupt := []byte("not a snapshot")
	t.Run("old-put-back", func(t *testing.T) {
		parent := t.TempDir()
		// Killed after moving the worktree aside, before moving its .git.
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.replaced-1/.git"), 0o700))
		must(t, os.WriteFile(filepath.Join(parent, ".wt.replaced-1/work"), []byte("old"), 0o644))
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.restore-2/half"), 0o700))
		_, err := snapshot.Restore(t.Context(), bytes.NewReader(corrupt), filepath.Join(parent, "wt"), snapshot.Limits{})
		if !galleyerr.Is(galleyerr.Malformed, err) {
			t.Fatalf("Restore: %v, want Malformed", err)
		}
		if b, _ := os.ReadFile(filepath.Join(parent, "wt/work")); string(b) != "old" {
			t.Errorf("the worktree holds %q, want the old one put back", b)
		}
		if l := leftovers(t, parent); len(l) != 0 {
			t.Errorf("left %v", l)
		}
	})
	t.Run("staged-finished", func(t *testing.T) {
		parent := t.TempDir()
		// Killed after moving the .git into the complete staging folder.
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.replaced-1"), 0o700))
		must(t, os.WriteFile(filepath.Join(parent, ".wt.replaced-1/work"), []byte("old"), 0o644))
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.restore-2/.git"), 0o700))
		must(t, os.WriteFile(filepath.Join(parent, ".wt.restore-2/work"), []byte("restored"), 0o644))
		_, err := snapshot.Restore(t.Context(), bytes.NewReader(corrupt), filepath.Join(parent, "wt"), snapshot.Limits{})
		if !galleyerr.Is(galleyerr.Malformed, err) {
			t.Fatalf("Restore: %v, want Malformed", err)
		}
		if b, _ := os.ReadFile(filepath.Join(parent, "wt/work")); string(b) != "restored" {
			t.Errorf("the worktree holds %q, want the finished restore", b)
		}
		if _, err := os.Stat(filepath.Join(parent, "wt/.git")); err != nil {
			t.Errorf("the worktree's .git: %v", err)
		}
		if l := leftovers(t, parent); len(l) != 0 {
			t.Errorf("left %v", l)
		}
	})
	t.Run("several-old-refused", func(t *testing.T) {
		parent := t.TempDir()
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.replaced-1"), 0o700))
		must(t, os.MkdirAll(filepath.Join(parent, ".wt.replaced-2"), 0o700))
		_, err := snapshot.Restore(t.Context(), bytes.NewReader(corrupt), filepath.Join(parent, "wt"), snapshot.Limits{})
		if !galleyerr.Is(galleyerr.Conflict, err) {
			t.Fatalf("Restore: %v, want Conflict", err)
		}
		if l := leftovers(t, parent); len(l) != 2 {
			t.Errorf("left %v, want both old copies kept", l)
		}
	})
}
