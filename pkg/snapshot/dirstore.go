package snapshot

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// DirStore keeps snapshots as files in a folder (galley serve's data
// folder), one per key, its segments as subfolders; every operation goes
// through an os.Root of the folder.
type DirStore struct {
	root *os.Root
}

// NewDirStore opens (making it, mode 0700) the folder dir as a Store.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &DirStore{root: root}, nil
}

// Close closes the folder.
func (d *DirStore) Close() error { return d.root.Close() }

// Put writes r to a new file beside key's, synced, and renames it over
// key's: a reader that fails, or ctx done, leaves key's earlier file.
func (d *DirStore) Put(ctx context.Context, key string, r io.Reader) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	folder := path.Dir(key)
	if err := d.root.MkdirAll(folder, 0o700); err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.put"), err)
	}
	// A leading '.' is a name no key's segment has (CheckKey).
	tmp := path.Join(folder, "."+path.Base(key)+".put-"+randomHex())
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.put"), err)
	}
	_, err = io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, key)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		return galleyerr.E(galleyerr.Op("snapshot.put"), err)
	}
	return nil
}

// Get opens key's file.
func (d *DirStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := d.root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, galleyerr.E(galleyerr.NotFound, galleyerr.Op("snapshot.get"), "no snapshot under this key")
	}
	if err != nil {
		return nil, galleyerr.E(galleyerr.Op("snapshot.get"), err)
	}
	return f, nil
}

// Delete removes key's file.
func (d *DirStore) Delete(ctx context.Context, key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := d.root.Remove(key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return galleyerr.E(galleyerr.Op("snapshot.delete"), err)
	}
	return nil
}
