//go:build unix

package safepath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

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
