package githost

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// BranchHeads returns the commit each named branch points at; a branch
// absent from the map does not exist. It is the inventory's read, so it
// costs one small file read per branch and one read of packed-refs, takes
// no lock and starts no process: it reads the files backend the way git
// does (go-git's reader makes several system calls per path element).
//
// Every loose ref is read before packed-refs, as git's own reader does:
// `git pack-refs` writes packed-refs before it deletes a loose ref, so a
// branch that exists throughout is found in one or the other. A ref that
// is not a plain commit id (symbolic, or unreadable) is read through
// go-git, as BranchHead reads it.
func (r *Repo) BranchHeads(ctx context.Context, branches []string) (map[string]string, error) {
	const op = galleyerr.Op("githost.BranchHeads")
	for _, b := range branches {
		if err := ValidateBranch(b); err != nil {
			return nil, galleyerr.E(op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	heads := make(map[string]string, len(branches))
	var notLoose, odd []string
	for _, b := range branches {
		h, err := readLoose(filepath.Join(r.commonDir, "refs", "heads", filepath.FromSlash(b)))
		switch {
		case err == nil && h != "":
			heads[b] = h
		case err == nil:
			notLoose = append(notLoose, b)
		default:
			odd = append(odd, b)
		}
	}
	if len(notLoose) > 0 {
		packed, err := readPacked(filepath.Join(r.commonDir, "packed-refs"))
		if err != nil {
			return nil, galleyerr.E(op, galleyerr.Unavailable, "read packed-refs", err)
		}
		for _, b := range notLoose {
			if h, ok := packed["refs/heads/"+b]; ok {
				heads[b] = h
			}
		}
	}
	if len(odd) > 0 {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, b := range odd {
			h, exists, err := r.branchHead(b)
			if err != nil {
				return nil, galleyerr.E(op, err)
			}
			if exists {
				heads[b] = h
			}
		}
	}
	return heads, nil
}

// readLoose reads a loose ref file: its commit id, "" when there is no
// such file (the branch may be packed, or absent), or an error for what
// needs a closer look (a symbolic ref, an unreadable file).
func readLoose(path string) (string, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR):
		// ENOTDIR: a prefix of the name is a branch (a file); EISDIR: the
		// name is a folder of branches. Neither is a loose ref of it.
		return "", nil
	case err != nil:
		return "", err
	}
	if h := strings.TrimSpace(string(b)); isHash(h) {
		return h, nil
	}
	return "", errors.New("not a plain commit id")
}

// readPacked reads packed-refs into name -> commit id; a missing file is
// an empty one. Peeled lines (^...) and the header are skipped.
func readPacked(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		h, name, ok := strings.Cut(line, " ")
		if ok && isHash(h) && strings.HasPrefix(name, "refs/heads/") {
			refs[name] = h
		}
	}
	return refs, sc.Err()
}

// isHash reports whether s is a full object id (SHA-1 or SHA-256) in
// lower-case hex.
func isHash(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
