package workspace

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/gitexec"
	"github.com/galley-run/galley/pkg/safepath"
)

// commitEnv makes galley the author and committer, and makes pathspecs
// literal so a file name is never read as a glob or magic pathspec.
var commitEnv = []string{
	"GIT_AUTHOR_NAME=" + githost.AuthorName, "GIT_AUTHOR_EMAIL=" + githost.AuthorEmail,
	"GIT_COMMITTER_NAME=" + githost.AuthorName, "GIT_COMMITTER_EMAIL=" + githost.AuthorEmail,
	"GIT_LITERAL_PATHSPECS=1",
}

// CommitAndPush writes content to path (relative to the workspace, never
// outside it, never inside .git), commits that one file as galley, and
// pushes the workspace's branch to origin, fast-forward only. Writing the
// same content again commits nothing and pushes again, so a retry after a
// failed push completes it. A push the remote refuses because the branch
// moved is Conflict.
func CommitAndPush(ctx context.Context, dir, path, content, message string) error {
	const op = galleyerr.Op("workspace.CommitAndPush")
	if err := checkPath(path); err != nil {
		return galleyerr.E(op, err)
	}
	if strings.TrimSpace(message) == "" || strings.ContainsRune(message, 0) {
		return galleyerr.E(op, galleyerr.Invalid, "commit message must be non-empty text")
	}
	dir, err := cleanDir(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	branch, err := workspaceBranch(ctx, dir)
	if err != nil {
		return galleyerr.E(op, err)
	}

	// safepath refuses a symbolic link at any component of path, one that
	// stays inside the workspace (a folder linked to .git) too.
	root, err := safepath.Open(dir)
	if err != nil {
		return galleyerr.E(op, galleyerr.Other, "open workspace", err)
	}
	defer root.Close()
	if d := filepath.Dir(path); d != "." {
		if err := root.MkdirAll(d, 0o755); err != nil {
			return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("create directory for %s", path), err)
		}
	}
	if err := root.WriteFile(path, []byte(content), 0o644); err != nil {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("write %s", path), err)
	}

	g := func(args ...string) (string, error) { return inRepo(ctx, dir, commitEnv, args...) }
	if _, err := g("add", "--", path); err != nil {
		return galleyerr.E(op, galleyerr.Other, "stage file", err)
	}
	_, err = g("diff", "--cached", "--quiet", "--no-ext-diff", "--no-textconv", "--", path)
	switch gitexec.ExitCode(err) {
	case 0: // nothing new: the file was committed before
	case 1:
		// Committing only path leaves whatever else the agent staged alone.
		if _, err := g("-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify",
			"-m", message, "--only", "--", path); err != nil {
			return galleyerr.E(op, galleyerr.Other, "commit", err)
		}
	default:
		return galleyerr.E(op, galleyerr.Other, "compare with the index", err)
	}
	return push(ctx, dir, branch)
}

// push pushes branch to origin without force, so only a fast-forward lands.
func push(ctx context.Context, dir, branch string) error {
	const op = galleyerr.Op("workspace.CommitAndPush")
	ref := "refs/heads/" + branch
	_, err := inRepo(ctx, dir, nil, "push", "--quiet", "origin", ref+":"+ref)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return galleyerr.E(op, galleyerr.Unavailable, ctx.Err())
	}
	// Classify by the remote's state, not git's wording: a remote head the
	// local branch does not contain means the branch moved there.
	out, lerr := inRepo(ctx, dir, nil, "ls-remote", "--", "origin", ref)
	if lerr == nil {
		if remote, _, _ := strings.Cut(strings.TrimSpace(out), "\t"); remote != "" {
			if _, aerr := inRepo(ctx, dir, nil, "merge-base", "--is-ancestor", remote, ref); aerr != nil {
				return galleyerr.E(op, galleyerr.Conflict, fmt.Sprintf("branch %s moved on the remote: not a fast-forward", branch), err)
			}
		}
	}
	return galleyerr.E(op, galleyerr.Unavailable, "push", err)
}

// workspaceBranch returns the branch a prepared workspace may push, and
// checks that it is the one checked out.
func workspaceBranch(ctx context.Context, dir string) (string, error) {
	out, err := inRepo(ctx, dir, nil, "config", "--local", "--get", branchKey)
	branch := strings.TrimSpace(out)
	if err != nil || branch == "" {
		return "", galleyerr.E(galleyerr.Invalid, fmt.Sprintf("%s is not a prepared workspace", dir))
	}
	if err := verifyTop(ctx, dir); err != nil {
		return "", err
	}
	head, _ := inRepo(ctx, dir, nil, "symbolic-ref", "-q", "HEAD")
	if got := strings.TrimSpace(head); got != "refs/heads/"+branch {
		return "", galleyerr.E(galleyerr.Conflict, fmt.Sprintf("the workspace has %q checked out, not branch %s", got, branch))
	}
	return branch, nil
}

// checkPath refuses a path that is empty, absolute, escapes the workspace
// or names something inside a .git directory (which would let a commit
// rewrite the clone's hooks or config).
func checkPath(path string) error {
	if path == "" || filepath.IsAbs(path) || !filepath.IsLocal(path) {
		return galleyerr.E(galleyerr.Invalid, fmt.Sprintf("path %q must be relative and inside the workspace", path))
	}
	for _, part := range strings.Split(filepath.ToSlash(path), "/") {
		if strings.EqualFold(part, ".git") {
			return galleyerr.E(galleyerr.Invalid, fmt.Sprintf("path %q names git's own files", path))
		}
	}
	if strings.ContainsRune(path, 0) {
		return galleyerr.E(galleyerr.Invalid, "path holds a NUL")
	}
	return nil
}

// Remove deletes a workspace's files (never a branch: the branch lives in
// the house's repository, and whatever was pushed stays there), along with
// any temporary clone an interrupted Prepare left beside it and its mark
// of MarkNotReusable. Removing a
// missing workspace succeeds. It refuses (Invalid) a directory that is
// neither empty nor a clone, so a wrong path cannot wipe unrelated files.
func Remove(dir string) error {
	const op = galleyerr.Op("workspace.Remove")
	dir, err := cleanDir(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	state, err := inspect(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if state == stateOther {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s is not a workspace", dir))
	}
	// The folder above the workspace is galley's; nothing beneath it is
	// followed (a link is removed as a link).
	parent, err := safepath.Open(filepath.Dir(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return galleyerr.E(op, galleyerr.Other, "open the workspaces folder", err)
	}
	defer parent.Close()
	if err := parent.RemoveAll(filepath.Base(dir)); err != nil {
		return galleyerr.E(op, galleyerr.Other, "remove workspace", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), globEscape(tmpPrefix(dir))+"*"))
	var errs []error
	for _, l := range leftovers {
		errs = append(errs, parent.RemoveAll(filepath.Base(l)))
	}
	errs = append(errs, parent.RemoveAll(notReusableName(dir)))
	if err := errors.Join(errs...); err != nil {
		return galleyerr.E(op, galleyerr.Other, "remove temporary clone", err)
	}
	return nil
}

// globEscape quotes the pattern characters of filepath.Match.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}
