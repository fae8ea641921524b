package harness_test

import (
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/workerapi"
)

// An agent under its own uid, in a view of its own, reaches its worktree
// and its CLI though the folders above them are closed to other users (a
// data folder under /root, a CLI installed in root's home), and sees
// none of this machine's sockets: a socket open to everyone in /tmp, in
// /run and beside its own worktree is not there for it (design.md, "The
// agent's sandbox"; issue 28).
func TestClosedFoldersAboveAreOpenedInTheView(t *testing.T) {
	if ok, why := harness.CanSwitchUser(); !ok {
		t.Skip(why)
	}
	if harness.ChooseNetwork().Mode != harness.NetNamespace {
		t.Skip("the agent's own view comes with its own namespaces: " + harness.ChooseNetwork().Why)
	}
	closed := filepath.Join(t.TempDir(), "closed") // root's
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	// The CLI in an open folder beneath the closed one.
	bin := filepath.Join(closed, "clis", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "probe"), []byte("#!/bin/sh\necho cli-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Sockets anyone may connect to, where machines keep theirs.
	var socks []string
	for _, dir := range []string{os.TempDir(), "/run", closed} {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		p := filepath.Join(dir, "galley-view-"+strconv.FormatUint(rand.Uint64(), 36)+".sock")
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
		socks = append(socks, p)
	}
	script := `echo started
echo "uid $(id -u) owner $(stat -c %u .)"
touch probe-file && echo wrote-worktree
` + filepath.Join(bin, "probe") + `
for s in "$@"; do [ -e "$s" ] && echo "sees $s"; done
true`
	var (
		mu  sync.Mutex
		out string
	)
	uid := workerapi.AgentUIDBase + rand.N(uint32(1_000_000))
	d := idDriver{script: "set -- " + strings.Join(socks, " ") + "\n" + script, cli: "probe", mu: &mu, out: &out}
	_, err := confinedWithConfig(t, workerapi.Self{Handle: "w-view-" + strconv.Itoa(int(uid)), Run: "run-1", Brief: "x", Branch: testBranch, AgentUID: uid},
		harness.ConfineUser, "probe", d, func(c *harness.Config) {
			c.Workspace = filepath.Join(closed, "data", "ws")
			c.AgentBinDir = bin
		})
	mu.Lock()
	got := out
	mu.Unlock()
	if err != nil && !strings.Contains(got, "started") {
		t.Fatalf("the agent did not run: %v", err)
	}
	u := strconv.FormatUint(uint64(uid), 10)
	for _, want := range []string{"uid " + u + " owner " + u, "wrote-worktree", "cli-ran"} {
		if !strings.Contains(got, want) {
			t.Errorf("the agent printed %q, want %q in it", got, want)
		}
	}
	if strings.Contains(got, "sees ") {
		t.Errorf("the agent sees this machine's sockets: %q", got)
	}
}
