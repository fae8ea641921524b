package workspace

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost"
	"github.com/galley-run/galley/pkg/githost/gitexec"
)

// branchKey is the clone's config entry naming the one branch it may push.
const branchKey = "galley.branch"

// Prepare makes dir a clone of repoURL with branch checked out and pushes
// restricted to branch. The branch must already exist in repoURL (NotFound
// otherwise): Prepare never creates it. If dir already is that clone on
// that branch, Prepare leaves its files and commits as they are and only
// reinstalls the push restriction; if it is a clone of another repository,
// or is on another branch, the answer is Conflict; a dir that holds other
// files is Invalid. The clone is made in a temporary sibling and renamed
// into place, so an interrupted Prepare leaves no half-made workspace.
//
// An existing clone is first Scrubbed: whatever an earlier agent planted
// in its git directory is gone before galley runs git there (with the
// safe settings of inRepo all the same).
func Prepare(ctx context.Context, repoURL, branch, dir string, opts ...Option) error {
	const op = galleyerr.Op("workspace.Prepare")
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cred := o.credentialEnv(repoURL)
	if branch != "" {
		if err := githost.ValidateBranch(branch); err != nil {
			return galleyerr.E(op, err)
		}
	}
	if err := checkURL(repoURL); err != nil {
		return galleyerr.E(op, err)
	}
	dir, err := cleanDir(dir)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if err := refuseNotReusable(dir); err != nil {
		return galleyerr.E(op, err)
	}
	switch state, err := inspect(dir); {
	case err != nil:
		return galleyerr.E(op, err)
	case state == stateClone:
		if err := Scrub(ctx, dir); err != nil {
			return galleyerr.E(op, err)
		}
		if err := verify(ctx, dir, repoURL, branch); err != nil {
			return galleyerr.E(op, err)
		}
		if err := restrictPush(ctx, dir, dir, branch); err != nil {
			return galleyerr.E(op, err)
		}
		return nil
	case state == stateOther:
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s exists and is not a workspace", dir))
	}

	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return galleyerr.E(op, galleyerr.Other, "create parent directory", err)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix(dir))
	if err != nil {
		return galleyerr.E(op, galleyerr.Other, "create temporary directory", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := o.clone(ctx, parent, repoURL, branch, tmp, cred); err != nil {
		return galleyerr.E(op, err)
	}
	if branch == "" {
		// A worker launched without a branch works on a detached checkout
		// of the default branch head and may push nothing.
		if _, err := inRepo(ctx, tmp, nil, "checkout", "--quiet", "--detach"); err != nil {
			return galleyerr.E(op, galleyerr.Other, "detach the checkout", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return galleyerr.E(op, galleyerr.Other, err)
	}
	// Restrict pushes before the clone appears at dir, so that it is never
	// seen without its restriction.
	if err := restrictPush(ctx, tmp, dir, branch); err != nil {
		return galleyerr.E(op, err)
	}
	// rename(2) replaces an empty directory and fails on a non-empty one, so
	// of two concurrent Prepares one places its clone and the other checks
	// it (os.Rename refuses any existing directory, hence syscall).
	if err := syscall.Rename(tmp, dir); err != nil {
		if state, ierr := inspect(dir); ierr == nil && state == stateClone {
			if err := verify(ctx, dir, repoURL, branch); err != nil {
				return galleyerr.E(op, err)
			}
			return nil // another Prepare placed the same clone
		}
		return galleyerr.E(op, galleyerr.Other, "move clone into place", err)
	}
	return nil
}

// clone clones repoURL into the empty folder tmp: through the object cache
// when there is one, and plainly when there is none or it fails.
func (o options) clone(ctx context.Context, parent, repoURL, branch, tmp string, cred []string) error {
	if o.cache != "" {
		err := cloneCached(ctx, o.cache, parent, repoURL, branch, tmp, cred, o.logger())
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return galleyerr.E(galleyerr.Unavailable, ctx.Err())
		}
		o.logger().Error("the git object cache failed; cloning without it", "cache", o.cache, "err", err)
		if err := emptyDir(tmp); err != nil {
			return galleyerr.E(galleyerr.Other, "clear the failed clone", err)
		}
		if perr := plainClone(ctx, parent, repoURL, branch, tmp, cred); perr != nil {
			return perr
		}
		// The repository served a plain clone: if the clone from the
		// mirror failed, the mirror is at fault.
		var ce *cacheError
		if errors.As(err, &ce) && ce.suspect {
			if err := setAside(ctx, o.cache, repoURL); err != nil {
				o.logger().Error("setting the suspect git object cache mirror aside failed", "cache", o.cache, "err", err)
			} else {
				o.logger().Warn("set the suspect git object cache mirror aside; the next clone makes a new one", "cache", o.cache)
			}
		}
		return nil
	}
	return plainClone(ctx, parent, repoURL, branch, tmp, cred)
}

// plainClone clones repoURL into tmp from the repository alone.
// --no-hardlinks: a clone of a repository on a local path would otherwise
// share the repository's object files (the same inodes), which the
// harness then gives to the agent's uid.
func plainClone(ctx context.Context, parent, repoURL, branch, tmp string, cred []string) error {
	clone := []string{"clone", "--quiet", "--no-hardlinks"}
	if branch != "" {
		clone = append(clone, "--branch", branch)
	}
	// No hook runs during the clone's checkout, even one a global
	// init.templateDir would install.
	clone = append([]string{"-c", "core.hooksPath=/dev/null"}, clone...)
	if _, err := (gitexec.Cmd{Dir: parent, Env: cred}).Run(ctx, append(clone, "--", repoURL, tmp)...); err != nil {
		return cloneError(ctx, parent, repoURL, branch, cred, err)
	}
	return nil
}

// emptyDir removes everything in dir, keeping dir.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// tmpPrefix names the temporary siblings Prepare clones into, which Remove
// also clears.
func tmpPrefix(dir string) string { return "." + filepath.Base(dir) + ".prepare-" }

// checkURL refuses a repository URL that carries credentials: they would be
// stored in the clone's config, where the agent reads, and printed by git.
func checkURL(repoURL string) error {
	if repoURL == "" {
		return galleyerr.E(galleyerr.Invalid, "empty repository URL")
	}
	if strings.HasPrefix(repoURL, "-") {
		return galleyerr.E(galleyerr.Invalid, "repository URL starts with '-'")
	}
	if !strings.Contains(repoURL, "://") {
		return nil // a local path or an scp-like user@host:path, whose user is no secret
	}
	u, err := url.Parse(repoURL)
	if err != nil {
		return galleyerr.E(galleyerr.Invalid, "repository URL is not a valid URL") // the URL may hold a secret: not repeated
	}
	if u.User == nil {
		return nil
	}
	if _, hasPassword := u.User.Password(); hasPassword || u.Scheme == "http" || u.Scheme == "https" {
		return galleyerr.E(galleyerr.Invalid, "repository URL must not carry credentials; use a credential helper")
	}
	return nil
}

// cleanDir returns dir as an absolute path, refusing the filesystem root.
func cleanDir(dir string) (string, error) {
	if dir == "" {
		return "", galleyerr.E(galleyerr.Invalid, "empty workspace directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "workspace directory", err)
	}
	if filepath.Dir(abs) == abs {
		return "", galleyerr.E(galleyerr.Invalid, "the workspace directory cannot be the filesystem root")
	}
	return abs, nil
}

type dirState int

const (
	stateAbsent dirState = iota // absent, or an empty directory
	stateClone                  // holds .git
	stateOther                  // holds other files, or is not a directory
)

func inspect(dir string) (dirState, error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return stateAbsent, nil
	case err != nil:
		if fi, serr := os.Lstat(dir); serr == nil && !fi.IsDir() {
			return stateOther, nil
		}
		return 0, galleyerr.E(galleyerr.Other, "read workspace directory", err)
	case len(entries) == 0:
		return stateAbsent, nil
	}
	for _, e := range entries {
		if e.Name() == ".git" {
			return stateClone, nil
		}
	}
	return stateOther, nil
}

// verify checks that dir is a clone of repoURL (its own repository, not a
// directory inside another) with branch checked out.
func verify(ctx context.Context, dir, repoURL, branch string) error {
	if err := verifyTop(ctx, dir); err != nil {
		return err
	}
	origin, _ := inRepo(ctx, dir, nil, "config", "--local", "--get", "remote.origin.url")
	if strings.TrimSpace(origin) != repoURL {
		return galleyerr.E(galleyerr.Conflict, fmt.Sprintf("%s is a clone of another repository", dir))
	}
	head, _ := inRepo(ctx, dir, nil, "symbolic-ref", "-q", "HEAD")
	want := "refs/heads/" + branch
	if branch == "" {
		want = "" // detached
	}
	if got := strings.TrimSpace(head); got != want {
		return galleyerr.E(galleyerr.Conflict, fmt.Sprintf("%s has %q checked out, not branch %s", dir, got, branch))
	}
	if pinned, _ := inRepo(ctx, dir, nil, "config", "--local", "--get", branchKey); pinned != "" && strings.TrimSpace(pinned) != branchValue(branch) {
		return galleyerr.E(galleyerr.Conflict, fmt.Sprintf("%s is the workspace of branch %s", dir, strings.TrimSpace(pinned)))
	}
	return nil
}

// verifyTop checks that dir is the top of its own clone, not a directory
// inside another repository's work tree.
func verifyTop(ctx context.Context, dir string) error {
	out, err := inRepo(ctx, dir, nil, "rev-parse", "--show-toplevel")
	if err != nil {
		return galleyerr.E(galleyerr.Invalid, fmt.Sprintf("%s is not a git clone", dir), err)
	}
	top := strings.TrimSpace(out)
	if real, _ := filepath.EvalSymlinks(dir); top != dir && top != real {
		return galleyerr.E(galleyerr.Invalid, fmt.Sprintf("%s is not the top of its own clone", dir))
	}
	return nil
}

// cloneError classifies a failed clone: a missing branch is NotFound (the
// service creates it before the worker starts, so this is a caller's bug or
// a deleted branch), anything else Unavailable.
func cloneError(ctx context.Context, dir, repoURL, branch string, cred []string, err error) error {
	if ctx.Err() != nil {
		return galleyerr.E(galleyerr.Unavailable, ctx.Err())
	}
	if refusedCredential(err) {
		// git answers a refused credential by asking for another, which
		// prompts being off refuse: say what happened.
		return galleyerr.E(galleyerr.Unavailable, "clone: the repository refused the git credential (or needs one)", err)
	}
	_, lerr := gitexec.Cmd{Dir: dir, Env: cred}.Run(ctx, "ls-remote", "--exit-code", "--heads", "--", repoURL, "refs/heads/"+branch)
	if gitexec.ExitCode(lerr) == 2 { // reachable, and no such ref
		return galleyerr.E(galleyerr.NotFound, fmt.Sprintf("branch %s does not exist in the repository", branch))
	}
	return galleyerr.E(galleyerr.Unavailable, "clone", err)
}

// refusedCredential reports whether git failed for want of an accepted
// HTTP credential.
func refusedCredential(err error) bool {
	var e *gitexec.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, s := range []string{"could not read Username", "could not read Password", "Authentication failed", "terminal prompts disabled"} {
		if strings.Contains(e.Stderr, s) {
			return true
		}
	}
	return false
}

// restrictPush (re)writes the push configuration and pre-push hook for
// branch of the clone in work, which will be used at dir (work itself, or
// the temporary clone that is renamed to dir). It writes only what differs,
// so repairing a healthy clone is read-only and concurrent Prepares of one
// workspace do not contend for its config lock.
func restrictPush(ctx context.Context, work, dir, branch string) error {
	gitDir, err := inRepo(ctx, work, nil, "rev-parse", "--absolute-git-dir")
	if err != nil {
		return galleyerr.E(galleyerr.Other, "locate git directory", err)
	}
	hooks := filepath.Join(strings.TrimSpace(gitDir), "hooks")
	if err := os.MkdirAll(hooks, 0o755); err != nil {
		return galleyerr.E(galleyerr.Other, "create hooks directory", err)
	}
	ref := "refs/heads/" + branch
	if branch == "" {
		// No branch: the hook allows nothing, and origin gets no push
		// refspec (push.default nothing makes a bare push push nothing;
		// the gate refuses every ref). A refspec naming an impossible ref
		// would make git refuse the remote's configuration altogether.
		ref = "refs/heads/.none"
	}
	if err := writeExecutable(filepath.Join(hooks, "pre-push"), prePushHook(ref)); err != nil {
		return galleyerr.E(galleyerr.Other, "install pre-push hook", err)
	}
	settings := [][2]string{
		{branchKey, branchValue(branch)},
		{"push.default", "nothing"}, // a bare push to any other remote pushes nothing
		// Absolute, and local, so a global core.hooksPath cannot bypass the hook.
		{"core.hooksPath", filepath.Join(dir, ".git", "hooks")},
	}
	if branch != "" {
		settings = append(settings, [2]string{"remote.origin.push", ref + ":" + ref})
	}
	for _, kv := range settings {
		if err := setConfig(ctx, work, kv[0], kv[1], true); err != nil {
			return err
		}
	}
	// Give the agent's own commits an identity unless the clone has one.
	for _, kv := range [][2]string{{"user.name", githost.AuthorName}, {"user.email", githost.AuthorEmail}} {
		if err := setConfig(ctx, work, kv[0], kv[1], false); err != nil {
			return err
		}
	}
	return nil
}

// setConfig sets key to value in work's local config when it holds another
// value (replace) or none.
func setConfig(ctx context.Context, work, key, value string, replace bool) error {
	out, err := inRepo(ctx, work, nil, "config", "--local", "--get-all", key)
	switch code := gitexec.ExitCode(err); {
	case code == 0 && (!replace || strings.TrimSuffix(out, "\n") == value):
		return nil
	case code != 0 && code != 1: // 1: the key is not set
		return galleyerr.E(galleyerr.Other, "read clone configuration", err)
	}
	if _, err := inRepo(ctx, work, nil, "config", "--local", "--replace-all", key, value); err != nil {
		return galleyerr.E(galleyerr.Other, "configure clone", err)
	}
	return nil
}

// writeExecutable makes path an executable file holding content, unless it
// already is one; the file is replaced whole, never seen half-written.
func writeExecutable(path, content string) error {
	if fi, err := os.Stat(path); err == nil && fi.Mode()&0o111 != 0 {
		if old, err := os.ReadFile(path); err == nil && string(old) == content {
			return nil
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, werr := f.WriteString(content)
	if err := errors.Join(werr, f.Chmod(0o755), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// prePushHook refuses every pushed ref but allowed, and allowed's deletion.
// git gives the hook one line per ref: local ref, local id, remote ref,
// remote id; a deletion has an all-zero local id.
func prePushHook(allowed string) string {
	return `#!/bin/sh
# Installed by galley: this workspace may push only its own branch.
allowed=` + shellQuote(allowed) + `
status=0
while read -r local_ref local_id remote_ref remote_id; do
	if [ "$remote_ref" != "$allowed" ]; then
		echo "galley: this workspace may push only $allowed, not $remote_ref" >&2
		status=1
		continue
	fi
	case $local_id in
	*[!0]*) ;;
	*)
		echo "galley: this workspace may not delete $allowed" >&2
		status=1
		;;
	esac
done
exit $status
`
}

// branchValue is what the clone's config records as its branch.
func branchValue(branch string) string {
	if branch == "" {
		return "(detached)"
	}
	return branch
}

// shellQuote quotes s for a POSIX shell (branch names may hold quotes, $ and
// backquotes).
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
