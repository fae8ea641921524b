package githost_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/gitexec"
	"github.com/galley-run/galley/pkg/githost/githosttest"
)

// gitHost is service.GitHost's method set, copied so that this test does not
// build package service (compile-time proof that *Repo fits the contract).
type gitHost interface {
	DefaultHead(ctx context.Context) (string, error)
	BranchHead(ctx context.Context, branch string) (commit string, exists bool, err error)
	ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error)
	CreateBranch(ctx context.Context, branch, commit string) error
	DeleteBranch(ctx context.Context, branch string) error
}

var _ gitHost = (*githost.Repo)(nil)

// git runs git in dir and fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitexec.Run(context.Background(), dir, args...)
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// newHouse returns a fresh bare house repository and its opened Repo.
func newHouse(t *testing.T) (string, *githost.Repo) {
	t.Helper()
	ctx := context.Background()
	path, err := githost.InitBare(ctx, filepath.Join(t.TempDir(), "house.git"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := githost.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return path, r
}

// commitOn makes a new commit whose parent is parent, in the bare repo at
// path, and returns its id (a commit no branch points at).
func commitOn(t *testing.T, path, parent, msg string) string {
	t.Helper()
	tree := git(t, path, "rev-parse", parent+"^{tree}")
	return git(t, path, "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-p", parent, "-m", msg)
}

func TestInitBareFresh(t *testing.T) {
	ctx := context.Background()
	path, r := newHouse(t)
	head, err := r.DefaultHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := git(t, path, "rev-parse", "refs/heads/main"); got != head {
		t.Fatalf("DefaultHead = %s, main = %s", head, got)
	}
	if got := git(t, path, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
		t.Fatalf("HEAD -> %s, want refs/heads/main", got)
	}
	if got := git(t, path, "rev-parse", "--is-bare-repository"); got != "true" {
		t.Fatalf("bare = %s", got)
	}
	if got := git(t, path, "show", "main:README.md"); !strings.Contains(got, "galley") {
		t.Fatalf("README = %q", got)
	}
	git(t, path, "fsck", "--strict") // real git accepts what go-git wrote
	if got := git(t, path, "log", "--format=%an <%ae>", "main"); got != "galley <galley@galley.invalid>" {
		t.Fatalf("author = %q", got)
	}
}

func TestInitBareReuses(t *testing.T) {
	ctx := context.Background()
	t.Run("existing repository", func(t *testing.T) {
		path, r := newHouse(t)
		head, _ := r.DefaultHead(ctx)
		again, err := githost.InitBare(ctx, path)
		if err != nil || again != path {
			t.Fatalf("InitBare again = %q, %v; want %q", again, err, path)
		}
		r2, err := githost.Open(ctx, again)
		if err != nil {
			t.Fatal(err)
		}
		if head2, _ := r2.DefaultHead(ctx); head2 != head {
			t.Fatalf("head changed: %s -> %s", head, head2)
		}
	})
	t.Run("existing non-bare repository", func(t *testing.T) {
		dir := t.TempDir()
		git(t, dir, "init", "-q", "-b", "trunk")
		got, err := githost.InitBare(ctx, dir)
		if err != nil || got != dir {
			t.Fatalf("InitBare = %q, %v", got, err)
		}
		if b := git(t, dir, "rev-parse", "--is-bare-repository"); b != "false" {
			t.Fatal("InitBare replaced a non-bare repository")
		}
	})
	t.Run("empty directory", func(t *testing.T) {
		dir := t.TempDir()
		got, err := githost.InitBare(ctx, dir)
		if err != nil || got != dir {
			t.Fatalf("InitBare = %q, %v", got, err)
		}
		if _, err := git2(dir, "rev-parse", "refs/heads/main"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("non-empty non-repository", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := githost.InitBare(ctx, dir); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Fatalf("InitBare = %v, want Invalid", err)
		}
	})
}

func git2(dir string, args ...string) (string, error) {
	return gitexec.Run(context.Background(), dir, args...)
}

func TestInitBareConcurrent(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	dir := filepath.Join(parent, "house.git")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = githost.InitBare(ctx, dir)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("InitBare #%d: %v", i, err)
		}
	}
	git(t, dir, "fsck", "--strict")
	if got := git(t, dir, "rev-list", "--count", "main"); got != "1" {
		t.Fatalf("main has %s commits, want 1", got)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Fatalf("leftovers beside the repository: %v", entries)
	}
}

func TestCreateBranchConcurrentOneWins(t *testing.T) {
	ctx := context.Background()
	path, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	// Half the callers use their own Repo, as another process would.
	others := make([]*githost.Repo, 4)
	for i := range others {
		var err error
		if others[i], err = githost.Open(ctx, path); err != nil {
			t.Fatal(err)
		}
	}
	const n = 32
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		host := r
		if i%2 == 1 {
			host = others[i%len(others)]
		}
		wg.Go(func() {
			<-start
			errs[i] = host.CreateBranch(ctx, "kitchen/issue-195", head)
		})
	}
	close(start)
	wg.Wait()
	var ok, conflict int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case galleyerr.Is(galleyerr.Conflict, err):
			conflict++
		default:
			t.Errorf("CreateBranch: %v", err)
		}
	}
	if ok != 1 || conflict != n-1 {
		t.Fatalf("%d succeeded, %d conflicted; want 1 and %d", ok, conflict, n-1)
	}
	got, exists, err := r.BranchHead(ctx, "kitchen/issue-195")
	if err != nil || !exists || got != head {
		t.Fatalf("BranchHead = %s, %v, %v; want %s", got, exists, err, head)
	}
}

