//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
)

func mkClone(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o700); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "work.txt")
	if err := os.WriteFile(f, []byte("work"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRemoveWorkspace(t *testing.T) {
	root := t.TempDir()
	ws := filepath.Join(root, "wt-1")
	mkClone(t, ws)
	if err := removeWorkspace(root, ws); err != nil {
		t.Fatalf("removeWorkspace: %v", err)
	}
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace still there: %v", err)
	}
	// Again, and one never made: nothing to do.
	for _, p := range []string{ws, filepath.Join(root, "nowhere", "wt-2")} {
		if err := removeWorkspace(root, p); err != nil {
			t.Errorf("removeWorkspace(%s) of a missing workspace: %v", p, err)
		}
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("the root went: %v", err)
	}
}

func TestRemoveWorkspaceRefuses(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	precious := mkClone(t, outside)
	link := filepath.Join(root, "wt-link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	notClone := filepath.Join(root, "wt-other")
	if err := os.MkdirAll(notClone, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notClone, "f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path string }{
		{"outside", outside},
		{"the root itself", root},
		{"dot-dot", root + "/../" + filepath.Base(outside)},
		{"relative", "wt-1"},
		{"through a link", filepath.Join(link, "sub")},
		{"not a clone", notClone},
	} {
		if err := removeWorkspace(root, tc.path); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("%s: removeWorkspace(%q) = %v, want an invalid error", tc.name, tc.path, err)
		}
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("a file outside the root went: %v", err)
	}
	// The link itself lies inside: it goes, its target stays.
	if err := removeWorkspace(root, link); err != nil {
		t.Errorf("removeWorkspace of the link: %v", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("the link's target went: %v", err)
	}
}

func TestRemoveWorkspaceCommand(t *testing.T) {
	root := t.TempDir()
	t.Setenv(contract.EnvWorkspaceRoot, root)
	ws := filepath.Join(root, "wt-cmd")
	mkClone(t, ws)
	if code := run(context.Background(), []string{contract.CleanupCommand, t.TempDir()}); code != 2 {
		t.Errorf("remove-workspace outside the root exited %d, want 2", code)
	}
	if code := run(context.Background(), []string{contract.CleanupCommand, ws}); code != 0 {
		t.Errorf("remove-workspace exited %d, want 0", code)
	}
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace still there: %v", err)
	}
}
