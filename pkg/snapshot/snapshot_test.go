package snapshot_test

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/snapshot"
)

// makeWorktree fills dir with what an agent leaves in a worktree: nested
// folders, empty files, executables, a read-only file and folder, links
// inside (to a file, a folder, a missing path, and an absolute one), a
// fifo (not kept), and a .git (never saved).
func makeWorktree(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"README.md":                  "hello\n",
		"empty":                      "",
		"src/main.go":                "package main\n",
		"src/deep/er/still/file.txt": strings.Repeat("deep ", 1000),
		"src/deep/empty":             "",
		"node_modules/x/index.js":    "module.exports = 1\n",
		"bin/run.sh":                 "#!/bin/sh\necho run\n",
		"ro/locked.txt":              "read only\n",
		".git/HEAD":                  "ref: refs/heads/saved\n",
		".git/hooks/pre-commit":      "#!/bin/sh\nexit 1\n",
		"nested/.git":                "gitdir: ../.git/modules/nested\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	must(t, os.Mkdir(filepath.Join(dir, "emptydir"), 0o750))
	must(t, os.Chmod(filepath.Join(dir, "bin/run.sh"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "ro/locked.txt"), 0o400))
	must(t, os.Chmod(filepath.Join(dir, "ro"), 0o555))
	must(t, os.Symlink("../src/main.go", filepath.Join(dir, "bin/main.go")))
	must(t, os.Symlink("src/deep", filepath.Join(dir, "deeplink")))
	must(t, os.Symlink("no/such/path", filepath.Join(dir, "dangling")))
	must(t, os.Symlink("/usr/bin/env", filepath.Join(dir, "bin/env")))
	must(t, syscall.Mkfifo(filepath.Join(dir, "src/fifo"), 0o644))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(t, os.Chtimes(filepath.Join(dir, "README.md"), old, old))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// describe lists a tree as lines of path, type, permission bits, size,
// modification time (files), contents' start and link target, skipping
// .git at the top (and what skip names).
func describe(t *testing.T, dir string, skip ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if rel == ".git" || slices.Contains(skip, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := rel + " " + fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + fi.ModTime().UTC().Format(time.RFC3339Nano) + " " + string(b[:min(len(b), 40)])
			line += " size=" + strconv.Itoa(len(b))
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		out = append(out, line)
		return nil
	})
	must(t, err)
	return out
}

func save(t *testing.T, dir string, limits snapshot.Limits, opts ...snapshot.SaveOption) ([]byte, snapshot.Stats) {
	t.Helper()
	var buf bytes.Buffer
	st, err := snapshot.Save(t.Context(), dir, &buf, limits, opts...)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	return buf.Bytes(), st
}

