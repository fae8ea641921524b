//go:build unix

package localproc

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/safepath"
	"github.com/galley-run/galley/pkg/workspace"
)

// WorkspacesDir is the folder where workspaces live: every
// spec.WorkspacePath lies inside it, and RemoveWorkspace deletes nothing
// outside it.
func (r *Runtime) WorkspacesDir() string { return filepath.Join(r.dir, "workspaces") }

// RemoveWorkspace deletes the worktree at path, which must lie inside
// WorkspacesDir (even through symbolic links); removing a missing one
// succeeds. It never touches a branch.
func (r *Runtime) RemoveWorkspace(ctx context.Context, handle, path string) error {
	const op = galleyerr.Op("localproc.remove-workspace")
	root := r.WorkspacesDir()
	refuse := galleyerr.E(op, galleyerr.Invalid, "workspace path "+strconv.Quote(path)+" is not inside "+root)
	if !filepath.IsAbs(path) {
		return refuse
	}
	rel, ok := inside(root, filepath.Clean(path))
	if !ok {
		return refuse
	}
	// A symbolic link on the way could lead out of the folder: compare the
	// real parent with the real root.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return galleyerr.E(op, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Join(root, filepath.Dir(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return galleyerr.E(op, err)
	}
	if _, ok := inside(realRoot, filepath.Join(parent, filepath.Base(rel))); !ok {
		return refuse
	}
	// safepath follows no link beneath the folder, even one that changes
	// meanwhile (a link is removed as a link).
	rt, err := safepath.Open(root)
	if err != nil {
		return galleyerr.E(op, err)
	}
	defer rt.Close()
	if err := rt.RemoveAll(filepath.ToSlash(rel)); err != nil {
		return galleyerr.E(op, err)
	}
	if err := rt.RemoveAll(filepath.ToSlash(workspace.NotReusableMark(rel))); err != nil {
		return galleyerr.E(op, err)
	}
	r.log.Info("workspace removed", "handle", handle, "path", path)
	return nil
}

// inside returns p relative to root if p lies strictly inside root.
func inside(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}
