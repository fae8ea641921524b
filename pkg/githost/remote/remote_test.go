package remote_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/githosttest"
	"github.com/galley-run/galley/pkg/githost/remote"
)

const secret = "ghp-test-0123456789abcdef"

// server is a real git smart-HTTP server (git http-backend behind
// net/http/cgi) on loopback, with a house repository made by
// githost.InitBare, accepting pushes from the holder of the token only.
type server struct {
	url  string
	bare string
	// urls records every request's URL, to check no credential is in one.
	mu   sync.Mutex
	urls []string
	// refused counts requests refused for their credential.
	refused atomic.Int32
}

func newServer(t *testing.T) *server {
	t.Helper()
	backend := filepath.Join(gitExecPath(t), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		t.Skip("git-http-backend not installed")
	}
	root := t.TempDir()
	bare, err := githost.InitBare(context.Background(), filepath.Join(root, "house.git"))
	if err != nil {
		t.Fatal(err)
	}
	git(t, bare, "config", "http.receivepack", "true")
	s := &server{bare: bare}
	cgiH := &cgi.Handler{Path: backend, Root: "/git", Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
		Stderr: io.Discard}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.urls = append(s.urls, r.URL.String())
		s.mu.Unlock()
		user, pass, ok := r.BasicAuth()
		if !ok || user != "x-access-token" || pass != secret {
			s.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		cgiH.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/git/house.git"
	return s
}

func gitExecPath(t *testing.T) string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skip("no git")
	}
	return strings.TrimSpace(string(out))
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func token(tok string) remote.TokenFunc {
	return func(context.Context) (string, error) { return tok, nil }
}

func TestBranches(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	r, err := remote.New(s.url, token(secret))
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.DefaultHead(ctx)
	if err != nil || head != git(t, s.bare, "rev-parse", "HEAD") {
		t.Fatalf("DefaultHead = %q, %v", head, err)
	}
	if _, exists, err := r.BranchHead(ctx, "kitchen/issue-1"); err != nil || exists {
		t.Fatalf("BranchHead of a missing branch: %v %v", exists, err)
	}
	if err := r.CreateBranch(ctx, "kitchen/issue-1", head); err != nil {
		t.Fatal(err)
	}
	if got := git(t, s.bare, "rev-parse", "refs/heads/kitchen/issue-1"); got != head {
		t.Errorf("the server's branch is at %s, want %s", got, head)
	}
	if got, exists, err := r.BranchHead(ctx, "kitchen/issue-1"); err != nil || !exists || got != head {
		t.Errorf("BranchHead = %q %v %v", got, exists, err)
	}
	if err := r.CreateBranch(ctx, "kitchen/issue-1", head); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Errorf("creating an existing branch: %v", err)
	}
	if err := r.DeleteBranch(ctx, "kitchen/issue-1"); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := r.BranchHead(ctx, "kitchen/issue-1"); exists {
		t.Error("deleted branch still exists")
	}
	if err := r.DeleteBranch(ctx, "kitchen/issue-1"); err != nil {
		t.Errorf("deleting a missing branch: %v", err)
	}
	for _, bad := range []string{"-x", "a..b", "HEAD", ""} {
		if err := r.CreateBranch(ctx, bad, head); err == nil {
			t.Errorf("created branch %q", bad)
		}
	}
	if err := r.CreateBranch(ctx, "ok", "not-a-commit"); err == nil {
		t.Error("created a branch at a non-commit")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.urls {
		if strings.Contains(u, secret) || strings.Contains(u, "@") {
			t.Errorf("a credential in a URL: %s", u)
		}
	}
}

// Racing creators of one branch: the server's ref transaction lets exactly
// one win, whoever read the branch as absent; the others get Conflict.
func TestCreateBranchRace(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	r, err := remote.New(s.url, token(secret))
	if err != nil {
		t.Fatal(err)
	}
	head, err := r.DefaultHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- r.CreateBranch(ctx, "kitchen/race", head)
		}()
	}
	wg.Wait()
	close(errs)
	won := 0
	for err := range errs {
		switch {
		case err == nil:
			won++
		case !galleyerr.Is(galleyerr.Conflict, err):
			t.Errorf("a loser got %v, want Conflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d creators won", won)
	}
}

func TestCredential(t *testing.T) {
	s := newServer(t)
	ctx := context.Background()
	const wrong = "wrong-token-0123456789"
	r, err := remote.New(s.url, token(wrong))
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.DefaultHead(ctx)
	if err == nil {
		t.Fatal("a wrong token read the repository")
	}
	if strings.Contains(err.Error(), wrong) {
		t.Errorf("the token is in the error: %v", err)
	}
	if s.refused.Load() == 0 {
		t.Error("the server never saw the refused credential")
	}
	if _, err := remote.New(strings.Replace(s.url, "http://", "http://x-access-token:"+secret+"@", 1), token(secret)); err == nil ||
		strings.Contains(err.Error(), secret) {
		t.Errorf("a URL with a credential: %v", err)
	}
	if _, err := remote.New("ssh://git@example.com/house.git", token(secret)); err == nil {
		t.Error("an ssh URL was accepted")
	}
}

func TestSuite(t *testing.T) {
	githosttest.Run(t, func(t *testing.T) githosttest.Subject {
		s := newServer(t)
		r, err := remote.New(s.url, token(secret))
		if err != nil {
			t.Fatal(err)
		}
		return githosttest.Subject{Host: r, Bare: s.bare, Reads: s.advertisements}
	})
}

// advertisements counts the reference advertisements the server sent.
func (s *server) advertisements() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, u := range s.urls {
		if strings.Contains(u, "/info/refs") {
			n++
		}
	}
	return n
}
