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
	"io"
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

// OpenFile opens the file rel, refusing a link at its last component too.
func (d *Dir) OpenFile(rel string, flag int, perm os.FileMode) (*os.File, error) {
	fd, last, done, err := d.parent(rel)
	if err != nil {
		return nil, err
	}
	defer done()
	f, err := unix.Openat(fd, last, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, pathErr("open", filepath.Join(d.name, rel), err)
	}
	return os.NewFile(uintptr(f), filepath.Join(d.name, rel)), nil
}

// ReadFile reads the regular file rel, at most max bytes (more is an error).
func (d *Dir) ReadFile(rel string, max int64) ([]byte, error) {
	f, err := d.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: errors.New("not a regular file")}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = &fs.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("larger than %d bytes", max)}
	}
	return b, err
}

// CreateTemp makes a new file in the folder rel (mode 0600) named
// prefix+random, and answers it and its path relative to d.
func (d *Dir) CreateTemp(rel, prefix string) (*os.File, string, error) {
	var b [8]byte
	for range 100 {
		if _, err := io.ReadFull(randReader, b[:]); err != nil {
			return nil, "", err
		}
		name := fmt.Sprintf("%s%x", prefix, b)
		p := name
		if rel != "." {
			p = rel + "/" + name
		}
		f, err := d.OpenFile(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, p, err
	}
	return nil, "", errors.New("no free temporary name in " + filepath.Join(d.name, rel))
}

// WriteFile replaces rel whole with data (mode perm), through a temporary
// file renamed over it: a link at rel is replaced, never followed.
func (d *Dir) WriteFile(rel string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(rel)
	f, tmp, err := d.CreateTemp(dir, "."+filepath.Base(rel)+".tmp-")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Chmod(perm), f.Close()); err != nil {
		_ = d.Remove(tmp)
		return err
	}
	if err := d.Rename(tmp, rel); err != nil {
		_ = d.Remove(tmp)
		return err
	}
	return nil
}

// Rename renames from to to, both beneath d.
func (d *Dir) Rename(from, to string) error {
	ffd, flast, fdone, err := d.parent(from)
	if err != nil {
		return err
	}
	defer fdone()
	tfd, tlast, tdone, err := d.parent(to)
	if err != nil {
		return err
	}
	defer tdone()
	if err := unix.Renameat(ffd, flast, tfd, tlast); err != nil {
		return pathErr("rename", filepath.Join(d.name, to), err)
	}
	return nil
}

// Mkdir makes the folder rel.
func (d *Dir) Mkdir(rel string, perm os.FileMode) error {
	fd, last, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	if err := unix.Mkdirat(fd, last, uint32(perm.Perm())); err != nil {
		return pathErr("mkdir", filepath.Join(d.name, rel), err)
	}
	return nil
}

// MkdirAll makes the folder rel and the missing ones above it; an existing
// link among them is refused.
func (d *Dir) MkdirAll(rel string, perm os.FileMode) error {
	parts, err := split(rel)
	if err != nil {
		return err
	}
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if err := d.Mkdir(p, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	sub, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	return sub.Close()
}

// Chmod sets the mode of rel, which must not be a link.
func (d *Dir) Chmod(rel string, mode os.FileMode) error {
	var f *os.File
	var err error
	if rel == "." {
		return unix.Fchmod(d.fd, uint32(mode.Perm()))
	}
	if f, err = d.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0); err != nil {
		// O_PATH would not do: fchmod refuses it.
		return err
	}
	defer f.Close()
	return f.Chmod(mode)
}

// Lchown sets the owner of rel itself (a link's own, never its target's).
func (d *Dir) Lchown(rel string, uid, gid int) error {
	fd, last, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	if last == "." {
		return unix.Fchown(fd, uid, gid)
	}
	if err := unix.Fchownat(fd, last, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("lchown", filepath.Join(d.name, rel), err)
	}
	return nil
}

