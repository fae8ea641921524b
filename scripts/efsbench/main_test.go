package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestHarnessCloneThroughCache clones a real repository twice as the after
// arm does: the first clone makes the cache's mirror, the second updates
// it; each must be reported as a clone through the cache, and each clone
// must stand alone (no alternates into the cache), or the after arm's
// later steps would read the cache's file system.
func TestHarnessCloneThroughCache(t *testing.T) {
	repo, cache := t.TempDir(), filepath.Join(t.TempDir(), "cache")
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(repo, "f"), []byte("content\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	git("commit", "-q", "-m", "first")

	clone := harnessClone(repo, "main", cache)
	for i, name := range []string{"first", "second"} {
		wt := filepath.Join(t.TempDir(), name)
		if _, err := clone(context.Background(), wt); err != nil {
			t.Fatalf("clone %d: %v", i+1, err)
		}
		if _, err := os.Stat(filepath.Join(wt, "f")); err != nil {
			t.Errorf("clone %d has no checkout: %v", i+1, err)
		}
		if _, err := os.Stat(filepath.Join(wt, ".git", "objects", "info", "alternates")); !os.IsNotExist(err) {
			t.Errorf("clone %d borrows objects from the cache (alternates: %v)", i+1, err)
		}
	}
}

// TestCachedCloneRefusesFallback: a Prepare that logged the cache's failure
// (and then made a plain clone) is not a clone through the cache.
func TestCachedCloneRefusesFallback(t *testing.T) {
	ok := []byte(`{"time":"t","level":"INFO","msg":"cloned through the git object cache","mirror":"m","update":1000,"clone":2000,"copy":3000}` + "\n")
	parts, found := cachedClone(ok)
	if !found || parts != (cloneParts{update: 1000, clone: 2000, copy: 3000}) {
		t.Errorf("cachedClone(a cached clone's log) = %+v, %v", parts, found)
	}
	failed := []byte(`{"time":"t","level":"ERROR","msg":"the git object cache failed; cloning without it","cache":"c","err":"e"}` + "\n")
	if _, found := cachedClone(failed); found {
		t.Error("cachedClone took a fallen-back clone for a cached one")
	}
	if _, found := cachedClone(nil); found {
		t.Error("cachedClone found a clone in an empty log")
	}
}
