package workspace_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/workspace"
)

// counted serves h over smart HTTP and counts the bytes of every fetch's
// pack response (POST .../git-upload-pack): what crossed the network.
func counted(t *testing.T, h house) (url string, sent *atomic.Int64) {
	t.Helper()
	sent = new(atomic.Int64)
	backend := gitserve.Backend(h.path)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			w = &countingWriter{ResponseWriter: w, n: sent}
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/house.git", sent
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.ResponseWriter.Write(b)
}

// grow commits files of random bytes (which no compression or delta
// shrinks) to main in the house, and creates branches from the result.
func grow(t *testing.T, h *house, size int, branches ...string) {
	t.Helper()
	work := filepath.Join(t.TempDir(), "grow")
	git(t, "", "clone", "--quiet", h.path, work)
	for i := 0; i < 4; i++ {
		b := make([]byte, size/8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(work, "data", hex.EncodeToString(b[:6])+".bin")
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(hex.EncodeToString(b)), 0o644); err != nil {
			t.Fatal(err)
		}
		git(t, work, "add", ".")
		git(t, work, "commit", "--quiet", "-m", "data "+name)
	}
	git(t, work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
	h.main = git(t, work, "rev-parse", "HEAD")
	for _, b := range branches {
		if err := h.repo.CreateBranch(context.Background(), b, h.main); err != nil {
			t.Fatal(err)
		}
	}
}

// logs is a logger whose JSON lines a test reads.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// mirrors lists the mirrors in the cache folder.
func mirrors(t *testing.T, cache string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cache, "*.git"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// selfContained checks that the clone at dir borrows no object from
// elsewhere and holds every object its history needs.
func selfContained(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(dir, ".git", "objects", "info", "alternates")); err == nil {
		t.Fatalf("%s borrows objects (objects/info/alternates)", dir)
	}
	git(t, dir, "fsck", "--connectivity-only", "--no-dangling")
}

// A second worker's clone through the cache fetches only what is new
// from the repository; the clone needs no cache once made.
func TestPrepareWithCacheFetchesOnlyNew(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	grow(t, &h, 1<<20, "w1b")
	url, sent := counted(t, h)

	// A plain clone: what every worker fetched before the cache.
	plain := filepath.Join(t.TempDir(), "plain")
	if err := workspace.Prepare(ctx, url, "w1b", plain); err != nil {
		t.Fatal(err)
	}
	full := sent.Swap(0)
	if full < 256<<10 {
		t.Fatalf("a plain clone fetched %d bytes: the repository is not as large as meant", full)
	}

	cache := filepath.Join(t.TempDir(), "cache")
	var l logs
	first := filepath.Join(t.TempDir(), "first")
	if err := workspace.Prepare(ctx, url, "w1b", first, workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	if got := sent.Swap(0); got < full*8/10 || got > full*13/10 {
		t.Errorf("the first cached clone fetched %d bytes; a plain clone fetches %d (the mirror's fetch, then next to nothing)", got, full)
	}
	if len(mirrors(t, cache)) != 1 {
		t.Fatalf("mirrors: %v", mirrors(t, cache))
	}

	// New work in the house, then a second worker.
	grow(t, &h, 64<<10, "w2")
	second := filepath.Join(t.TempDir(), "second")
	if err := workspace.Prepare(ctx, url, "w2", second, workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	got := sent.Swap(0)
	t.Logf("bytes fetched from the repository: plain clone %d, second cached clone %d", full, got)
	if got > full/5 {
		t.Errorf("the second cached clone fetched %d bytes, a plain clone %d: the cache did not serve", got, full)
	}
	if got < 16<<10 {
		t.Errorf("the second cached clone fetched %d bytes: less than the new work", got)
	}
	if head := git(t, second, "rev-parse", "HEAD"); head != h.main {
		t.Errorf("HEAD %s, want the house's %s", head, h.main)
	}
	if strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("the cache failed: %s", l.String())
	}
	// Every guarantee of a plain clone holds: push restriction, identity.
	if got := git(t, second, "config", "--get-all", "remote.origin.push"); got != "refs/heads/w2:refs/heads/w2" {
		t.Errorf("remote.origin.push = %q", got)
	}
	// The clones stand alone: without the cache they are whole.
	if err := os.RemoveAll(cache); err != nil {
		t.Fatal(err)
	}
	selfContained(t, first)
	selfContained(t, second)
}

// The agent's uid can neither write nor even read the cache; a cache
// folder another user could write is not used.
func TestCacheIsTheHarnessesAlone(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	url, _ := counted(t, h)
	cache := filepath.Join(t.TempDir(), "cache")
	var l logs
	if err := workspace.Prepare(ctx, url, "w1", filepath.Join(t.TempDir(), "ws"), workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	me := os.Geteuid()
	err := filepath.WalkDir(cache, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != me {
			t.Errorf("%s is owned by uid %d, not this process's %d", path, st.Uid, me)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s is writable by others: %v", path, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache folder mode %v (%v), want 0700", fi.Mode(), err)
	}
	if me == 0 {
		// As another uid (an agent's), writing into the mirror fails.
		target := filepath.Join(mirrors(t, cache)[0], "objects", "planted")
		cmd := exec.Command("/bin/sh", "-c", `echo planted > "$1"`, "sh", target)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Fatalf("uid 65534 wrote into the cache: %s", out)
		}
		if _, err := os.Lstat(target); err == nil {
			t.Fatal("the planted file exists")
		}
	}

	// A cache folder others may write is refused: Prepare clones plainly
	// and says so.
	if err := os.Chmod(cache, 0o777); err != nil {
		t.Fatal(err)
	}
	l = logs{}
	ws := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, "w1", ws, workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.String(), "writable by others") || !strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("no error logged for a cache writable by others: %s", l.String())
	}
	selfContained(t, ws)
}

