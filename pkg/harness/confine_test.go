package harness

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestAgentUID(t *testing.T) {
	a, b := AgentUID("w-1"), AgentUID("w-2")
	if a != AgentUID("w-1") {
		t.Fatal("AgentUID is not stable")
	}
	for _, u := range []int{a, b} {
		if u < AgentUIDBase || u >= AgentUIDBase+agentUIDSpan {
			t.Errorf("uid %d outside the reserved range", u)
		}
	}
	if a == b {
		t.Errorf("two handles share uid %d", a)
	}
}

// TestLandlockReadOnly: no read-only folder of the domain holds the
// workspaces (a PATH entry of / or of the data folder would open it all)
// nor lies among them.
func TestLandlockReadOnly(t *testing.T) {
	ro := landlockReadOnly("/data/workspaces/wt-1", "/opt/galley/galley-worker", "/agents/bin", "",
		[]string{"PATH=/usr/bin:/:/data:relative:/data/workspaces/x", "SSL_CERT_FILE=/certs/ca.pem"})
	for _, bad := range []string{"/", "/data", "relative", "/data/workspaces/x"} {
		if slices.Contains(ro, bad) {
			t.Errorf("read-only folders hold %s: %v", bad, ro)
		}
	}
	for _, want := range []string{"/usr", "/opt/galley", "/agents/bin", "/certs/ca.pem"} {
		if !slices.Contains(ro, want) {
			t.Errorf("read-only folders lack %s: %v", want, ro)
		}
	}
}

// TestProgramDirs (issue 28, item 8): a CLI installed the ordinary ways
// runs under Landlock, which must then allow what its links lead to: npm's
// node_modules/.bin/claude links into the package (and codex's into a
// sibling package's native binary), so the whole node_modules folder; the
// native installer's ~/.local/bin/claude links into a folder of versions.
func TestProgramDirs(t *testing.T) {
	root := t.TempDir()
	mk := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, at string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(at), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	nm := filepath.Join(root, "clis", "node_modules")
	mk(filepath.Join(nm, "@anthropic-ai", "claude-code", "cli.js"))
	link("../@anthropic-ai/claude-code/cli.js", filepath.Join(nm, ".bin", "claude"))
	native := filepath.Join(root, "home", ".local", "share", "claude", "versions", "2.1.332")
	mk(native)
	link(native, filepath.Join(root, "home", ".local", "bin", "claude"))

	if got := programDirs(filepath.Join(nm, ".bin", "claude")); !slices.Equal(got, []string{nm, nm}) {
		t.Errorf("npm's claude: %v, want its node_modules folder", got)
	}
	got := programDirs(filepath.Join(root, "home", ".local", "bin", "claude"))
	if want := []string{filepath.Join(root, "home", ".local", "bin"), filepath.Dir(native)}; !slices.Equal(got, want) {
		t.Errorf("the native installer's claude: %v, want %v", got, want)
	}
}
