package githost

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost/gitexec"
)

// lockTimeoutMillis is how long git waits for a ref's lock file. Creators of
// one branch queue on the lock for far less than this; a lock held longer is
// a stale lock from a killed process.
const lockTimeoutMillis = "10000"

// Repo is the house's repository on local disk. Its methods are safe for
// concurrent use, and several Repos (in several processes) may share one
// repository.
type Repo struct {
	path      string // the repository's directory, absolute
	gitDir    string // its git directory, absolute
	commonDir string // where its refs live: gitDir, unless a linked worktree's

	mu   sync.Mutex // go-git's Repository is not documented as goroutine-safe
	repo *git.Repository
}

// Open opens the house's repository: a local path to a bare or non-bare
// repository, or a file:// URL. Remote URLs are Unsupported for now.
func Open(ctx context.Context, repo string) (*Repo, error) {
	const op = galleyerr.Op("githost.Open")
	path, err := LocalPath(repo)
	if err != nil {
		return nil, galleyerr.E(op, err)
	}
	r, err := git.PlainOpenWithOptions(path, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		if errors.Is(err, git.ErrRepositoryNotExists) {
			return nil, galleyerr.E(op, galleyerr.NotFound, fmt.Sprintf("no git repository at %s", path))
		}
		return nil, galleyerr.E(op, galleyerr.Other, fmt.Sprintf("open repository at %s", path), err)
	}
	// go-git opened exactly path (no discovery upward), so git run in path
	// finds the same repository.
	out, err := gitexec.Run(ctx, path, "rev-parse", "--absolute-git-dir", "--git-common-dir")
	if err != nil {
		return nil, galleyerr.E(op, galleyerr.Other, "locate git directory", err)
	}
	gitDir, common, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if common = strings.TrimSpace(common); common == "" {
		common = gitDir
	} else if !filepath.IsAbs(common) {
		common = filepath.Join(path, common) // relative to where git ran
	}
	return &Repo{path: path, gitDir: gitDir, commonDir: common, repo: r}, nil
}

// scpLike matches git's scp-like remote syntax, user@host:path.
var scpLike = regexp.MustCompile(`^[^/]*:`)

// LocalPath turns a repository location into an absolute local path: a path
// is taken as it is, a file:// URL gives its path, and any other URL or an
// scp-like host:path is Unsupported (only local repositories are served by
// the local git host for now). The error never repeats the URL's
// credentials.
func LocalPath(repo string) (string, error) {
	if repo == "" {
		return "", galleyerr.E(galleyerr.Invalid, "empty repository location")
	}
	if strings.Contains(repo, "://") {
		u, err := url.Parse(repo)
		if err != nil {
			return "", galleyerr.E(galleyerr.Invalid, "repository location is not a valid URL")
		}
		if u.Scheme != "file" {
			return "", galleyerr.E(galleyerr.Unsupported, fmt.Sprintf(
				"repository %s: only local repositories (a path or a file:// URL) are served by the local git host for now",
				gitexec.Redact(repo)))
		}
		if u.Host != "" && u.Host != "localhost" {
			return "", galleyerr.E(galleyerr.Unsupported, "file:// URL names another host: only local repositories are served by the local git host for now")
		}
		repo = u.Path
	} else if scpLike.MatchString(repo) {
		return "", galleyerr.E(galleyerr.Unsupported, "repository is a remote host:path: only local repositories are served by the local git host for now")
	}
	abs, err := filepath.Abs(repo)
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "repository path", err)
	}
	return abs, nil
}

// Path returns the repository's directory.
func (r *Repo) Path() string { return r.path }

// DefaultHead returns the commit at the head of the default branch (HEAD:
// in a bare repository, the branch clones check out). NotFound when the
// default branch has no commit yet.
func (r *Repo) DefaultHead(ctx context.Context) (string, error) {
	const op = galleyerr.Op("githost.DefaultHead")
	if err := ctx.Err(); err != nil {
		return "", galleyerr.E(op, galleyerr.Unavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ref, err := r.repo.Reference(plumbing.HEAD, true)
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return "", galleyerr.E(op, galleyerr.NotFound, "the default branch has no commit")
		}
		return "", galleyerr.E(op, galleyerr.Unavailable, "read HEAD", err)
	}
	return ref.Hash().String(), nil
}