func TestCreateBranch(t *testing.T) {
	ctx := context.Background()
	path, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	other := commitOn(t, path, head, "other")
	for _, b := range []string{"taken", "a", "x/y"} {
		if err := r.CreateBranch(ctx, b, head); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, branch, commit string
		want                 galleyerr.Kind // Other means success
	}{
		{"new branch at a commit no branch holds", "feature/one", other, galleyerr.Other},
		{"name git allows verbatim", "o'k/@/$x", head, galleyerr.Other},
		{"exists at the same commit", "taken", head, galleyerr.Conflict},
		{"exists at another commit", "taken", other, galleyerr.Conflict},
		{"default branch", "main", head, galleyerr.Conflict},
		{"under an existing branch", "a/b", head, galleyerr.Conflict},
		{"above an existing branch", "x", head, galleyerr.Conflict},
		{"invalid name", "bad..name", head, galleyerr.Invalid},
		{"leading dash", "-x", head, galleyerr.Invalid},
		{"abbreviated commit", "short", head[:12], galleyerr.Invalid},
		{"missing commit", "missing", strings.Repeat("1", 40), galleyerr.Invalid},
		{"uppercase hex", "upper", strings.ToUpper(head), galleyerr.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, existed, _ := r.BranchHead(ctx, tt.branch)
			err := r.CreateBranch(ctx, tt.branch, tt.commit)
			if tt.want == galleyerr.Other {
				if err != nil {
					t.Fatal(err)
				}
				if got := git(t, path, "rev-parse", "refs/heads/"+tt.branch); got != tt.commit {
					t.Fatalf("branch at %s, want %s", got, tt.commit)
				}
				return
			}
			if !galleyerr.Is(tt.want, err) {
				t.Fatalf("CreateBranch = %v, want %v", err, tt.want)
			}
			after, exists, _ := r.BranchHead(ctx, tt.branch)
			if exists != existed || after != before {
				t.Fatalf("a refused create changed the branch: %s,%v -> %s,%v", before, existed, after, exists)
			}
		})
	}
}

func TestPackedRefs(t *testing.T) {
	ctx := context.Background()
	path, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	if err := r.CreateBranch(ctx, "packed", head); err != nil {
		t.Fatal(err)
	}
	git(t, path, "pack-refs", "--all", "--prune")
	if _, err := os.Stat(filepath.Join(path, "refs", "heads", "packed")); !os.IsNotExist(err) {
		t.Fatalf("ref still loose: %v", err)
	}
	if got, exists, err := r.BranchHead(ctx, "packed"); err != nil || !exists || got != head {
		t.Fatalf("BranchHead(packed) = %s, %v, %v", got, exists, err)
	}
	if err := r.CreateBranch(ctx, "packed", head); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("CreateBranch over a packed ref = %v, want Conflict", err)
	}
	if d, err := r.DefaultHead(ctx); err != nil || d != head {
		t.Fatalf("DefaultHead with packed main = %s, %v", d, err)
	}
	if err := r.DeleteBranch(ctx, "packed"); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := r.BranchHead(ctx, "packed"); exists {
		t.Fatal("packed branch survived DeleteBranch")
	}
}

