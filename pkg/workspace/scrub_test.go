package workspace_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/workspace"
)

func secret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// served serves h over smart HTTP behind basic auth with a fresh credential.
func served(t *testing.T, h house) (url, user, pass string) {
	t.Helper()
	user, pass = "galley", secret(t)
	srv := httptest.NewServer(gitserve.BasicAuth("house", gitserve.Credential(user, pass), gitserve.Backend(h.path)))
	t.Cleanup(srv.Close)
	return srv.URL + "/house.git", user, pass
}

// holds reports the files under dir whose content holds any of needles.
func holds(t *testing.T, dir string, needles ...string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, n := range needles {
			if strings.Contains(string(b), n) {
				found = append(found, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestPrepareWithCredential(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	url, user, pass := served(t, h)
	encoded := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))

	dir := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, "w1", dir, workspace.WithCredential(user, pass)); err != nil {
		t.Fatal(err)
	}
	if got := git(t, dir, "rev-parse", "HEAD"); got != h.main {
		t.Fatalf("HEAD at %s, want %s", got, h.main)
	}
	if found := holds(t, dir, pass, encoded); len(found) > 0 {
		t.Fatalf("the credential is in the clone's files: %v", found)
	}
	// Preparing again (Scrub, verify, restrict) works and adds nothing.
	if err := workspace.Prepare(ctx, url, "w1", dir, workspace.WithCredential(user, pass)); err != nil {
		t.Fatal(err)
	}

	for name, opts := range map[string][]workspace.Option{
		"wrong credential": {workspace.WithCredential(user, secret(t))},
		"no credential":    nil,
	} {
		t.Run(name, func(t *testing.T) {
			err := workspace.Prepare(ctx, url, "w1", filepath.Join(t.TempDir(), "ws"), opts...)
			if !galleyerr.Is(galleyerr.Unavailable, err) || !strings.Contains(err.Error(), "refused the git credential") {
				t.Fatalf("Prepare = %v, want Unavailable naming the credential", err)
			}
			if strings.Contains(err.Error(), pass) || strings.Contains(err.Error(), encoded) {
				t.Fatal("the error quotes the credential")
			}
		})
	}
}

// marker is a script that records, in a file beside it, that it ran.
type marker struct{ script, file string }

func newMarker(t *testing.T) marker {
	t.Helper()
	d := t.TempDir()
	m := marker{script: filepath.Join(d, "planted.sh"), file: filepath.Join(d, "ran")}
	if err := os.WriteFile(m.script, []byte("#!/bin/sh\necho \"$0 $*\" >> '"+m.file+"'\ncat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m marker) ran() bool {
	_, err := os.Stat(m.file)
	return err == nil
}

// plant does what a hostile agent does to its workspace's git directory so
// that whoever runs git there next runs its program.
func plant(t *testing.T, dir string, m marker) {
	t.Helper()
	hooks := t.TempDir()
	for _, hook := range []string{"pre-commit", "post-commit", "pre-push", "post-checkout", "reference-transaction"} {
		for _, d := range []string{hooks, filepath.Join(dir, ".git", "hooks")} {
			if err := os.WriteFile(filepath.Join(d, hook), []byte("#!/bin/sh\n'"+m.script+"' </dev/null\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	included := filepath.Join(t.TempDir(), "included")
	if err := os.WriteFile(included, []byte("[core]\n\tfsmonitor = "+m.script+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, kv := range [][2]string{
		{"core.hooksPath", hooks},
		{"core.fsmonitor", m.script},
		{"credential.helper", "!" + m.script},
		{"filter.x.clean", m.script},
		{"filter.x.smudge", m.script},
		{"includeIf.gitdir:/.path", included},
		{"include.path", included},
		{"url.https://evil.invalid/house.git.insteadOf", git(t, dir, "config", "remote.origin.url")},
		{"core.sshCommand", m.script},
		{"diff.external", m.script},
		{"uploadpack.packObjectsHook", m.script},
	} {
		git(t, dir, "config", kv[0], kv[1])
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitattributes"), []byte("*.txt filter=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestScrub(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	m := newMarker(t)
	plant(t, dir, m)

	// The plants work: the agent's next git command runs them.
	if err := os.WriteFile(filepath.Join(dir, "probe.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "status")
	git(t, dir, "add", "probe.txt")
	git(t, dir, "commit", "-q", "-m", "probe")
	if !m.ran() {
		t.Fatal("the planted configuration ran nothing: the test proves nothing")
	}
	if err := os.Remove(m.file); err != nil {
		t.Fatal(err)
	}

	// Prepare scrubs, then galley's own commands (Prepare's, CommitAndPush's)
	// and the next agent's run none of them.
	if err := workspace.Prepare(ctx, h.path, "w1", dir); err != nil {
		t.Fatal(err)
	}
	if err := workspace.CommitAndPush(ctx, dir, "notes/a.txt", "hello\n", "add a"); err != nil {
		t.Fatal(err)
	}
	if got := git(t, h.path, "show", "w1:notes/a.txt"); got != "hello" {
		t.Fatalf("pushed %q (through a filter or to another remote?)", got)
	}
	git(t, dir, "status")
	git(t, dir, "commit", "-q", "--allow-empty", "-m", "next agent")
	if m.ran() {
		b, _ := os.ReadFile(m.file)
		t.Fatalf("a planted program ran after Scrub:\n%s", b)
	}

	config, err := os.ReadFile(filepath.Join(dir, ".git", "config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"fsmonitor", "credential", "filter", "include", "insteadof", "sshcommand", "external", "uploadpack", m.script} {
		if strings.Contains(strings.ToLower(string(config)), strings.ToLower(bad)) {
			t.Errorf(".git/config still holds %q:\n%s", bad, config)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, ".git", "hooks"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "pre-push" {
		t.Fatalf("hooks after Prepare: %v, want galley's pre-push only", entries)
	}
	if got := git(t, dir, "config", "core.hooksPath"); got != filepath.Join(dir, ".git", "hooks") {
		t.Fatalf("core.hooksPath = %s", got)
	}
}

func TestScrubKeepsAHealthyClone(t *testing.T) {
	ctx := context.Background()
	const branch = `o'k/"q"`
	h := newHouse(t, branch)
	dir := prepared(t, h, branch)
	config := filepath.Join(dir, ".git", "config")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(config)
	if err := workspace.Scrub(ctx, dir); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(config)
	if fi2, _ := os.Stat(config); string(after) != string(before) || !os.SameFile(fi, fi2) {
		t.Fatalf("Scrub rewrote a clean config:\n%s\nwas\n%s", after, before)
	}
	// Scrub dropped the pre-push hook; Prepare restores it, and the clone
	// still works as a workspace.
	if err := workspace.Prepare(ctx, h.path, branch, dir); err != nil {
		t.Fatal(err)
	}
	if err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a"); err != nil {
		t.Fatal(err)
	}
}

func TestScrubRefusesLinks(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	dir := prepared(t, h, "w1")
	elsewhere := filepath.Join(t.TempDir(), "config")
	if err := os.Rename(filepath.Join(dir, ".git", "config"), elsewhere); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(dir, ".git", "config")); err != nil {
		t.Fatal(err)
	}
	if err := workspace.Scrub(ctx, dir); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("Scrub of a linked config = %v, want Invalid", err)
	}
	if err := workspace.Prepare(ctx, h.path, "w1", dir); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("Prepare of a linked config = %v, want Invalid", err)
	}
}

func TestUseGate(t *testing.T) {
	ctx := context.Background()
	const branch = "w1"
	h := newHouse(t, branch, "other")
	url, user, pass := served(t, h)
	up, err := gitserve.Upstream(url, user, func(context.Context) (string, error) { return pass, nil })
	if err != nil {
		t.Fatal(err)
	}
	session := secret(t)
	gate := httptest.NewServer(gitserve.BasicAuth("gate", gitserve.Credential("agent", session),
		gitserve.PushGate(gitserve.OnlyBranch(branch), up)))
	defer gate.Close()

	dir := filepath.Join(t.TempDir(), "ws")
	if err := workspace.Prepare(ctx, url, branch, dir, workspace.WithCredential(user, pass)); err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := workspace.UseGate(ctx, dir, url, gate.URL+"/gate.git"); err != nil {
			t.Fatal(err)
		}
	}
	if got := git(t, dir, "config", "--get-all", "url."+gate.URL+"/gate.git.insteadOf"); got != url {
		t.Fatalf("insteadOf = %q", got)
	}

	// The agent holds the session secret only, in its environment.
	auth := base64.StdEncoding.EncodeToString([]byte("agent:" + session))
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "http.extraHeader")
	t.Setenv("GIT_CONFIG_VALUE_0", "Authorization: Basic "+auth)
	if err := workspace.CommitAndPush(ctx, dir, "a.txt", "a", "add a"); err != nil {
		t.Fatalf("push of the worker's branch through the gate: %v", err)
	}
	if got := git(t, h.path, "show", branch+":a.txt"); got != "a" {
		t.Fatalf("pushed %q", got)
	}
	err = tryGit(dir, "push", "--no-verify", "--force", "origin", "HEAD:refs/heads/other")
	if err == nil || !strings.Contains(err.Error(), "may push only refs/heads/w1") {
		t.Fatalf("push past the hook to another branch: %v", err)
	}
	if h.head(t, "other") != h.main {
		t.Fatal("the gate let another branch move")
	}
	if found := holds(t, dir, pass, session); len(found) > 0 {
		t.Fatalf("a credential is in the clone's files: %v", found)
	}

	// A planted rewrite that wins over the gate is caught.
	git(t, dir, "config", "remote.origin.pushurl", "https://evil.invalid/x.git")
	if err := workspace.UseGate(ctx, dir, url, gate.URL+"/gate.git"); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("UseGate with a pushurl = %v, want Conflict", err)
	}
	if err := workspace.UseGate(ctx, dir, url, "https://u:p@gate.invalid/x"); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("UseGate with credentials in the gate URL = %v, want Invalid", err)
	}
}

// TestScrubFollowsNoLink: an agent replaces .git, .git/info,
// .git/objects/info, or the files Scrub removes, by symbolic links to the
// same names in a root-only folder elsewhere and in another repository.
// Scrub removes nothing there (the other repository still reads its
// objects through its alternates file), and the reused clone still
// prepares. Remove of a worktree with those links leaves them too.
func TestScrubFollowsNoLink(t *testing.T) {
	ctx := context.Background()
	for _, link := range []string{".git", ".git/info", ".git/objects/info", ".git/info/attributes", ".git/objects/info/alternates"} {
		for _, target := range []string{"root-only", "other-repository"} {
			t.Run(link+" to "+target, func(t *testing.T) {
				h := newHouse(t, "w1")
				dir := prepared(t, h, "w1")
				var outside string
				switch target {
				case "root-only":
					outside = filepath.Join(t.TempDir(), "private")
					for _, f := range []string{"info/attributes", "objects/info/alternates", "config"} {
						p := filepath.Join(outside, ".git", f)
						if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
							t.Fatal(err)
						}
						if err := os.WriteFile(p, []byte("root only "+f), 0o600); err != nil {
							t.Fatal(err)
						}
					}
					if err := os.Chmod(outside, 0o700); err != nil {
						t.Fatal(err)
					}
				case "other-repository":
					// Another clone that borrows its objects through an
					// alternates file.
					other := newHouse(t, "w2")
					outside = filepath.Join(t.TempDir(), "other")
					git(t, filepath.Dir(outside), "clone", "--quiet", "--shared", other.path, outside)
					if err := os.WriteFile(filepath.Join(outside, ".git", "info", "attributes"), []byte("* text\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				before := snapshotTree(t, outside)
				if err := os.RemoveAll(filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(filepath.Join(outside, link), filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
				err := workspace.Scrub(ctx, dir)
				if link == ".git" {
					if !galleyerr.Is(galleyerr.Invalid, err) {
						t.Fatalf("Scrub of a linked .git = %v, want Invalid", err)
					}
				} else if err != nil {
					t.Fatalf("Scrub: %v", err)
				}
				if after := snapshotTree(t, outside); after != before {
					t.Fatalf("Scrub changed the files beyond the link at %s:\nbefore\n%s\nafter\n%s", link, before, after)
				}
				if target == "other-repository" {
					git(t, outside, "log", "--oneline", "-1") // still reads its objects
				}
				if link != ".git" {
					if fi, err := os.Lstat(filepath.Join(dir, link)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
						t.Errorf("the link at %s is still there", link)
					}
					if err := workspace.Prepare(ctx, h.path, "w1", dir); err != nil {
						t.Fatalf("Prepare of the scrubbed clone: %v", err)
					}
				}
				if err := os.Symlink(filepath.Join(outside, ".git", "info"), filepath.Join(dir, "linked-info")); err != nil {
					t.Fatal(err)
				}
				if err := workspace.Remove(dir); err != nil {
					t.Fatalf("Remove: %v", err)
				}
				if after := snapshotTree(t, outside); after != before {
					t.Fatalf("Remove changed the files beyond the links:\nbefore\n%s\nafter\n%s", before, after)
				}
			})
		}
	}
}

// snapshotTree lists every file beneath dir with its mode and content.
func snapshotTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + base64.StdEncoding.EncodeToString(c))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