// BranchHead returns the commit branch points at, or exists=false.
func (r *Repo) BranchHead(ctx context.Context, branch string) (string, bool, error) {
	const op = galleyerr.Op("githost.BranchHead")
	if err := ValidateBranch(branch); err != nil {
		return "", false, galleyerr.E(op, err)
	}
	if err := ctx.Err(); err != nil {
		return "", false, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.branchHead(branch)
}

func (r *Repo) branchHead(branch string) (string, bool, error) {
	ref, err := r.repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		if errors.Is(err, plumbing.ErrReferenceNotFound) {
			return "", false, nil
		}
		return "", false, galleyerr.E(galleyerr.Unavailable, "read branch", err)
	}
	return ref.Hash().String(), true, nil
}

var fullHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// CreateBranch creates branch at commit only if no branch of that name
// exists, atomically against any other writer of the repository (see the
// package comment). It answers Conflict when the branch exists, or when an
// existing branch makes the name impossible (a/b exists and a is asked, or
// the reverse), and Invalid when commit is not a full commit id of a commit
// in the repository.
func (r *Repo) CreateBranch(ctx context.Context, branch, commit string) error {
	const op = galleyerr.Op("githost.CreateBranch")
	if err := ValidateBranch(branch); err != nil {
		return galleyerr.E(op, err)
	}
	if !fullHash.MatchString(commit) {
		return galleyerr.E(op, galleyerr.Invalid, "commit must be a full 40-hex commit id")
	}
	r.mu.Lock()
	_, err := r.repo.CommitObject(plumbing.NewHash(commit))
	r.mu.Unlock()
	if err != nil {
		if errors.Is(err, plumbing.ErrObjectNotFound) {
			return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("commit %s is not in the repository", commit))
		}
		return galleyerr.E(op, galleyerr.Unavailable, "read commit", err)
	}
	ref := "refs/heads/" + branch
	_, err = gitexec.Run(ctx, "", "--git-dir="+r.gitDir, "-c", "core.filesRefLockTimeout="+lockTimeoutMillis,
		"update-ref", "-m", "galley: create branch", ref, commit, "")
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	// Classify by what the repository now holds rather than by git's
	// wording: the update is expected-absent, so a branch that exists (or a
	// name that collides with one) means the condition was lost.
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, exists, rerr := r.branchHead(branch); rerr == nil && exists {
		return galleyerr.E(op, galleyerr.Conflict, fmt.Sprintf("branch %s exists", branch))
	}
	if other, ok := r.collidingBranch(branch); ok {
		return galleyerr.E(op, galleyerr.Conflict, fmt.Sprintf("branch %s cannot be created: branch %s exists", branch, other))
	}
	return galleyerr.E(op, galleyerr.Unavailable, "create branch", err)
}

// collidingBranch finds a branch whose ref file would be a directory or a
// file where branch's must go: a prefix of branch, or a branch under it.
func (r *Repo) collidingBranch(branch string) (string, bool) {
	parts := strings.Split(branch, "/")
	for i := 1; i < len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		if _, exists, err := r.branchHead(prefix); err == nil && exists {
			return prefix, true
		}
	}
	iter, err := r.repo.Branches()
	if err != nil {
		return "", false
	}
	defer iter.Close()
	var found string
	_ = iter.ForEach(func(ref *plumbing.Reference) error {
		if name := ref.Name().Short(); strings.HasPrefix(name, branch+"/") {
			found = name
			return errStop
		}
		return nil
	})
	return found, found != ""
}

var errStop = errors.New("stop")

// DeleteBranch deletes branch; deleting a missing branch succeeds. It
// refuses (Invalid) to delete the branch HEAD names, the default branch.
func (r *Repo) DeleteBranch(ctx context.Context, branch string) error {
	const op = galleyerr.Op("githost.DeleteBranch")
	if err := ValidateBranch(branch); err != nil {
		return galleyerr.E(op, err)
	}
	ref := plumbing.NewBranchReferenceName(branch)
	r.mu.Lock()
	head, err := r.repo.Reference(plumbing.HEAD, false)
	r.mu.Unlock()
	if err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, "read HEAD", err)
	}
	if head.Type() == plumbing.SymbolicReference && head.Target() == ref {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("branch %s is the default branch", branch))
	}
	_, err = gitexec.Run(ctx, "", "--git-dir="+r.gitDir, "-c", "core.filesRefLockTimeout="+lockTimeoutMillis,
		"update-ref", "-m", "galley: delete branch", "-d", ref.String())
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, exists, rerr := r.branchHead(branch); rerr == nil && !exists {
		return nil // a concurrent delete won: the branch is gone all the same
	}
	return galleyerr.E(op, galleyerr.Unavailable, "delete branch", err)
}