func TestBranchHead(t *testing.T) {
	ctx := context.Background()
	_, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	if err := r.CreateBranch(ctx, "dir/leaf", head); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		branch  string
		exists  bool
		invalid bool
	}{
		{"main", true, false},
		{"dir/leaf", true, false},
		{"dir", false, false}, // refs/heads/dir is a directory on disk
		{"nope", false, false},
		{"dir/leaf/deeper", false, false},
		{"a b", false, true},
	}
	for _, tt := range tests {
		got, exists, err := r.BranchHead(ctx, tt.branch)
		if tt.invalid {
			if !galleyerr.Is(galleyerr.Invalid, err) {
				t.Errorf("BranchHead(%q) = %v, want Invalid", tt.branch, err)
			}
			continue
		}
		if err != nil || exists != tt.exists || (exists && got != head) {
			t.Errorf("BranchHead(%q) = %q, %v, %v; want exists=%v", tt.branch, got, exists, err, tt.exists)
		}
	}
}

func TestDeleteBranch(t *testing.T) {
	ctx := context.Background()
	_, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	if err := r.DeleteBranch(ctx, "never-was"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	if err := r.CreateBranch(ctx, "gone", head); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = r.DeleteBranch(ctx, "gone") })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent delete: %v", err)
		}
	}
	if _, exists, _ := r.BranchHead(ctx, "gone"); exists {
		t.Fatal("branch survived DeleteBranch")
	}
	// The name is free again.
	if err := r.CreateBranch(ctx, "gone", head); err != nil {
		t.Fatalf("recreate: %v", err)
	}
	if err := r.DeleteBranch(ctx, "main"); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("delete default branch = %v, want Invalid", err)
	}
	if _, exists, _ := r.BranchHead(ctx, "main"); !exists {
		t.Fatal("default branch deleted")
	}
}

