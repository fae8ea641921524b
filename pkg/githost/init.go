package githost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// DefaultBranch is the default branch of a repository InitBare creates.
const DefaultBranch = "main"

// readme is the one file of a fresh house repository's first commit.
const readme = "# galley house repository\n\nWorkers' branches start from the head of main.\n"

// InitBare makes dir a bare repository whose default branch, main, holds one
// commit (a README), unless dir already holds a repository, which it reuses
// as it is. It returns dir's absolute path. The repository is built in a
// temporary sibling and renamed into place, so a concurrent or interrupted
// InitBare never leaves a half-made repository at dir. A dir that exists,
// is not empty and is not a repository is Invalid.
func InitBare(ctx context.Context, dir string) (string, error) {
	const op = galleyerr.Op("githost.InitBare")
	path, err := filepath.Abs(dir)
	if err != nil {
		return "", galleyerr.E(op, galleyerr.Invalid, "repository path", err)
	}
	if ok, err := reusable(path); err != nil || ok {
		if err != nil {
			return "", galleyerr.E(op, err)
		}
		return path, nil
	}
	if err := ctx.Err(); err != nil {
		return "", galleyerr.E(op, galleyerr.Unavailable, err)
	}
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", galleyerr.E(op, galleyerr.Other, "create parent directory", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(path)+".init-")
	if err != nil {
		return "", galleyerr.E(op, galleyerr.Other, "create temporary directory", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := initBare(tmp); err != nil {
		return "", galleyerr.E(op, galleyerr.Other, "initialise repository", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return "", galleyerr.E(op, galleyerr.Other, err)
	}
	// rename(2) replaces an empty directory and fails on a non-empty one:
	// the first InitBare wins and the others reuse its repository. (os.Rename
	// refuses any existing directory, so call the system directly.)
	if err := syscall.Rename(tmp, path); err != nil {
		if ok, rerr := reusable(path); rerr == nil && ok {
			return path, nil
		}
		return "", galleyerr.E(op, galleyerr.Other, "move repository into place", err)
	}
	return path, nil
}

// reusable reports whether path holds a repository (true) or is absent or
// an empty directory (false); anything else is Invalid.
func reusable(path string) (bool, error) {
	entries, err := os.ReadDir(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, galleyerr.E(galleyerr.Invalid, fmt.Sprintf("%s is not a directory", path), err)
	}
	if len(entries) == 0 {
		return false, nil
	}
	if _, err := git.PlainOpen(path); err != nil {
		return false, galleyerr.E(galleyerr.Invalid, fmt.Sprintf("%s exists and is not a git repository", path))
	}
	return true, nil
}

// initBare creates a bare repository in dir with main at a first commit.
func initBare(dir string) error {
	repo, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{
		Bare:        true,
		InitOptions: git.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName(DefaultBranch)},
	})
	if err != nil {
		return err
	}
	st := repo.Storer
	blob, err := storeBlob(st, []byte(readme))
	if err != nil {
		return err
	}
	tree := &object.Tree{Entries: []object.TreeEntry{{Name: "README.md", Mode: filemode.Regular, Hash: blob}}}
	treeHash, err := storeObject(st, tree)
	if err != nil {
		return err
	}
	sig := object.Signature{Name: AuthorName, Email: AuthorEmail, When: time.Now().UTC().Truncate(time.Second)}
	commit := &object.Commit{Author: sig, Committer: sig, Message: "Initial commit\n", TreeHash: treeHash}
	commitHash, err := storeObject(st, commit)
	if err != nil {
		return err
	}
	// Nobody else can see dir yet, so a plain set is enough here.
	return st.SetReference(plumbing.NewHashReference(plumbing.NewBranchReferenceName(DefaultBranch), commitHash))
}

// AuthorName and AuthorEmail are the identity of the commits galley itself
// makes.
const (
	AuthorName  = "galley"
	AuthorEmail = "galley@galley.invalid"
)

type encoder interface {
	Encode(plumbing.EncodedObject) error
}

func storeObject(st storage.Storer, o encoder) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	if err := o.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

func storeBlob(st storage.Storer, data []byte) (plumbing.Hash, error) {
	obj := st.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	w, err := obj.Writer()
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := w.Write(data); err != nil {
		return plumbing.ZeroHash, err
	}
	if err := w.Close(); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}
