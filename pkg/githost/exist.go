package githost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// ExistingBranches reports which of the named branches exist: the map
// holds true for each that does. It is the inventory's read, so its cost
// hardly grows with the names: one listing per folder of refs/heads that
// the names lie in (most lie in one or two), one read of packed-refs if
// any name is not a loose ref, no lock, no process, no file opened per
// branch. A loose ref counts as a branch by its file alone, as git's
// files backend keeps it.
//
// Loose refs are read before packed-refs, as git's own reader does: `git
// pack-refs` writes packed-refs before it deletes a loose ref, so a branch
// that exists throughout is found in one or the other. A name the listing
// lacks is looked up by its path before packed-refs is read: POSIX lets a
// listing miss an entry that a concurrent update renames over.
func (r *Repo) ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error) {
	const op = galleyerr.Op("githost.ExistingBranches")
	for _, b := range branches {
		if err := ValidateBranch(b); err != nil {
			return nil, galleyerr.E(op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	heads := filepath.Join(r.commonDir, "refs", "heads")
	exist := make(map[string]bool, len(branches))
	listed := map[string]map[string]bool{} // folder under refs/heads -> its loose refs
	var unlisted []string
	for _, b := range branches {
		dir, name := path.Split(b)
		files, ok := listed[dir]
		if !ok {
			var err error
			if files, err = looseRefs(filepath.Join(heads, filepath.FromSlash(dir))); err != nil {
				return nil, galleyerr.E(op, galleyerr.Unavailable, "list refs/heads/"+dir, err)
			}
			listed[dir] = files
		}
		if files[name] {
			exist[b] = true
		} else {
			unlisted = append(unlisted, b)
		}
	}
	var notLoose []string
	for _, b := range unlisted {
		switch fi, err := os.Lstat(filepath.Join(heads, filepath.FromSlash(b))); {
		case err == nil && !fi.IsDir():
			exist[b] = true
		case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// A folder of branches, or a prefix of the name is a branch:
			// no loose ref of this name.
			notLoose = append(notLoose, b)
		default:
			return nil, galleyerr.E(op, galleyerr.Unavailable, "read refs/heads/"+b, err)
		}
	}
	if len(notLoose) > 0 {
		packed, err := packedBranches(filepath.Join(r.commonDir, "packed-refs"))
		if err != nil {
			return nil, galleyerr.E(op, galleyerr.Unavailable, "read packed-refs", err)
		}
		for _, b := range notLoose {
			if packed[b] {
				exist[b] = true
			}
		}
	}
	return exist, nil
}

// looseRefs lists the files in dir, the loose refs of that folder; a
// missing folder (or a file where it would be, or one removed while it is
// read) has none.
func looseRefs(dir string) (map[string]bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// Removed while listed (git prunes emptied folders as it packs
		// refs): none listed here; each name is then looked up alone.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	files := make(map[string]bool, len(ents))
	for _, e := range ents {
		if !e.IsDir() {
			files[e.Name()] = true
		}
	}
	return files, nil
}

// packedBranches reads the branch names packed-refs holds; a missing file
// holds none. Peeled lines (^...) and the header are skipped.
func packedBranches(name string) (map[string]bool, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refs := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		if _, ref, ok := strings.Cut(line, " "); ok {
			if branch, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
				refs[branch] = true
			}
		}
	}
	return refs, sc.Err()
}
