//go:build unix

package snapshot

import (
	"errors"
	"io/fs"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/safepath"
)

// The names of a restore's folders beside the worktree named base: the
// staging folder it fills, and the worktree it replaces, until removed.
func stagingPrefix(base string) string  { return "." + base + ".restore-" }
func replacedPrefix(base string) string { return "." + base + ".replaced-" }

// swapIn puts the filled staging folder in base's place, with base's .git:
// base is renamed aside, its .git moved into the staging folder, the
// staging folder renamed to base, and the old folder removed. Every step
// is a rename in parent (safepath: no link followed), so each state a
// crash can leave is one recoverSwap finishes or undoes. A failed step is
// undone here.
func swapIn(parent *safepath.Dir, base, staging string) error {
	op := galleyerr.Op("snapshot.restore")
	if _, err := parent.Lstat(base); errors.Is(err, fs.ErrNotExist) {
		if err := parent.Rename(staging, base); err != nil {
			return galleyerr.E(op, "cannot put the restored folder in place", err)
		}
		return nil
	} else if err != nil {
		return galleyerr.E(op, "cannot read the worktree", err)
	}
	old := replacedPrefix(base) + randomHex()
	if err := parent.Rename(base, old); err != nil {
		return galleyerr.E(op, "cannot move the worktree aside", err)
	}
	moved := false
	if _, err := parent.Lstat(old + "/.git"); err == nil {
		if err := parent.Rename(old+"/.git", staging+"/.git"); err != nil {
			_ = parent.Rename(old, base)
			return galleyerr.E(op, "cannot move the worktree's .git", err)
		}
		moved = true
	}
	if err := parent.Rename(staging, base); err != nil {
		if moved {
			_ = parent.Rename(staging+"/.git", old+"/.git")
		}
		_ = parent.Rename(old, base)
		return galleyerr.E(op, "cannot put the restored folder in place", err)
	}
	// The restore is done; an old folder left behind is removed by the
	// next restore.
	_ = parent.RemoveAll(old)
	return nil
}

// recoverSwap finishes or undoes a restore of base that was interrupted,
// and removes what it left (and what a finished restore could not remove). While base is missing, a staging folder with
// a .git was complete (swapIn moves the .git in only once the archive was
// restored whole and checked), so it takes base's place; otherwise the old
// folder goes back.
func recoverSwap(parent *safepath.Dir, base string) error {
	names, err := parent.ReadDir(".")
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot list the worktree's folder", err)
	}
	var staged, replaced []string
	for _, n := range names {
		switch {
		case strings.HasPrefix(n, stagingPrefix(base)):
			staged = append(staged, n)
		case strings.HasPrefix(n, replacedPrefix(base)):
			replaced = append(replaced, n)
		}
	}
	if len(staged)+len(replaced) == 0 {
		return nil
	}
	_, err = parent.Lstat(base)
	if errors.Is(err, fs.ErrNotExist) && len(replaced) > 0 {
		// A swap was under way: finish it, or put the old folder back.
		for _, s := range staged {
			if _, err := parent.Lstat(s + "/.git"); err == nil && parent.Rename(s, base) == nil {
				break
			}
		}
		if _, err := parent.Lstat(base); errors.Is(err, fs.ErrNotExist) {
			if len(replaced) > 1 {
				// Never guess between several old folders: leave them
				// for an operator, and refuse.
				return galleyerr.E(galleyerr.Conflict, galleyerr.Op("snapshot.restore"),
					"interrupted restores left the worktree missing and several old copies beside it; see its folder")
			}
			if err := parent.Rename(replaced[0], base); err != nil {
				return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot put back a worktree an interrupted restore moved aside", err)
			}
		}
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot read the worktree", err)
	}
	// What is left is removed as far as it can be: a leftover that cannot
	// (a folder closed even to the process) is only disk, and must not
	// keep every later restore of the worktree from running.
	for _, n := range append(staged, replaced...) {
		_ = parent.RemoveAll(n)
	}
	return nil
}