// ChownTree gives rel and everything beneath it to uid:gid, links
// themselves included (their targets never). A file with more than one
// name not already owned by uid is refused (ErrHardLink).
func (d *Dir) ChownTree(rel string, uid, gid int) error {
	sub, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.chownAll(uid, gid)
}

func (d *Dir) chownAll(uid, gid int) error {
	if err := unix.Fchown(d.fd, uid, gid); err != nil {
		return pathErr("lchown", d.name, err)
	}
	names, err := d.names()
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(d.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("lstat", filepath.Join(d.name, n), err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := d.OpenDir(n)
			if err != nil {
				return err
			}
			err = sub.chownAll(uid, gid)
			sub.Close()
			if err != nil {
				return err
			}
			continue
		}
		if st.Nlink > 1 && int(st.Uid) != uid {
			return &fs.PathError{Op: "lchown", Path: filepath.Join(d.name, n), Err: ErrHardLink}
		}
		if err := unix.Fchownat(d.fd, n, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("lchown", filepath.Join(d.name, n), err)
		}
	}
	return nil
}

// names lists d's entries.
func (d *Dir) names() ([]string, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, pathErr("open", d.name, err)
	}
	f := os.NewFile(uintptr(fd), d.name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// ReadDir lists the names in the folder rel.
func (d *Dir) ReadDir(rel string) ([]string, error) {
	sub, err := d.OpenDir(rel)
	if err != nil {
		return nil, err
	}
	defer sub.Close()
	return sub.names()
}

// Remove removes the file, link or empty folder rel (a link is removed
// itself).
func (d *Dir) Remove(rel string) error {
	fd, last, done, err := d.parent(rel)
	if err != nil {
		return err
	}
	defer done()
	if last == "." {
		return errors.New("safepath: cannot remove the opened folder itself")
	}
	err = unix.Unlinkat(fd, last, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = unix.Unlinkat(fd, last, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return pathErr("remove", filepath.Join(d.name, rel), err)
	}
	return nil
}

// RemoveAll removes rel and everything beneath it, never following a link
// (one is removed itself); a missing rel is no error. A link among the
// folders above rel is refused (ErrLink).
func (d *Dir) RemoveAll(rel string) error {
	fd, last, done, err := d.parent(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer done()
	if last == "." {
		return errors.New("safepath: cannot remove the opened folder itself")
	}
	parent := &Dir{fd: fd, name: filepath.Join(d.name, filepath.Dir(rel))}
	return parent.removeEntry(last)
}

// removeEntry removes name from d, emptying it first if it is a folder.
func (d *Dir) removeEntry(name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return pathErr("lstat", filepath.Join(d.name, name), err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		sub, err := d.OpenDir(name)
		if err != nil {
			return err
		}
		names, err := sub.names()
		for _, n := range names {
			if err == nil {
				err = sub.removeEntry(n)
			}
		}
		sub.Close()
		if err != nil {
			return err
		}
		if err := unix.Unlinkat(d.fd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
			return pathErr("remove", filepath.Join(d.name, name), err)
		}
		return nil
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return pathErr("remove", filepath.Join(d.name, name), err)
	}
	return nil
}

// Walk calls f with the path (relative to d) and description of every
// entry beneath the folder rel, folders before their contents, never
// entering a link. f returning fs.SkipDir for a folder skips its contents.
func (d *Dir) Walk(rel string, f func(rel string, st unix.Stat_t) error) error {
	sub, err := d.OpenDir(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.walkAll(rel, f)
}

func (d *Dir) walkAll(prefix string, f func(string, unix.Stat_t) error) error {
	names, err := d.names()
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(d.fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return pathErr("lstat", filepath.Join(d.name, n), err)
		}
		p := n
		if prefix != "." {
			p = prefix + "/" + n
		}
		err := f(p, st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, fs.SkipDir) {
			continue
		}
		if err != nil {
			return err
		}
		sub, err := d.OpenDir(n)
		if err != nil {
			return err
		}
		err = sub.walkAll(p, f)
		sub.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
