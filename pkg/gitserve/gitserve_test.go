package gitserve_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/remote"
	"github.com/galley-run/galley/pkg/gitserve"
)

// secret returns a fresh random credential.
func secret(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// result is one git run.
type result struct {
	stdout, stderr string
	err            error
}

// gitAs runs git in dir with prompts off, no system or global
// configuration, and, when user is not empty, HTTP basic auth for every
// request (http.extraHeader, through the environment).
func gitAs(dir, user, pass string, args ...string) result {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_ASKPASS=", "SSH_ASKPASS=",
		"LC_ALL=C",
		"GIT_AUTHOR_NAME=agent", "GIT_AUTHOR_EMAIL=agent@example.com",
		"GIT_COMMITTER_NAME=agent", "GIT_COMMITTER_EMAIL=agent@example.com",
	)
	if user != "" {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		cmd.Env = append(cmd.Env, "GIT_CONFIG_COUNT=1",
			"GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic "+auth)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return result{out.String(), errb.String(), err}
}

// must runs git and fails the test on error.
func must(t testing.TB, dir, user, pass string, args ...string) string {
	t.Helper()
	r := gitAs(dir, user, pass, args...)
	if r.err != nil {
		t.Fatalf("git %v: %v\n%s", args, r.err, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// house is a bare repository with main and the given branches at main's
// first commit.
type house struct {
	dir  string
	main string
}

func newHouse(t testing.TB, branches ...string) house {
	t.Helper()
	ctx := context.Background()
	dir, err := githost.InitBare(ctx, filepath.Join(t.TempDir(), "house.git"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := githost.Open(ctx, dir)
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
	return house{dir: dir, main: head}
}

// refs lists the house's refs and their commits.
func (h house) refs(t *testing.T) string {
	t.Helper()
	return must(t, h.dir, "", "", "for-each-ref", "--format=%(refname) %(objectname)")
}

// served serves h behind basic auth with a fresh credential.
func served(t testing.TB, h house) (url, user, pass string) {
	t.Helper()
	user, pass = "house-"+secret(t)[:6], secret(t)
	srv := httptest.NewServer(gitserve.BasicAuth("house", gitserve.Credential(user, pass), gitserve.Backend(h.dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/any/name/house.git", user, pass
}

// chunked counts the requests whose body came chunked (no length).
func chunked(n *atomic.Int32, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength < 0 {
			n.Add(1)
		}
		next.ServeHTTP(w, r)
	})
}

func TestBackendWithBasicAuth(t *testing.T) {
	h := newHouse(t, "w1")
	user, pass := "house-"+secret(t)[:6], secret(t)
	var chunks atomic.Int32
	srv := httptest.NewServer(gitserve.BasicAuth("house", gitserve.Credential(user, pass), chunked(&chunks, gitserve.Backend(h.dir))))
	defer srv.Close()
	url := srv.URL + "/house.git"
	dir := filepath.Join(t.TempDir(), "clone")

	must(t, "", user, pass, "clone", "--quiet", "--branch", "w1", url, dir)
	if got := must(t, dir, "", "", "rev-parse", "HEAD"); got != h.main {
		t.Fatalf("cloned HEAD %s, want %s", got, h.main)
	}
	// A push larger than git's post buffer goes chunked, which net/http/cgi
	// refuses unless Backend spools it.
	big := make([]byte, 256<<10)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	must(t, dir, "", "", "add", "big.bin")
	must(t, dir, "", "", "commit", "--quiet", "-m", "big")
	pushed := must(t, dir, "", "", "rev-parse", "HEAD")
	must(t, dir, user, pass, "-c", "http.postBuffer=65536", "push", "--quiet", "origin", "HEAD:refs/heads/w1")
	if got := must(t, h.dir, "", "", "rev-parse", "refs/heads/w1"); got != pushed {
		t.Fatalf("w1 at %s after push, want %s", got, pushed)
	}
	if chunks.Load() == 0 {
		t.Fatal("the big push was not chunked: the test proves nothing about spooling")
	}
	must(t, dir, user, pass, "fetch", "--quiet", "origin")
	// Protocol v2 fetches work too (git 2.39 asks for v2 by default; say so).
	must(t, dir, user, pass, "-c", "protocol.version=2", "ls-remote", "origin", "refs/heads/main")

	for _, tc := range []struct{ name, user, pass, want string }{
		// With the credential in a header, git answers a 401 by asking
		// for one, which prompts being off refuse.
		{"wrong password", user, secret(t), "terminal prompts disabled"},
		{"wrong user", "someone", pass, "terminal prompts disabled"},
		{"no credential", "", "", "terminal prompts disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gitAs("", tc.user, tc.pass, "ls-remote", url)
			if r.err == nil {
				t.Fatal("ls-remote succeeded")
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("stderr = %q, want %q", r.stderr, tc.want)
			}
			r = gitAs(t.TempDir(), tc.user, tc.pass, "push", url, h.main+":refs/heads/sneaky")
			if r.err == nil {
				t.Fatal("push succeeded")
			}
		})
	}
	if strings.Contains(h.refs(t), "sneaky") {
		t.Fatal("an unauthenticated push landed")
	}
}

func TestBackendServesGoGit(t *testing.T) {
	ctx := context.Background()
	h := newHouse(t, "w1")
	url, user, pass := served(t, h)

	good, err := remote.New(url, func(context.Context) (string, error) { return pass, nil }, remote.WithUser(user))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok, err := good.BranchHead(ctx, "w1"); err != nil || !ok || c != h.main {
		t.Fatalf("BranchHead = %s, %v, %v; want %s", c, ok, err, h.main)
	}
	if err := good.CreateBranch(ctx, "w2", h.main); err != nil {
		t.Fatalf("CreateBranch over the backend: %v", err)
	}
	wrong := secret(t)
	bad, err := remote.New(url, func(context.Context) (string, error) { return wrong, nil }, remote.WithUser(user))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = bad.BranchHead(ctx, "w1")
	if err == nil {
		t.Fatal("a wrong credential read refs")
	}
	if strings.Contains(err.Error(), wrong) {
		t.Fatal("the error quotes the credential")
	}
}

func TestBackendRefusesDumbHTTPAndWrongMethods(t *testing.T) {
	h := newHouse(t)
	srv := httptest.NewServer(gitserve.Backend(h.dir))
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/x.git/HEAD", http.StatusNotFound},
		{"GET", "/x.git/objects/info/packs", http.StatusNotFound},
		{"GET", "/x.git/info/refs", http.StatusForbidden},
		{"POST", "/x.git/info/refs?service=git-upload-pack", http.StatusMethodNotAllowed},
		{"GET", "/x.git/git-receive-pack", http.StatusMethodNotAllowed},
		{"GET", "/x.git/info/refs?service=git-upload-pack", http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s = %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

// upstreamOf serves Upstream to h's served URL with the house credential;
// the token function's answer can be changed through tok ("" fails).
func upstreamOf(t testing.TB, url, user string, tok *atomic.Value) http.Handler {
	t.Helper()
	up, err := gitserve.Upstream(url, user, func(context.Context) (string, error) {
		s, _ := tok.Load().(string)
		if s == "" {
			return "", errors.New("no secret")
		}
		return s, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return up
}

func TestUpstream(t *testing.T) {
	h := newHouse(t, "w1")
	url, user, pass := served(t, h)
	var tok atomic.Value
	tok.Store(pass)
	proxy := httptest.NewServer(upstreamOf(t, url, user, &tok))
	defer proxy.Close()
	purl := proxy.URL + "/whatever.git"

	dir := filepath.Join(t.TempDir(), "clone")
	must(t, "", "", "", "clone", "--quiet", "--branch", "w1", purl, dir) // the client sends no credential
	must(t, dir, "", "", "commit", "--quiet", "--allow-empty", "-m", "work")
	must(t, dir, "intruder", secret(t), "push", "--quiet", "origin", "HEAD:refs/heads/w1") // its own is dropped
	if got, want := must(t, h.dir, "", "", "rev-parse", "w1"), must(t, dir, "", "", "rev-parse", "HEAD"); got != want {
		t.Fatalf("w1 at %s, want %s", got, want)
	}

	// A rotated-away credential fails upstream, and says so without asking
	// the client for one.
	rotated := secret(t)
	tok.Store(rotated)
	r := gitAs(dir, "", "", "fetch", "origin")
	if r.err == nil || !strings.Contains(r.stderr, "502") {
		t.Fatalf("fetch with a refused house credential: %v\n%s", r.err, r.stderr)
	}
	if strings.Contains(r.stderr, rotated) || strings.Contains(r.stderr, pass) {
		t.Fatal("git's error shows a credential")
	}
	tok.Store("") // the token function fails
	if r := gitAs(dir, "", "", "fetch", "origin"); r.err == nil {
		t.Fatal("fetch without a house credential succeeded")
	}
	tok.Store(pass) // rotated back: asked per request
	must(t, dir, "", "", "fetch", "--quiet", "origin")
}

func TestUpstreamRefusesURLs(t *testing.T) {
	tok := func(context.Context) (string, error) { return "x", nil }
	for _, u := range []string{
		"http://git.example.com/house.git",      // http off loopback
		"https://user:pw@git.example.com/h.git", // credentials
		"ftp://127.0.0.1/h.git",
		"https://git.example.com/h.git?x=1",
		"::",
	} {
		if _, err := gitserve.Upstream(u, "u", tok); err == nil {
			t.Errorf("Upstream(%q) accepted", u)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("Upstream(%q) error shows the password: %v", u, err)
		}
	}
	for _, u := range []string{"https://git.example.com/h.git", "http://127.0.0.1:1/h.git", "http://localhost/h.git", "http://[::1]/h"} {
		if _, err := gitserve.Upstream(u, "u", tok); err != nil {
			t.Errorf("Upstream(%q): %v", u, err)
		}
	}
}