// leftovers lists what a restore left beside the worktree.
func leftovers(t *testing.T, parent string) []string {
	t.Helper()
	names, err := os.ReadDir(parent)
	must(t, err)
	var out []string
	for _, n := range names {
		if strings.Contains(n.Name(), ".restore-") || strings.Contains(n.Name(), ".replaced-") {
			out = append(out, n.Name())
		}
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "src")
	must(t, os.Mkdir(src, 0o700))
	makeWorktree(t, src)
	archive, saved := save(t, src, snapshot.Limits{})
	if saved.Skipped != 1 {
		t.Errorf("Save skipped %d entries, want 1 (the fifo)", saved.Skipped)
	}
	if saved.Links != 4 {
		t.Errorf("Save kept %d links, want 4", saved.Links)
	}

	// The worktree restored into: a fresh clone's, with its own .git, a
	// file the agent had deleted and one it had changed.
	parent := t.TempDir()
	dst := filepath.Join(parent, "wt")
	must(t, os.MkdirAll(filepath.Join(dst, ".git"), 0o755))
	must(t, os.WriteFile(filepath.Join(dst, ".git", "HEAD"), []byte("ref: refs/heads/clone\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(dst, "deleted-by-the-agent"), []byte("x"), 0o644))
	must(t, os.WriteFile(filepath.Join(dst, "README.md"), []byte("as pushed\n"), 0o644))
	must(t, os.Chmod(dst, 0o711))

	restored, err := snapshot.Restore(t.Context(), bytes.NewReader(archive), dst, snapshot.Limits{})
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	want := slices.DeleteFunc(describe(t, src), func(l string) bool { return strings.HasPrefix(l, "src/fifo ") })
	if got := describe(t, dst); !slices.Equal(got, want) {
		t.Errorf("restored worktree differs:\ngot  %q\nwant %q", got, want)
	}
	if restored.Files != saved.Files || restored.Dirs != saved.Dirs || restored.Links != saved.Links || restored.Bytes != saved.Bytes {
		t.Errorf("restored %+v, saved %+v", restored, saved)
	}
	head, err := os.ReadFile(filepath.Join(dst, ".git", "HEAD"))
	must(t, err)
	if string(head) != "ref: refs/heads/clone\n" {
		t.Errorf("the worktree's own .git was not kept: HEAD is %q", head)
	}
	if fi, err := os.Stat(dst); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("the worktree's folder: %v, %v; want its mode 0711 kept", fi.Mode(), err)
	}
	if l := leftovers(t, parent); len(l) != 0 {
		t.Errorf("the restore left %v beside the worktree", l)
	}

	// The same worktree makes the same archive.
	if again, _ := save(t, src, snapshot.Limits{}); !bytes.Equal(again, archive) {
		t.Error("two saves of one worktree differ")
	}
}

func TestRestoreIntoANewFolder(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	archive, _ := save(t, src, snapshot.Limits{})
	dst := filepath.Join(t.TempDir(), "new")
	if _, err := snapshot.Restore(t.Context(), bytes.NewReader(archive), dst, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dst)
	must(t, err)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("a new worktree's mode is %v, want 0700", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "x" {
		t.Errorf("f holds %q", b)
	}
}

func TestSaveExcludes(t *testing.T) {
	src := t.TempDir()
	makeWorktree(t, src)
	archive, _ := save(t, src, snapshot.Limits{}, snapshot.Exclude("node_modules", "src/deep/er"))
	dst := filepath.Join(t.TempDir(), "wt")
	if _, err := snapshot.Restore(t.Context(), bytes.NewReader(archive), dst, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"node_modules", "src/deep/er", ".git"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
			t.Errorf("%s was restored (%v), want it left out", gone, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "src/deep/empty")); err != nil {
		t.Errorf("src/deep/empty: %v", err)
	}
}

// A link to a folder outside the worktree is kept as a link: nothing
// beneath it is read.
func TestSaveFollowsNoLink(t *testing.T) {
	outside := t.TempDir()
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("not-the-agents-7f3a9c"), 0o600))
	src := t.TempDir()
	must(t, os.Symlink(outside, filepath.Join(src, "out")))
	must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "secret")))
	archive, st := save(t, src, snapshot.Limits{})
	if st.Files != 0 || st.Links != 2 {
		t.Fatalf("saved %+v, want 2 links and no file", st)
	}
	dst := filepath.Join(t.TempDir(), "wt")
	if _, err := snapshot.Restore(t.Context(), bytes.NewReader(archive), dst, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "secret")); err != nil || target != filepath.Join(outside, "secret") {
		t.Errorf("secret restored as %q, %v; want the link itself", target, err)
	}
}

func TestSaveLimits(t *testing.T) {
	src := t.TempDir()
	makeWorktree(t, src)
	for _, l := range []snapshot.Limits{{MaxEntries: 5}, {MaxBytes: 1000}} {
		_, err := snapshot.Save(t.Context(), src, io.Discard, l)
		if !galleyerr.Is(galleyerr.TooLarge, err) {
			t.Errorf("Save with limits %+v: %v, want TooLarge", l, err)
		}
	}
}

