package localserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/galley-run/galley/pkg/store/boltstore"
	"golang.org/x/sys/unix"
)

// probe is what probeMain is asked, as JSON in GALLEY_TEST_PROBE.
type probe struct {
	Paths   []string // each is stat'ed, opened and hard-linked into LinkDir
	LinkDir string
}

// probeResult is probeMain's answer for one path: the errno of each
// operation, "" when it succeeded.
type probeResult struct {
	Path, Stat, Open, Link string
}

func errnoName(err error) string {
	if err == nil {
		return ""
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// probeMain, run as an agent's uid, tries each path as an agent trying to
// take galley's secrets would, and prints what each attempt met.
func probeMain(spec string) {
	var p probe
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var out []probeResult
	for i, path := range p.Paths {
		r := probeResult{Path: path}
		var st unix.Stat_t
		r.Stat = errnoName(unix.Lstat(path, &st))
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err == nil {
			unix.Close(fd)
		}
		r.Open = errnoName(err)
		r.Link = errnoName(unix.Linkat(unix.AT_FDCWD, path, unix.AT_FDCWD, filepath.Join(p.LinkDir, fmt.Sprint("link", i)), 0))
		out = append(out, r)
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

// agentUID is a uid in the range galley gives agents (docs/security.md).
const agentUID = 1<<29 + 4242

// runProbe runs probeMain as agentUID.
func runProbe(t *testing.T, paths []string) map[string]probeResult {
	t.Helper()
	linkDir, err := os.MkdirTemp("", "galley-probe-links-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(linkDir) })
	if err := os.Chmod(linkDir, 0o777); err != nil {
		t.Fatal(err)
	}
	spec, _ := json.Marshal(probe{Paths: paths, LinkDir: linkDir})
	cmd := exec.Command(agentCopy(t))
	cmd.Env = []string{"GALLEY_TEST_PROBE=" + string(spec)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agentUID, Gid: agentUID}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("probe: %v\n%s", err, stderr.String())
	}
	var rs []probeResult
	if err := json.Unmarshal(stdout.Bytes(), &rs); err != nil {
		t.Fatalf("probe's answer %q: %v", stdout.String(), err)
	}
	m := map[string]probeResult{}
	for _, r := range rs {
		m[r.Path] = r
	}
	return m
}

// Issue 21, item 7: as an agent's uid, no secret of galley's resolves,
// whatever the kernel's protected_hardlinks says: stat, open and link of
// each fail with EACCES, and since a stat needs no permission on the file
// itself, that EACCES is the folder's. The folder itself and the worktrees'
// folder do resolve (the agent passes through the data folder to its
// worktree), so it is the closed folder, not one above, that stops it; and
// the data folder holds nothing but folders.
func TestDataFolderClosedToAgents(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to probe as an agent's uid")
	}
	top := t.TempDir()
	// The folders above the data folder are open to traversal, as galley
	// serve needs for uid confinement (docs/security.md).
	for d := top; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(top, "data")
	srv, err := Start(context.Background(), Options{Listen: "127.0.0.1:0", House: "h", Data: data, WorkerBin: "/bin/true",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	ents, err := os.ReadDir(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			t.Errorf("%s is a file directly in the data folder, where agents can resolve it", e.Name())
		}
	}
	private := filepath.Join(data, PrivateDir)
	if fi, err := os.Lstat(private); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v, want a folder of mode 0700", private, fi, err)
	}
	secrets := []string{srv.TokenFile(), srv.OperatorTokenFile(), filepath.Join(private, "worker-secret"),
		filepath.Join(private, "galley.db"), filepath.Join(data, "repository.git", "HEAD")}
	for _, p := range secrets {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is not there to probe: %v", p, err)
		}
	}
	reach := []string{private, filepath.Join(data, "workspaces")}
	got := runProbe(t, append(append([]string{}, secrets...), reach...))
	for _, p := range secrets {
		r := got[p]
		if r.Stat != "EACCES" || r.Open != "EACCES" || r.Link != "EACCES" {
			t.Errorf("%s as an agent: stat %q, open %q, link %q; want EACCES (the closed folder) for each", p, r.Stat, r.Open, r.Link)
		}
	}
	for _, p := range reach {
		if r := got[p]; r.Stat != "" {
			t.Errorf("%s as an agent: stat %q, want it to resolve", p, r.Stat)
		}
	}
}

// A data folder an earlier version laid out, with its secrets and store
// directly in it, is moved into the private folder on start: the same
// token is served, the store keeps its records' file, and nothing is left
// behind. A link under a legacy name is refused, not followed; a token
// file named directly in the data folder is refused.
func TestDataFolderMigrates(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"token": "kitchn-token-0123456789abcdef\n", "operator-token": "operator-token-0123456789abcdef\n", "worker-secret": "worker-secret-0123456789abcdef\n"}
	for name, v := range want {
		if err := os.WriteFile(filepath.Join(data, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := boltstore.Open(filepath.Join(data, "galley.db"))
	if err != nil {
		t.Fatal(err)
	}
	bs.Close()
	db, err := os.ReadFile(filepath.Join(data, "galley.db"))
	if err != nil {
		t.Fatal(err)
	}
	start := func(o Options) (*Server, error) {
		o.Listen, o.House, o.Data, o.WorkerBin, o.Logger = "127.0.0.1:0", "h", data, "/bin/true", slog.New(slog.DiscardHandler)
		srv, err := Start(context.Background(), o)
		if err == nil {
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		}
		return srv, err
	}
	srv, err := start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tok := token(t, srv); tok != "kitchn-token-0123456789abcdef" {
		t.Errorf("served token %q, want the legacy file's", tok)
	}
	for name, v := range want {
		if b, err := os.ReadFile(filepath.Join(data, PrivateDir, name)); err != nil || string(b) != v {
			t.Errorf("%s: %q %v, want %q", name, b, err, v)
		}
	}
	if fi, err := os.Stat(filepath.Join(data, PrivateDir, "galley.db")); err != nil || fi.Size() < int64(len(db)) {
		t.Errorf("the store was not moved: %v %v", fi, err)
	}
	for _, name := range privateFiles {
		if _, err := os.Lstat(filepath.Join(data, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the data folder: %v", name, err)
		}
	}
	_ = srv.Shutdown(context.Background())

	// A link under a legacy name: refused, its target untouched.
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte("not galley's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(data, "worker-secret")); err != nil {
		t.Fatal(err)
	}
	if _, err := start(Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a link under a legacy name: %v, want a refusal", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "not galley's\n" {
		t.Errorf("the link's target: %q %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(data, "worker-secret")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was moved or followed: %v %v", fi, err)
	}
	os.Remove(filepath.Join(data, "worker-secret"))

	// A token file named directly in the data folder: refused.
	if _, err := start(Options{TokenFile: filepath.Join(data, "token")}); err == nil || !strings.Contains(err.Error(), "directly in the data folder") {
		t.Errorf("--token-file in the data folder: %v, want a refusal", err)
	}
}
