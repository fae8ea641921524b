//go:build unix

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
