//go:build unix

// Package safepath is how galley and the harness touch files an agent may
// have had its hands on (a worktree, its .git, a released worktree, a clone
// being filled from the object cache) while holding privileges the agent
// lacks: every operation works relative to an opened folder and resolves
// its path one component at a time with O_NOFOLLOW, so a symbolic link at
// any component is refused (ErrLink) rather than followed, and no path
// leaves the folder ("..", absolute paths and empty components are
// refused). Go's os.Root would follow a link that stays inside the folder
// (.git/info pointing at another clone's objects/info beneath the same
// workspaces folder), so this does not use it.
//
// The folder a Dir is opened on is the caller's to trust: Open refuses a
// link only as its last component.
package safepath

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrLink is the error of an operation that met a symbolic link.
var ErrLink = errors.New("a symbolic link, which is not followed")

// ErrHardLink is ChownTree's error for a file with more than one name that
// is not already owned by the new owner: it may be a link to a file
// elsewhere (galley's token, another worktree's object), which a chown
// would give away.
var ErrHardLink = errors.New("a file with more than one name (a hard link), which is not given away")

// Dir is an open folder.
type Dir struct {
	fd   int
	name string // for errors
}

// Open opens the folder at path; its last component must not be a link.
func Open(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if fi, lerr := os.Lstat(path); errors.Is(err, unix.ENOTDIR) && lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			err = unix.ELOOP
		}
		return nil, pathErr("open", path, err)
	}
	return &Dir{fd: fd, name: path}, nil
}

// Close closes d.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Name is the path d was opened as.
func (d *Dir) Name() string { return d.name }

func pathErr(op, path string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EMLINK) {
		err = ErrLink
	}
	return &fs.PathError{Op: op, Path: path, Err: err}
}

// split checks rel and returns its components.
func split(rel string) ([]string, error) {
	if rel == "" || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("path %q is not relative", rel)
	}
	if rel == "." {
		return nil, nil
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("path %q is not a plain relative path", rel)
		}
	}
	return parts, nil
}

// walk opens the folder of every component of parts in turn beneath d,
// never following a link, and returns the last one's descriptor (the
// caller closes it unless it is d.fd).
func (d *Dir) walk(parts []string) (int, error) {
	fd := d.fd
	for i, p := range parts {
		next, err := unix.Openat(fd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil && errors.Is(err, unix.ENOTDIR) && isLink(fd, p) {
			err = unix.ELOOP
		}
		if fd != d.fd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, pathErr("open", filepath.Join(append([]string{d.name}, parts[:i+1]...)...), err)
		}
		fd = next
	}
	return fd, nil
}

// isLink reports whether name in the folder fd is a symbolic link.
func isLink(fd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// parent resolves every component of rel but the last, and returns the
// folder's descriptor and the last component ("." for d itself).
func (d *Dir) parent(rel string) (int, string, func(), error) {
	parts, err := split(rel)
	if err != nil {
		return -1, "", nil, err
	}
	if len(parts) == 0 {
		return d.fd, ".", func() {}, nil
	}
	fd, err := d.walk(parts[:len(parts)-1])
	if err != nil {
		return -1, "", nil, err
	}
	done := func() {
		if fd != d.fd {
			unix.Close(fd)
		}
	}
	return fd, parts[len(parts)-1], done, nil
}

// OpenDir opens the folder rel beneath d.
func (d *Dir) OpenDir(rel string) (*Dir, error) {
	parts, err := split(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		fd, err := unix.Dup(d.fd)
		if err != nil {
			return nil, err
		}
		unix.CloseOnExec(fd)
		return &Dir{fd: fd, name: d.name}, nil
	}
	fd, err := d.walk(parts)
	if err != nil {
		return nil, err
	}
	return &Dir{fd: fd, name: filepath.Join(d.name, rel)}, nil
}

// Lstat describes rel itself (a link is described, not followed).
func (d *Dir) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, last, done, err := d.parent(rel)
	if err != nil {
		return st, err
	}
	defer done()
	if err := unix.Fstatat(fd, last, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, pathErr("lstat", filepath.Join(d.name, rel), err)
	}
	return st, nil
}

// IsLink reports whether rel is a symbolic link (false when it is absent).
func (d *Dir) IsLink(rel string) bool {
	st, err := d.Lstat(rel)
	return err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}
