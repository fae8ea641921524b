package localserver

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/galley-run/galley/pkg/safepath"
	"golang.org/x/sys/unix"
)

// The data folder's layout. Agents under a uid of their own must pass
// through the data folder to reach their worktrees (it is mode 0711 then:
// package localproc), so every path directly in it resolves for them: it
// holds only folders, and the ones that are not the worktrees' are closed
// (0700), so no path beneath them resolves for an agent and a hard link to
// a file there fails at the folder (EACCES), whatever the kernel's
// protected_hardlinks says:
//
//	<data>/private/         mode 700: galley's own files
//	    token               kitchn's bearer token (--token-file's default)
//	    operator-token      the operator token (--operator-token-file's default)
//	    worker-secret       the key worker credentials are signed with
//	    galley.db           the embedded store
//	<data>/repository.git/  the house repository, when --repository is unset (closed by localproc)
//	<data>/workers/         the workers' harness state and logs (mode 700, package localproc)
//	<data>/workspaces/      the worktrees (mode 711, package localproc)
//	<data>/parked/          parked agents' session archives, with --park-after (mode 700, docs/parking.md)
const PrivateDir = "private"

// privateFiles are the files of <data>/private that earlier versions kept
// in the data folder itself.
var privateFiles = []string{"token", "operator-token", "worker-secret", "galley.db"}

// prepareData makes <data>/private (mode 0700) and moves into it the files
// of privateFiles that an earlier version left in the data folder itself,
// except those in keep (a token file the operator named there is left
// where it is, and refused by Start). No link is followed: the private
// folder must not be a link, and a legacy name that is anything but a
// regular file is refused rather than moved. A name found in both places
// is an error (which one holds the live secret is the operator's to say).
func prepareData(data string, keep map[string]bool) error {
	d, err := safepath.Open(data)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	defer d.Close()
	if err := d.Mkdir(PrivateDir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("data directory: %w", err)
	}
	if st, err := d.Lstat(PrivateDir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	} else if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%s is not a folder (a link is not followed): remove it", filepath.Join(data, PrivateDir))
	}
	if err := d.Chmod(PrivateDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	for _, name := range privateFiles {
		if keep[name] {
			continue
		}
		st, err := d.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		old, moved := filepath.Join(data, name), filepath.Join(data, PrivateDir, name)
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s is not a regular file (a link is not followed); galley keeps it in %s now: remove it", old, moved)
		}
		if _, err := d.Lstat(PrivateDir + "/" + name); err == nil {
			return fmt.Errorf("both %s and %s exist; galley reads the second: remove the first", old, moved)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("data directory: %w", err)
		}
		if err := d.Rename(name, PrivateDir+"/"+name); err != nil {
			return fmt.Errorf("moving %s into %s: %w", old, filepath.Join(data, PrivateDir), err)
		}
	}
	return nil
}

// inDataFolder reports whether path names a file directly in the data
// folder, where every agent can resolve it.
func inDataFolder(data, path string) bool {
	abs, err := filepath.Abs(path)
	return err == nil && filepath.Dir(abs) == data
}
