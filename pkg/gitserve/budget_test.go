package gitserve_test

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/galley-run/galley/pkg/gitserve"
	"net/http/httptest"
)

// A push flood (issue 21, item 6): force-pushes of fresh random content to
// the worker's own branch are refused once a push is over the per-push
// budget or the pushes together over the total, with a reason git shows;
// the pushes accepted before stay, and the house repository grows by no
// more than the budget.
func TestPushBudget(t *testing.T) {
	const branch = "kitchen/flood"
	const perPush, total = 2 << 20, 3 << 20
	h := newHouse(t)
	houseURL, houseUser, housePass := served(t, h)
	var tok atomic.Value
	tok.Store(housePass)
	budget := gitserve.NewBudget(perPush, total)
	user, session := "agent", secret(t)
	srv := httptest.NewServer(gitserve.BasicAuth("gate", gitserve.Credential(user, session),
		gitserve.BudgetedPushGate(gitserve.OnlyBranch(branch), budget, upstreamOf(t, houseURL, houseUser, &tok))))
	t.Cleanup(srv.Close)
	url := srv.URL + "/house.git"
	dir := filepath.Join(t.TempDir(), "agent")
	must(t, "", user, session, "clone", "--quiet", url, dir)
	git := func(args ...string) string { t.Helper(); return must(t, dir, user, session, args...) }
	packBytes := func() int64 {
		t.Helper()
		for _, l := range strings.Split(must(t, h.dir, "", "", "count-objects", "-v"), "\n") {
			if v, ok := strings.CutPrefix(l, "size-pack: "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n << 10
			}
		}
		return 0
	}
	grown := packBytes()
	// commit replaces the branch's one commit with size fresh random bytes.
	commit := func(size int, first bool) {
		t.Helper()
		blob := make([]byte, size)
		rand.Read(blob)
		if err := os.WriteFile(filepath.Join(dir, "big.bin"), blob, 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "big.bin")
		if first {
			git("commit", "--quiet", "-m", "work")
		} else {
			git("commit", "--quiet", "--amend", "-m", "work")
		}
	}
	push := func() result {
		return gitAs(dir, user, session, "push", "--force", "origin", "HEAD:refs/heads/"+branch)
	}
	head := func() string { return must(t, h.dir, "", "", "rev-parse", "refs/heads/"+branch) }

	commit(1<<20, true) // the honest push
	if r := push(); r.err != nil {
		t.Fatalf("a push within the budget was refused: %s", r.stderr)
	}
	honest := git("rev-parse", "HEAD")
	refusedAs := func(what string) {
		t.Helper()
		r := push()
		if r.err == nil {
			t.Fatalf("%s was accepted", what)
		}
		if !strings.Contains(r.stderr, "[remote rejected]") || !strings.Contains(r.stderr, "push budget") {
			t.Fatalf("%s: git did not show the budget's refusal:\n%s", what, r.stderr)
		}
	}
	commit(perPush+(512<<10), false)
	refusedAs("a push over the per-push budget")
	if head() != honest {
		t.Fatal("a refused push moved the branch")
	}
	commit(3<<19, false) // 1.5 MiB: fits in one push and, with the first, in all
	if r := push(); r.err != nil {
		t.Fatalf("a push within the budget was refused: %s", r.stderr)
	}
	kept := git("rev-parse", "HEAD")
	commit(1<<20, false) // 1 MiB more is over the 3 MiB in all
	refusedAs("a push over the total budget")
	if head() != kept {
		t.Fatal("the last accepted push was lost")
	}
	if used := budget.Used(); used > total {
		t.Fatalf("budget used %d, over %d", used, total)
	}
	if g := packBytes() - grown; g > total+(256<<10) {
		t.Fatalf("the house repository grew by %d bytes, budget %d", g, total)
	}
}
