//go:build unix

package localproc

import (
	"os"
	"path/filepath"

	"github.com/galley-run/galley/pkg/harness"
)

// confine chooses how the workers' agents are confined (the strongest the
// platform enforces: harness.ChooseConfinement) and, for a separate uid,
// opens the data folder and workspaces/ to traversal by others (mode 0711:
// an agent reaches its own worktree by path, lists nothing) while closing
// every other entry of the data folder to them (the server's private/
// folder with the token, the worker secret and the store, the repository,
// workers/ with the token files and logs). Every path directly in the data
// folder resolves for an agent, so only folders belong there: a file is
// logged (a hard link to it would be stopped by the kernel's
// protected_hardlinks alone). Every harness is told the mode chosen, so
// that what galley serve reports at start is what each agent gets.
func (r *Runtime) confine() {
	if ok, _ := harness.CanSwitchUser(); ok {
		if err := os.Chmod(r.dir, 0o711); err == nil {
			_ = os.Chmod(r.WorkspacesDir(), 0o711)
		}
		ents, _ := os.ReadDir(r.dir)
		for _, e := range ents {
			p := filepath.Join(r.dir, e.Name())
			if p == r.WorkspacesDir() {
				continue
			}
			fi, err := os.Lstat(p)
			if err != nil {
				continue
			}
			if !fi.IsDir() {
				r.log.Warn("a file directly in the data folder, where agents can resolve its path: move it into a closed folder", "path", p)
			}
			if fi.Mode()&os.ModeSymlink == 0 && fi.Mode().Perm()&0o077 != 0 {
				if err := os.Chmod(p, fi.Mode().Perm()&0o700); err != nil {
					r.log.Warn("cannot close a data folder entry to other users", "path", p, "err", err)
				}
			}
		}
	}
	r.enforcement = harness.ChooseConfinement(r.WorkspacesDir(), r.harness)
	r.network = harness.ChooseNetwork()
	if r.enforcement.Mode == harness.ConfineNone {
		r.network = harness.NetworkEnforcement{Mode: harness.NetOpen, Why: "the agents are not confined"}
	}
	if r.enforcement.Mode == harness.ConfineUser && r.repository != "" && filepath.IsAbs(r.repository) {
		if fi, err := os.Stat(r.repository); err == nil && fi.Mode().Perm()&0o005 != 0 {
			if _, inside := inside(r.dir, r.repository); !inside {
				r.log.Warn("the repository's folder is open to other users: agents can read it (not write it); close it (chmod o-rwx)", "repository", r.repository)
			}
		}
	}
}

// Confinement is how this runtime's agents are confined, decided at New.
func (r *Runtime) Confinement() harness.Enforcement { return r.enforcement }

// Network is how this runtime's agents' network is confined, decided at
// New and passed to every harness.
func (r *Runtime) Network() harness.NetworkEnforcement { return r.network }