// A corrupt mirror, or a cache that cannot exist, falls back to a plain
// clone, loudly; a corrupt mirror is set aside and the next clone makes a
// new one.
func TestCacheFallsBack(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	grow(t, &h, 256<<10, "w2", "w3")
	url, _ := counted(t, h)
	cache := filepath.Join(t.TempDir(), "cache")
	var l logs
	if err := workspace.Prepare(ctx, url, "w1", filepath.Join(t.TempDir(), "ws"), workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	mirror := mirrors(t, cache)[0]
	packs, _ := filepath.Glob(filepath.Join(mirror, "objects", "pack", "*.pack"))
	if len(packs) == 0 {
		t.Fatal("the mirror has no pack")
	}
	for _, p := range packs { // overwrite the middle of every pack
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := len(b) / 4; i < len(b)*3/4; i++ {
			b[i] ^= 0x5a
		}
		if err := os.Chmod(p, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	l = logs{}
	ws := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, "w2", ws, workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("no error logged for a corrupt mirror: %s", l.String())
	}
	selfContained(t, ws)
	if head := git(t, ws, "rev-parse", "HEAD"); head != h.main {
		t.Errorf("HEAD %s, want %s", head, h.main)
	}
	if _, err := os.Stat(mirror + ".suspect"); err != nil {
		t.Errorf("the corrupt mirror was not set aside: %v", err)
	}

	// The next clone builds a new mirror and uses it.
	l = logs{}
	ws3 := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, "w3", ws3, workspace.WithCache(cache, l.logger())); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("the rebuilt cache failed: %s", l.String())
	}
	if _, err := os.Stat(mirror); err != nil {
		t.Errorf("no new mirror: %v", err)
	}
	selfContained(t, ws3)

	// A cache folder that cannot be made (its parent is a file).
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l = logs{}
	ws4 := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, "w1", ws4, workspace.WithCache(filepath.Join(file, "cache"), l.logger())); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("no error logged for a cache that cannot exist: %s", l.String())
	}
	selfContained(t, ws4)

	// A missing branch is still NotFound, through the cache.
	err := workspace.Prepare(ctx, url, "no-such-branch", filepath.Join(t.TempDir(), "ws"), workspace.WithCache(cache, l.logger()))
	if err == nil {
		t.Fatal("a missing branch was cloned")
	}
}

// Harnesses preparing at once share one mirror, made once, under its lock.
func TestCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	branches := []string{"a", "b", "c", "d"}
	h := newHouse(t, branches...)
	url, _ := counted(t, h)
	cache := filepath.Join(t.TempDir(), "cache")
	var l logs
	var wg sync.WaitGroup
	dirs := make([]string, len(branches))
	errs := make([]error, len(branches))
	for i, b := range branches {
		dirs[i] = filepath.Join(t.TempDir(), "ws")
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = workspace.Prepare(ctx, url, b, dirs[i], workspace.WithCache(cache, l.logger()))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s: %v", branches[i], err)
		}
		selfContained(t, dirs[i])
	}
	if strings.Contains(l.String(), `"level":"ERROR"`) {
		t.Errorf("a concurrent Prepare fell back: %s", l.String())
	}
	if m := mirrors(t, cache); len(m) != 1 {
		t.Errorf("mirrors: %v", m)
	}
}

// A clone of a repository on a local path shares no object file with it:
// the harness gives the clone's files to the agent's uid, and a shared
// inode would give it the house's.
func TestPrepareSharesNoInodeWithALocalHouse(t *testing.T) {
	h := newHouse(t, "w1")
	grow(t, &h, 64<<10)
	ws := prepared(t, h, "w1")
	house := map[uint64]bool{}
	inodes := func(root string, each func(path string, ino uint64)) {
		err := filepath.WalkDir(filepath.Join(root, "objects"), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return err
			}
			each(path, fi.Sys().(*syscall.Stat_t).Ino)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	inodes(h.path, func(_ string, ino uint64) { house[ino] = true })
	inodes(filepath.Join(ws, ".git"), func(path string, ino uint64) {
		if house[ino] {
			t.Errorf("%s is the house's own file (hard link)", path)
		}
	})
}
