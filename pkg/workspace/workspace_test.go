package workspace_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/gitexec"
	"github.com/galley-run/galley/pkg/workspace"
)

var identity = []string{
	"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
	"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
}

// git runs git in dir as an agent would and fails the test on error.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitexec.Cmd{Dir: dir, Env: identity}.Run(context.Background(), args...)
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// tryGit runs git in dir and returns its error.
func tryGit(dir string, args ...string) error {
	_, err := gitexec.Cmd{Dir: dir, Env: identity}.Run(context.Background(), args...)
	return err
}

// house is a bare house repository with branches created from main.
type house struct {
	path string
	repo *githost.Repo
	main string // main's head
}

func newHouse(t *testing.T, branches ...string) house {
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
	head, err := r.DefaultHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range branches {
		if err := r.CreateBranch(ctx, b, head); err != nil {
			t.Fatal(err)
		}
	}
	return house{path: path, repo: r, main: head}
}

// head returns branch's commit in the house, or "" when it does not exist.
func (h house) head(t *testing.T, branch string) string {
	t.Helper()
	c, _, err := h.repo.BranchHead(context.Background(), branch)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// prepared returns a prepared workspace of branch in h.
func prepared(t *testing.T, h house, branch string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(context.Background(), h.path, branch, dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPrepare(t *testing.T) {
	const branch = "kitchen/issue-195"
	h := newHouse(t, branch)
	dir := prepared(t, h, branch)

	if got := git(t, dir, "symbolic-ref", "HEAD"); got != "refs/heads/"+branch {
		t.Fatalf("HEAD = %s", got)
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != h.main {
		t.Fatalf("HEAD at %s, want %s", got, h.main)
	}
	if _, err := os.Stat(filepath.Join(dir, "README.md")); err != nil {
		t.Fatalf("work tree not checked out: %v", err)
	}
	if got := git(t, dir, "config", "--get-all", "remote.origin.push"); got != "refs/heads/"+branch+":refs/heads/"+branch {
		t.Fatalf("remote.origin.push = %q", got)
	}
	hook := filepath.Join(dir, ".git", "hooks", "pre-push")
	if fi, err := os.Stat(hook); err != nil || fi.Mode()&0o111 == 0 {
		t.Fatalf("pre-push hook missing or not executable: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Fatalf("leftovers beside the workspace: %v", entries)
	}
}

func TestPrepareIsIdempotent(t *testing.T) {
	ctx := context.Background()
	const branch = "w1"
	h := newHouse(t, branch)
	dir := prepared(t, h, branch)

	// The agent's work in progress: a local commit and an uncommitted file.
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "local work")
	local := git(t, dir, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(dir, "draft.txt"), []byte("wip"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A tampered restriction is repaired.
	if err := os.Remove(filepath.Join(dir, ".git", "hooks", "pre-push")); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "config", "remote.origin.push", "refs/heads/*:refs/heads/*")

	if err := workspace.Prepare(ctx, h.path, branch, dir); err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != local {
		t.Fatalf("Prepare moved HEAD from %s to %s", local, got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "draft.txt")); err != nil || string(b) != "wip" {
		t.Fatalf("Prepare lost the agent's file: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".git", "hooks", "pre-push")); err != nil {
		t.Fatalf("hook not reinstalled: %v", err)
	}
	if got := git(t, dir, "config", "--get-all", "remote.origin.push"); got != "refs/heads/w1:refs/heads/w1" {
		t.Fatalf("remote.origin.push = %q", got)
	}
	if got := h.head(t, branch); got != h.main {
		t.Fatalf("Prepare changed the house's branch to %s", got)
	}
}

func TestPrepareConcurrent(t *testing.T) {
	h := newHouse(t, "w1")
	dir := filepath.Join(t.TempDir(), "ws")
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = workspace.Prepare(context.Background(), h.path, "w1", dir) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("Prepare: %v", err)
		}
	}
	if got := git(t, dir, "symbolic-ref", "HEAD"); got != "refs/heads/w1" {
		t.Fatalf("HEAD = %s", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Fatalf("leftovers beside the workspace: %v", entries)
	}
}

func TestPrepareRefuses(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1", "w2")
	other := newHouse(t, "w1")
	onW2 := prepared(t, h, "w2")
	ofOther := prepared(t, other, "w1")
	cluttered := t.TempDir()
	if err := os.WriteFile(filepath.Join(cluttered, "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := func() string { return filepath.Join(t.TempDir(), "ws") }

	tests := []struct {
		name, url, branch, dir string
		want                   galleyerr.Kind
	}{
		{"missing branch", h.path, "nope", fresh(), galleyerr.NotFound},
		{"invalid branch", h.path, "a..b", fresh(), galleyerr.Invalid},
		{"credentials in URL", "https://x-access-token:s3cr3t@git.example.com/house.git", "w1", fresh(), galleyerr.Invalid},
		{"token as URL user", "https://s3cr3t@git.example.com/house.git", "w1", fresh(), galleyerr.Invalid},
		{"dir holds other files", h.path, "w1", cluttered, galleyerr.Invalid},
		{"dir is on another branch", h.path, "w1", onW2, galleyerr.Conflict},
		{"dir clones another repository", h.path, "w1", ofOther, galleyerr.Conflict},
		{"missing repository", filepath.Join(t.TempDir(), "none.git"), "w1", fresh(), galleyerr.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := workspace.Prepare(ctx, tt.url, tt.branch, tt.dir)
			if !galleyerr.Is(tt.want, err) {
				t.Fatalf("Prepare = %v, want %v", err, tt.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Fatalf("error leaks a credential: %v", err)
			}
		})
	}
	if h.head(t, "nope") != "" {
		t.Fatal("Prepare created a missing branch")
	}
	if got := git(t, onW2, "symbolic-ref", "HEAD"); got != "refs/heads/w2" {
		t.Fatalf("Prepare switched a workspace's branch to %s", got)
	}
	if _, err := os.Stat(filepath.Join(cluttered, "precious")); err != nil {
		t.Fatal("Prepare touched an unrelated directory")
	}
}

func TestCommitAndPush(t *testing.T) {
	ctx := context.Background()
	const branch = "kitchen/issue-195"
	h := newHouse(t, branch)
	dir := prepared(t, h, branch)

	if err := workspace.CommitAndPush(ctx, dir, "notes/a.txt", "hello\n", "add a"); err != nil {
		t.Fatal(err)
	}
	first := h.head(t, branch)
	if first == h.main {
		t.Fatal("the branch did not move")
	}
	if got := git(t, h.path, "show", first+":notes/a.txt"); got != "hello" {
		t.Fatalf("pushed content = %q", got)
	}
	if got := git(t, h.path, "log", "-1", "--format=%an <%ae>|%s", first); got != "galley <galley@galley.invalid>|add a" {
		t.Fatalf("commit = %q", got)
	}
	if got := git(t, h.path, "rev-parse", first+"^"); got != h.main {
		t.Fatalf("parent = %s, want main's head", got)
	}
	if h.head(t, "main") != h.main {
		t.Fatal("main moved")
	}

	// The same content again commits nothing and still succeeds.
	if err := workspace.CommitAndPush(ctx, dir, "notes/a.txt", "hello\n", "add a"); err != nil {
		t.Fatal(err)
	}
	if got := h.head(t, branch); got != first {
		t.Fatalf("an unchanged file made commit %s", got)
	}

	// Something else the agent staged is not swept into galley's commit.
	if err := os.WriteFile(filepath.Join(dir, "staged.txt"), []byte("agent"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "add", "staged.txt")
	if err := workspace.CommitAndPush(ctx, dir, "notes/a.txt", "hello again\n", "update a"); err != nil {
		t.Fatal(err)
	}
	second := h.head(t, branch)
	if got := git(t, h.path, "rev-parse", second+"^"); got != first {
		t.Fatal("second commit is not a fast-forward of the first")
	}
	if got := git(t, h.path, "diff-tree", "--no-commit-id", "--name-only", "-r", second); got != "notes/a.txt" {
		t.Fatalf("second commit touched %q", got)
	}
}

func TestCommitAndPushAfterFailedPush(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	// Break origin so the push fails after the commit is made.
	git(t, dir, "remote", "set-url", "origin", filepath.Join(t.TempDir(), "gone.git"))
	if err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a"); err == nil {
		t.Fatal("push to a missing origin succeeded")
	}
	git(t, dir, "remote", "set-url", "origin", h.path)
	if err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := git(t, h.path, "show", "w1:a.txt"); got != "a" {
		t.Fatalf("retry pushed %q", got)
	}
}

func TestCommitAndPushNotFastForward(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	// Someone else moves the branch on the house.
	tree := git(t, h.path, "rev-parse", h.main+"^{tree}")
	moved := git(t, h.path, "commit-tree", tree, "-p", h.main, "-m", "elsewhere")
	git(t, h.path, "update-ref", "refs/heads/w1", moved, h.main)

	err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a")
	if !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("CommitAndPush = %v, want Conflict", err)
	}
	if got := h.head(t, "w1"); got != moved {
		t.Fatalf("the branch was overwritten: %s", got)
	}
}

func TestPushRestrictedToBranch(t *testing.T) {
	// A global core.hooksPath must not switch the hook off.
	global := filepath.Join(t.TempDir(), "gitconfig")
	if err := os.WriteFile(global, []byte("[core]\n\thooksPath = "+t.TempDir()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)

	// Quotes, $ and backquotes are legal in branch names: the hook must
	// quote them.
	const branch = "o'k/$(id)`x`"
	h := newHouse(t, branch, "other")
	dir := prepared(t, h, branch)
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "agent work")
	work := git(t, dir, "rev-parse", "HEAD")
	git(t, dir, "branch", "side")

	refused := []struct {
		name string
		args []string
	}{
		{"new branch", []string{"push", "origin", "HEAD:refs/heads/sneaky"}},
		{"default branch", []string{"push", "origin", "HEAD:refs/heads/main"}},
		{"another worker's branch", []string{"push", "--force", "origin", "HEAD:refs/heads/other"}},
		{"a tag", []string{"push", "origin", "HEAD:refs/tags/v1"}},
		{"delete own branch", []string{"push", "origin", ":refs/heads/" + branch}},
		{"all branches (own and side)", []string{"push", "--all", "origin"}},
		{"by URL", []string{"push", h.path, "HEAD:refs/heads/sneaky"}},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			if err := tryGit(dir, tt.args...); err == nil {
				t.Fatalf("git %v succeeded", tt.args)
			}
		})
	}
	refs := git(t, h.path, "for-each-ref", "--format=%(refname)")
	if want := "refs/heads/main\nrefs/heads/o'k/$(id)`x`\nrefs/heads/other"; refs != want {
		t.Fatalf("house refs =\n%s\nwant\n%s", refs, want)
	}
	for _, b := range []string{"main", "other", branch} {
		if h.head(t, b) != h.main {
			t.Fatalf("branch %s moved", b)
		}
	}

	// A stray `git push` pushes the workspace's own branch, and only that.
	git(t, dir, "push", "--quiet")
	if got := h.head(t, branch); got != work {
		t.Fatalf("plain push left the branch at %s, want %s", got, work)
	}
	if h.head(t, "side") != "" {
		t.Fatal("plain push pushed another branch")
	}
}

func TestCommitAndPushPathEscapes(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	tests := []string{
		"", "../x", "a/../../x", "/etc/galley-x", filepath.Join(outside, "x"), ".", "..",
		".git/hooks/pre-push", "sub/.GIT/config", ".git", "link/x",
	}
	for _, path := range tests {
		err := workspace.CommitAndPush(ctx, dir, path, "pwned", "escape")
		if !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("CommitAndPush(%q) = %v, want Invalid", path, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("files written outside the workspace: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "x")); !os.IsNotExist(err) {
		t.Fatal("file written beside the workspace")
	}
	if got := h.head(t, "w1"); got != h.main {
		t.Fatal("a refused write moved the branch")
	}
	if err := workspace.CommitAndPush(ctx, dir, "ok.txt", "x", ""); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("empty message: %v", err)
	}
	if err := workspace.CommitAndPush(ctx, t.TempDir(), "ok.txt", "x", "m"); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("unprepared dir: %v", err)
	}
}

func TestRemove(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	if err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a"); err != nil {
		t.Fatal(err)
	}
	pushed := h.head(t, "w1")
	leftover := filepath.Join(filepath.Dir(dir), ".ws.prepare-123")
	if err := os.Mkdir(leftover, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := workspace.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("workspace still there: %v", err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Fatal("interrupted Prepare's clone still there")
	}
	if got := h.head(t, "w1"); got != pushed {
		t.Fatalf("Remove changed the branch: %q", got)
	}
	if err := workspace.Remove(dir); err != nil {
		t.Fatalf("second Remove: %v", err)
	}

	unrelated := t.TempDir()
	if err := os.WriteFile(filepath.Join(unrelated, "precious"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{unrelated, "/", ""} {
		if err := workspace.Remove(d); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("Remove(%q) = %v, want Invalid", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(unrelated, "precious")); err != nil {
		t.Fatal("Remove deleted an unrelated directory")
	}
}

// TestPrepareWithoutBranch: a worker launched with no branch gets a
// detached checkout of the default head and can push nothing.
func TestPrepareWithoutBranch(t *testing.T) {
	h := newHouse(t)
	dir := prepared(t, h, "")
	if err := tryGit(dir, "symbolic-ref", "-q", "HEAD"); err == nil {
		t.Fatal("HEAD is on a branch; want detached")
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != h.main {
		t.Fatalf("HEAD at %s, want %s", got, h.main)
	}
	if err := workspace.Prepare(context.Background(), h.path, "", dir); err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	git(t, dir, "commit", "--allow-empty", "-qm", "local work")
	for _, args := range [][]string{
		{"push", "origin", "HEAD:refs/heads/main"},
		{"push", "origin", "HEAD:refs/heads/new-branch"},
		{"push"},
	} {
		_ = tryGit(dir, args...)
	}
	if got := h.head(t, "main"); got != h.main {
		t.Fatal("a branchless workspace pushed to main")
	}
	if got := h.head(t, "new-branch"); got != "" {
		t.Fatal("a branchless workspace created a branch")
	}
}

// CommitAndPush refuses a path through a symbolic link, one that stays in
// the workspace (a folder linked to .git) too, and writes nothing there.
func TestCommitAndPushFollowsNoLink(t *testing.T) {
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	if err := os.Symlink(".git", filepath.Join(dir, "docs")); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, ".git", "config"))
	err := workspace.CommitAndPush(context.Background(), dir, "docs/config", "[core]\n\tfsmonitor = /bin/true\n", "m")
	if err == nil {
		t.Fatal("CommitAndPush through a link to .git succeeded")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, ".git", "config")); string(after) != string(before) {
		t.Fatalf(".git/config changed through the link:\n%s", after)
	}
}

// A workspace marked not reusable (its agent could not be ended) is
// refused by Prepare until Remove deletes it with its mark.
func TestNotReusable(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	if err := workspace.MarkNotReusable(dir, "2 processes of uid 536870913 remain"); err != nil {
		t.Fatal(err)
	}
	err := workspace.Prepare(ctx, h.path, "w1", dir)
	if !galleyerr.Is(galleyerr.Conflict, err) || !strings.Contains(err.Error(), "2 processes of uid 536870913 remain") {
		t.Fatalf("Prepare of a workspace kept out of reuse = %v, want Conflict saying why", err)
	}
	if err := workspace.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := workspace.Prepare(ctx, h.path, "w1", dir); err != nil {
		t.Fatalf("Prepare after Remove: %v", err)
	}
}