func TestDefaultHeadEmptyRepository(t *testing.T) {
	dir := t.TempDir()
	git(t, dir, "init", "-q", "--bare")
	r, err := githost.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DefaultHead(context.Background()); !galleyerr.Is(galleyerr.NotFound, err) {
		t.Fatalf("DefaultHead = %v, want NotFound", err)
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	bare, _ := newHouse(t)
	work := t.TempDir()
	git(t, work, "init", "-q", "-b", "trunk")
	git(t, work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
	workHead := git(t, work, "rev-parse", "HEAD")

	tests := []struct {
		name, repo string
		want       galleyerr.Kind // Other means success
	}{
		{"bare path", bare, galleyerr.Other},
		{"non-bare path", work, galleyerr.Other},
		{"file URL", "file://" + bare, galleyerr.Other},
		{"file URL with localhost", "file://localhost" + bare, galleyerr.Other},
		{"missing", filepath.Join(t.TempDir(), "none"), galleyerr.NotFound},
		{"plain directory", t.TempDir(), galleyerr.NotFound},
		{"https", "https://x-access-token:s3cr3t@git.example.com/house.git", galleyerr.Unsupported},
		{"ssh", "ssh://git@git.example.com/house.git", galleyerr.Unsupported},
		{"scp-like", "git@git.example.com:house.git", galleyerr.Unsupported},
		{"file URL of another host", "file://elsewhere/house.git", galleyerr.Unsupported},
		{"empty", "", galleyerr.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := githost.Open(ctx, tt.repo)
			if tt.want != galleyerr.Other {
				if !galleyerr.Is(tt.want, err) {
					t.Fatalf("Open = %v, want %v", err, tt.want)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("error leaks a credential: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.DefaultHead(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}

	// In a non-bare repository the default branch is what HEAD names, and
	// branches are created in its git directory.
	r, err := githost.Open(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := r.DefaultHead(ctx); h != workHead {
		t.Fatalf("DefaultHead = %s, want %s", h, workHead)
	}
	if err := r.CreateBranch(ctx, "w", workHead); err != nil {
		t.Fatal(err)
	}
	if got := git(t, work, "rev-parse", "refs/heads/w"); got != workHead {
		t.Fatalf("branch w at %s", got)
	}
}

// TestValidateBranchAgreesWithGit compares ValidateBranch with
// `git check-ref-format --branch` on names where git does not expand
// anything, and checks the client's extra limits.
func TestValidateBranchAgreesWithGit(t *testing.T) {
	names := []string{
		"main", "kitchen/issue-195", "a/b/c", "feature_x", "v1.2", "x.lock", "x.lock/y", "a..b",
		".hidden", "a/.b", "a/", "/a", "a//b", "a.", "a/b.", "-x", "a/-b", "HEAD", "a/HEAD",
		"a~b", "a^b", "a:b", "a?b", "a*b", "a[b", `a\b`, "a b", "a\tb", "x.y.z", "a,b", "a'b",
		"a\"b", "a$b", "a;b", "a&b", "a|b", "a{b", "a}b", "(x)", "#1", "a=b", "+x", "a/b.lock/c",
		"a/.lock", "..", ".", "a.lock.b", "ab.", "refs/heads/x", "0", strings.Repeat("x", 255),
		"a/@", "a@b", "user@host", "a/@/b",
	}
	for _, name := range names {
		_, gerr := gitexec.Run(context.Background(), t.TempDir(), "check-ref-format", "--branch", name)
		err := githost.ValidateBranch(name)
		if (gerr == nil) != (err == nil) {
			t.Errorf("%q: ValidateBranch = %v, git check-ref-format --branch = %v", name, err, gerr)
		}
		if err != nil && !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%q: kind %v, want Invalid", name, galleyerr.KindOf(err))
		}
	}
	for _, name := range []string{"", strings.Repeat("x", 256), "caf\u00e9", "a\x7fb", "@", "a@{b"} {
		if err := githost.ValidateBranch(name); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%q: ValidateBranch = %v, want Invalid", name, err)
		}
	}
}

func ExampleOpen() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "house")
	defer os.RemoveAll(dir)
	path, _ := githost.InitBare(ctx, filepath.Join(dir, "house.git"))
	r, _ := githost.Open(ctx, path)
	head, _ := r.DefaultHead(ctx)
	fmt.Println(r.CreateBranch(ctx, "kitchen/issue-195", head))
	fmt.Println(galleyerr.KindOf(r.CreateBranch(ctx, "kitchen/issue-195", head)))
	// Output:
	// <nil>
	// conflict
}

func TestSuite(t *testing.T) {
	githosttest.Run(t, func(t *testing.T) githosttest.Subject {
		path, r := newHouse(t)
		return githosttest.Subject{Host: r, Bare: path}
	})
}

// A house repository that is not bare keeps its refs in .git.
func TestSuiteNonBare(t *testing.T) {
	githosttest.Run(t, func(t *testing.T) githosttest.Subject {
		bare, _ := newHouse(t)
		dir := filepath.Join(t.TempDir(), "house")
		git(t, "", "clone", "-q", bare, dir)
		r, err := githost.Open(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		return githosttest.Subject{Host: r, Bare: filepath.Join(dir, ".git")}
	})
}

// Branches that exist throughout read as existing while other writers move
// them (loose refs renamed over) and pack them (loose refs moved into
// packed-refs and deleted), however the reads and writes interleave.
func TestExistingBranchesUnderConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	path, r := newHouse(t)
	head, _ := r.DefaultHead(ctx)
	other := commitOn(t, path, head, "other")
	var names []string
	var in strings.Builder
	for i := range 40 {
		names = append(names, fmt.Sprintf("kitchen/busy-%02d", i))
		fmt.Fprintf(&in, "create refs/heads/%s %s\n", names[i], head)
	}
	if _, err := (gitexec.Cmd{Dir: path, Stdin: in.String()}).Run(ctx, "update-ref", "--stdin"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // moves every branch back and forth: loose refs again
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			var in strings.Builder
			for _, b := range names {
				fmt.Fprintf(&in, "update refs/heads/%s %s\n", b, []string{other, head}[i%2])
			}
			_, _ = (gitexec.Cmd{Dir: path, Stdin: in.String()}).Run(ctx, "update-ref", "--stdin")
		}
	})
	wg.Go(func() { // packs them all, deleting the loose refs
		for {
			select {
			case <-done:
				return
			default:
			}
			_, _ = gitexec.Run(ctx, path, "pack-refs", "--all", "--prune")
		}
	})
	defer wg.Wait()
	defer close(done)
	for range 300 {
		got, err := r.ExistingBranches(ctx, names)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(names) {
			for _, b := range names {
				if !got[b] {
					t.Fatalf("%s read as missing while it existed throughout", b)
				}
			}
		}
	}
}