// A file with a second name owned by someone other than the worktree's
// owner (a hard link to a file the agent could not read) is not saved.
func TestSaveRefusesAForeignHardLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to own files as another uid")
	}
	base := t.TempDir()
	src := filepath.Join(base, "wt")
	must(t, os.Mkdir(src, 0o700))
	foreign := filepath.Join(base, "token")
	must(t, os.WriteFile(foreign, []byte("galley-token-abc"), 0o600))
	must(t, os.Chown(foreign, 1<<29+7, 1<<29+7))
	must(t, os.Link(foreign, filepath.Join(src, "token")))
	_, err := snapshot.Save(t.Context(), src, io.Discard, snapshot.Limits{})
	if !galleyerr.Is(galleyerr.Invalid, err) || !strings.Contains(err.Error(), "hard link") {
		t.Fatalf("Save of a worktree with a foreign hard link: %v, want Invalid naming the hard link", err)
	}
	if strings.Contains(err.Error(), "galley-token-abc") {
		t.Error("the error holds the file's contents")
	}
	// The owner's own file with two names is saved (twice).
	must(t, os.Remove(filepath.Join(src, "token")))
	must(t, os.WriteFile(filepath.Join(src, "a"), []byte("mine"), 0o644))
	must(t, os.Link(filepath.Join(src, "a"), filepath.Join(src, "b")))
	if _, st := save(t, src, snapshot.Limits{}); st.Files != 2 {
		t.Errorf("saved %d files, want 2", st.Files)
	}
}

// Restored as the agent's uid: every entry, links and folders included,
// and the worktree's folder; the kept .git is not given away.
func TestRestoreAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files away")
	}
	src := t.TempDir()
	makeWorktree(t, src)
	archive, _ := save(t, src, snapshot.Limits{})
	dst := filepath.Join(t.TempDir(), "wt")
	must(t, os.MkdirAll(filepath.Join(dst, ".git"), 0o755))
	const uid, gid = 1<<29 + 4242, 1<<29 + 4243
	if _, err := snapshot.Restore(t.Context(), bytes.NewReader(archive), dst, snapshot.Limits{}, snapshot.AsOwner(uid, gid)); err != nil {
		t.Fatal(err)
	}
	n := 0
	must(t, filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Name() == ".git" && filepath.Dir(p) == dst {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s is %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
		n++
		return nil
	}))
	if n < 20 {
		t.Fatalf("checked only %d entries", n)
	}
	fi, err := os.Lstat(filepath.Join(dst, ".git"))
	must(t, err)
	if fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("the kept .git was given away")
	}
}

// A snapshot that is missing is NotFound and changes nothing; a save that
// fails leaves the earlier snapshot.
func TestSaveToRestoreFrom(t *testing.T) {
	store, err := snapshot.NewDirStore(t.TempDir())
	must(t, err)
	defer store.Close()
	key := snapshot.Key("house", "w-1", "worktree")
	dst := filepath.Join(t.TempDir(), "wt")
	must(t, os.Mkdir(dst, 0o700))
	must(t, os.WriteFile(filepath.Join(dst, "earlier"), []byte("kept"), 0o644))
	if _, err := snapshot.RestoreFrom(t.Context(), store, key, dst, snapshot.Limits{}); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Fatalf("RestoreFrom a missing snapshot: %v, want NotFound", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "earlier")); string(b) != "kept" {
		t.Fatal("a missing snapshot changed the worktree")
	}

	src := t.TempDir()
	makeWorktree(t, src)
	if _, err := snapshot.SaveTo(t.Context(), store, key, src, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(src, "later"), []byte(strings.Repeat("x", 100_000)), 0o644))
	if _, err := snapshot.SaveTo(t.Context(), store, key, src, snapshot.Limits{MaxBytes: 50_000}); !galleyerr.Is(galleyerr.TooLarge, err) {
		t.Fatalf("SaveTo past its limit: %v, want TooLarge", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := snapshot.SaveTo(ctx, store, key, src, snapshot.Limits{}); err == nil {
		t.Fatal("SaveTo with an ended context succeeded")
	}
	if _, err := snapshot.RestoreFrom(t.Context(), store, key, dst, snapshot.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "later")); !os.IsNotExist(err) {
		t.Error("the failed saves replaced the earlier snapshot")
	}
	if _, err := os.Lstat(filepath.Join(dst, "src/main.go")); err != nil {
		t.Errorf("the earlier snapshot was not restored: %v", err)
	}
}
