//go:build unix

package snapshot

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"github.com/klauspost/compress/zstd"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// SaveOption is an optional setting of Save.
type SaveOption func(*saveConfig)

type saveConfig struct {
	exclude map[string]bool
}

// Exclude keeps the given paths (relative to the worktree, with everything
// beneath them) out of the archive, beside .git, which is never in it: the
// caches a house chooses not to keep, say. A path that is not a plain
// relative path is ignored.
func Exclude(paths ...string) SaveOption {
	return func(c *saveConfig) {
		for _, p := range paths {
			if filepath.IsLocal(p) {
				c.exclude[path.Clean(filepath.ToSlash(p))] = true
			}
		}
	}
}

// Save writes the worktree at dir as one archive to w: every folder,
// regular file and symbolic link beneath it (links as links, never
// followed) but its top-level .git and what Exclude names; sockets, fifos
// and devices are skipped (counted in Stats.Skipped). Modes keep their
// permission bits only (setuid, setgid and sticky are dropped), times to
// the nanosecond (in PAX records: build tools compare them); owners are not
// kept (Restore gives every entry one owner).
//
// It reads the worktree through an os.Root and checks that each file and
// folder it opens is the one it listed (same device and inode), so a link
// swapped in while it reads is never followed. A file with more than one
// name not owned by the worktree's owner is refused (Invalid): it may be a
// hard link to a file outside the worktree that the agent could not read,
// whose contents a restore would hand it. Past limits, Save stops with
// TooLarge. A failed Save has written part of an archive to w, which
// Restore refuses: callers put w's bytes in a Store only when Save
// succeeded (SaveTo does).
func Save(ctx context.Context, dir string, w io.Writer, limits Limits, opts ...SaveOption) (Stats, error) {
	cfg := saveConfig{exclude: map[string]bool{".git": true}}
	for _, o := range opts {
		o(&cfg)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, galleyerr.E(galleyerr.Op("snapshot.save"), "cannot open the worktree", err)
	}
	defer root.Close()
	top, err := root.Stat(".")
	if err != nil {
		return Stats{}, galleyerr.E(galleyerr.Op("snapshot.save"), "cannot read the worktree", err)
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(windowSize))
	if err != nil {
		return Stats{}, err
	}
	s := &saver{ctx: ctx, root: root, cfg: cfg, limits: limits.orDefault(), tw: tar.NewWriter(zw), owner: ownerOf(top)}
	err = s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{paxVersion: formatVersion}})
	if err == nil {
		err = s.dir(".", top)
	}
	if err == nil {
		err = s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{
			paxEntries: strconv.Itoa(s.stats.entries()),
			paxBytes:   strconv.FormatInt(s.stats.Bytes, 10),
		}})
	}
	if err == nil {
		err = s.tw.Close()
	}
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return s.stats, err
}

type saver struct {
	ctx    context.Context
	root   *os.Root
	cfg    saveConfig
	limits Limits
	tw     *tar.Writer
	owner  uint32
	stats  Stats
}

func ownerOf(fi fs.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}

// changed is Save's error for an entry that changed between its listing
// and its reading.
func changed(rel string) error {
	return galleyerr.E(galleyerr.Conflict, galleyerr.Op("snapshot.save"),
		fmt.Sprintf("an entry changed while it was saved (%d bytes of path)", len(rel)))
}

// count takes one entry and n bytes of the budget, or refuses.
func (s *saver) count(n int64) error {
	if s.stats.entries()+1 > s.limits.MaxEntries {
		return tooLarge("snapshot.save", fmt.Sprintf("the worktree holds more than %d entries", s.limits.MaxEntries))
	}
	if n > s.limits.MaxBytes-s.stats.Bytes {
		return tooLarge("snapshot.save", fmt.Sprintf("the worktree holds more than %d bytes", s.limits.MaxBytes))
	}
	s.stats.Bytes += n
	return nil
}

// dir archives the entries of the folder rel, whose listing was want.
func (s *saver) dir(rel string, want fs.FileInfo) error {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) && rel != "." {
		return nil // removed since it was listed
	}
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.save"), "cannot open a folder of the worktree", err)
	}
	fi, err := f.Stat()
	if err == nil && !os.SameFile(fi, want) {
		err = changed(rel)
	}
	var names []string
	if err == nil {
		names, err = f.Readdirnames(-1)
	}
	f.Close()
	if err != nil {
		return err
	}
	slices.Sort(names) // the same worktree, the same archive
	for _, name := range names {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if s.cfg.exclude[child] {
			continue
		}
		fi, err := s.root.Lstat(child)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return galleyerr.E(galleyerr.Op("snapshot.save"), "cannot read an entry of the worktree", err)
		}
		switch mode := fi.Mode(); {
		case mode.IsDir():
			if err := s.count(0); err != nil {
				return err
			}
			s.stats.Dirs++
			if err := s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: child + "/", Mode: int64(mode.Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
				return err
			}
			if err := s.dir(child, fi); err != nil {
				return err
			}
		case mode.IsRegular():
			if err := s.file(child, fi); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := s.root.Readlink(child)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return galleyerr.E(galleyerr.Op("snapshot.save"), "cannot read a link of the worktree", err)
			}
			if err := s.count(int64(len(target))); err != nil {
				return err
			}
			s.stats.Links++
			if err := s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: child, Linkname: target, Mode: 0o777, ModTime: fi.ModTime()}); err != nil {
				return err
			}
		default:
			s.stats.Skipped++
		}
	}
	return nil
}

// file archives the regular file rel, whose listing was want.
func (s *saver) file(rel string, want fs.FileInfo) error {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.save"), "cannot open a file of the worktree", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !os.SameFile(fi, want) || !fi.Mode().IsRegular() {
		return changed(rel)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && st.Uid != s.owner {
		return galleyerr.E(galleyerr.Invalid, galleyerr.Op("snapshot.save"),
			"the worktree holds a file with more than one name (a hard link) that its owner does not own, which is not saved")
	}
	size := fi.Size()
	if err := s.count(size); err != nil {
		return err
	}
	s.stats.Files++
	if err := s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: size, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	n, err := io.CopyN(s.tw, ctxReader{s.ctx, f}, size)
	if errors.Is(err, io.EOF) && n < size {
		return changed(rel) // it shrank: the header promised more
	}
	return err
}
