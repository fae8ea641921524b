package workspace

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/githost/gitexec"
	"github.com/galley-run/galley/pkg/safepath"
)

// WithCache makes Prepare clone through a shared object cache in the folder
// dir: one bare mirror per repository URL, which Prepare brings up to date
// with `git fetch` under a lock before it clones, so that the clone itself
// fetches from the repository only what the mirror lacks (nearly nothing)
// and takes the rest from the mirror (`git clone --reference`). Several
// harnesses, on one machine or on one NFS file system (EFS), may share
// dir. log reports a cache that did not serve (nil: the default logger).
//
// The finished clone does not depend on the cache: before Prepare returns,
// the mirror's object files are copied into it (each pack and index
// checked against its own checksum) and its alternates file is removed,
// which is what --dissociate does, without repacking every object. So the
// agent needs no access to dir (it is created 0700), nothing it does in
// its clone can reach the cache, and nothing done to the cache later (a
// roll-up of its packs, setting it aside, deleting it) can break a clone.
//
// The cache is an optimisation only. On any failure of it (the folder not
// ours or writable by others, a lock not had in time with no mirror yet, a
// corrupt mirror, a failed fetch) Prepare logs the failure at error level
// and makes a plain clone; when that plain clone succeeds after the
// reference clone failed, the mirror is suspect and is set aside
// (renamed), so that the next Prepare builds a fresh one. Nothing ever
// prunes objects from a mirror: its gc is off and it is only ever
// repacked geometrically (rolling small packs into bigger ones, every
// object kept).
func WithCache(dir string, log *slog.Logger) Option {
	return func(o *options) { o.cache, o.log = dir, log }
}

// cacheLockWait bounds how long Prepare waits for another harness's update
// of the same mirror (a first mirror of a large repository takes minutes
// over the network) before cloning without updating it.
var cacheLockWait = 10 * time.Minute

// maxCachePacks is the pack count above which an update rolls the
// mirror's packs up (each fetch adds one).
const maxCachePacks = 16

// Files and folders in the cache folder.
const (
	mirrorSuffix     = ".git"
	lockSuffix       = ".lock"
	suspectSuffix    = ".suspect"
	mirrorTmpInfix   = ".tmp-"
	cacheMarkerKey   = "galley.cacheof" // the mirror's config: the URL it mirrors
	mirrorRefspec    = "+refs/heads/*:refs/heads/*"
	mirrorTagRefspec = "+refs/tags/*:refs/tags/*"
)

func (o options) logger() *slog.Logger {
	if o.log != nil {
		return o.log
	}
	return slog.Default()
}

// cacheStage says which step of a cached clone failed: only a failure of
// the clone from a mirror (not of the mirror's own fetch, which may be the
// network's) makes the mirror suspect.
type cacheError struct {
	suspect bool // the mirror's content may be at fault
	err     error
}

func (e *cacheError) Error() string { return e.err.Error() }
func (e *cacheError) Unwrap() error { return e.err }

// cloneCached clones repoURL into tmp (an empty folder in parent) through
// the mirror of repoURL in the cache folder root, updating the mirror first.
func cloneCached(ctx context.Context, root, parent, repoURL, branch, tmp string, cred []string, log *slog.Logger) error {
	start := time.Now()
	mirror, err := updateMirror(ctx, root, repoURL, cred, log)
	if err != nil {
		return &cacheError{err: err}
	}
	updated := time.Now()
	// --no-local: a repository on a local path would otherwise be copied
	// (or hard-linked) whole, ignoring the reference.
	args := []string{"-c", "core.hooksPath=/dev/null", "clone", "--quiet", "--no-local", "--reference", mirror}
	if branch != "" {
		args = append(args, "--branch", branch)
	}
	if _, err := (gitexec.Cmd{Dir: parent, Env: cred}).Run(ctx, append(args, "--", repoURL, tmp)...); err != nil {
		return &cacheError{suspect: ctx.Err() == nil, err: fmt.Errorf("clone with the mirror as reference: %w", err)}
	}
	cloned := time.Now()
	if err := dissociate(ctx, root, repoURL, mirror, filepath.Join(tmp, ".git")); err != nil {
		return &cacheError{suspect: ctx.Err() == nil, err: err}
	}
	log.Info("cloned through the git object cache", "mirror", mirror, "update", updated.Sub(start),
		"clone", cloned.Sub(updated), "copy", time.Since(cloned))
	return nil
}

// dissociate makes the clone whose git directory is gitDir stand alone:
// it copies the mirror's object files into it, checking each pack and
// index against its own trailing checksum as it copies (a truncated or
// damaged file fails), then removes the clone's alternates file. This is
// what `git clone --dissociate` achieves by repacking every object, at the
// cost of a file copy instead. The copy holds the mirror's lock shared, so
// that no update or roll-up of its packs removes a file half-way; the copies are the
// clone's own files (never hard links: the agent's uid will own them).
func dissociate(ctx context.Context, root, repoURL, mirror, gitDir string) error {
	format, err := mirrorGit(ctx, mirror, nil, "rev-parse", "--show-object-format")
	if err != nil {
		return fmt.Errorf("read the mirror's object format: %w", err)
	}
	newHash, err := hashFor(strings.TrimSpace(format))
	if err != nil {
		return err
	}
	// Shared: copies into several clones run at once; only an update or a
	// roll-up (exclusive) waits for them.
	unlock, err := lockFile(ctx, mirrorPath(root, repoURL)+lockSuffix, cacheLockWait, syscall.LOCK_SH)
	if err != nil {
		return fmt.Errorf("lock the mirror to copy its objects: %w", err)
	}
	defer unlock()
	// The clone's side is written through safepath: no link is followed.
	g, err := safepath.Open(gitDir)
	if err != nil {
		return fmt.Errorf("open the clone's git directory: %w", err)
	}
	defer g.Close()
	src := filepath.Join(mirror, "objects")
	err = filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		switch {
		case d.IsDir() && rel == "info":
			return filepath.SkipDir // alternates, commit-graph: the mirror's own
		case d.IsDir() && rel == ".":
			return nil
		case d.IsDir():
			return g.MkdirAll(filepath.ToSlash(filepath.Join("objects", rel)), 0o755)
		case !d.Type().IsRegular() || strings.HasPrefix(d.Name(), "tmp_") || strings.HasSuffix(d.Name(), ".keep") || strings.HasSuffix(d.Name(), ".bitmap"):
			return nil
		}
		target := filepath.ToSlash(filepath.Join("objects", rel))
		if _, err := g.Lstat(target); err == nil {
			return nil // the clone has it already (the same name is the same content)
		}
		check := strings.HasSuffix(d.Name(), ".pack") || strings.HasSuffix(d.Name(), ".idx")
		return copyChecked(path, g, target, newHash, check)
	})
	if err != nil {
		return fmt.Errorf("copy the mirror's objects into the clone: %w", err)
	}
	if err := g.Remove("objects/info/alternates"); err != nil {
		return fmt.Errorf("stop borrowing from the mirror: %w", err)
	}
	return nil
}

// hashFor is the hash of git's object format name.
func hashFor(format string) (func() hash.Hash, error) {
	switch format {
	case "sha1":
		return sha1.New, nil
	case "sha256":
		return sha256.New, nil
	}
	return nil, fmt.Errorf("unknown object format %q", format)
}

// copyChecked copies src to a new file dst beneath g (mode 0444, as git
// makes object files), through a temporary name. With check, src must end
// with the checksum of everything before it, as git's pack and index files
// do.
func copyChecked(src string, g *safepath.Dir, dst string, newHash func() hash.Hash, check bool) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, tmp, err := g.CreateTemp(path.Dir(dst), "tmp_copy_")
	if err != nil {
		return err
	}
	defer g.Remove(tmp) // fails harmlessly once renamed
	fi, err := in.Stat()
	if err != nil {
		out.Close()
		return err
	}
	// Hash all but the trailing checksum, which is read aside to compare.
	h := newHash()
	body := fi.Size() - int64(h.Size())
	if body < 0 {
		body = 0
	}
	tail := new(bytes.Buffer)
	_, err = io.CopyN(io.MultiWriter(out, h), in, body)
	if err == nil {
		_, err = io.Copy(io.MultiWriter(out, tail), in)
	}
	if err != nil {
		out.Close()
		return err
	}
	if check && !bytes.Equal(h.Sum(nil), tail.Bytes()) {
		out.Close()
		return fmt.Errorf("%s fails its checksum: the mirror is damaged", filepath.Base(src))
	}
	if err := errors.Join(out.Chmod(0o444), out.Close()); err != nil {
		return err
	}
	return g.Rename(tmp, dst)
}

// mirrorPath is where the mirror of repoURL lives in root: named by a hash
// of the URL (which holds no credential: checkURL).
func mirrorPath(root, repoURL string) string {
	sum := sha256.Sum256([]byte(repoURL))
	return filepath.Join(root, hex.EncodeToString(sum[:12])+mirrorSuffix)
}

// updateMirror makes or updates, under its lock, the mirror of repoURL in
// root and returns its path. A lock held by another harness past
// cacheLockWait leaves an existing mirror as it is (the clone fetches what
// it lacks from the repository all the same).
func updateMirror(ctx context.Context, root, repoURL string, cred []string, log *slog.Logger) (string, error) {
	if err := ownFolder(root, true); err != nil {
		return "", err
	}
	mirror := mirrorPath(root, repoURL)
	unlock, err := lockFile(ctx, mirror+lockSuffix, cacheLockWait, syscall.LOCK_EX)
	switch {
	case errors.Is(err, errLockBusy):
		if ownFolder(mirror, false) == nil {
			log.Warn("the git object cache is being updated by another harness; cloning with it as it is", "mirror", mirror)
			return mirror, nil
		}
		return "", fmt.Errorf("no mirror yet, and another harness holds its lock: %w", err)
	case err != nil:
		return "", err
	}
	defer unlock()
	if _, err := os.Lstat(mirror); errors.Is(err, os.ErrNotExist) {
		return mirror, makeMirror(ctx, root, mirror, repoURL, cred)
	}
	if err := ownFolder(mirror, false); err != nil {
		return "", err
	}
	if got, _ := mirrorGit(ctx, mirror, nil, "config", "--get", cacheMarkerKey); strings.TrimSpace(got) != repoURL {
		return "", fmt.Errorf("%s is not a mirror of this repository", mirror)
	}
	if err := fetchMirror(ctx, mirror, repoURL, cred); err != nil {
		return "", err
	}
	if packs, _ := filepath.Glob(filepath.Join(mirror, "objects", "pack", "*.pack")); len(packs) > maxCachePacks {
		// --geometric rolls small packs into larger ones keeping every
		// object of the packs it rolls (pack-objects --stdin-packs), so a
		// repack prunes nothing.
		if _, err := mirrorGit(ctx, mirror, nil, "-c", "repack.writeBitmaps=false", "repack", "--geometric=2", "-d", "-q"); err != nil {
			log.Warn("rolling up the git object cache's packs failed", "mirror", mirror, "err", err)
		}
	}
	return mirror, nil
}

// makeMirror builds a new mirror in a temporary sibling, renamed into place
// once complete, so no half-made mirror is ever used. Called under the
// mirror's lock, it first clears what a killed predecessor left.
func makeMirror(ctx context.Context, root, mirror, repoURL string, cred []string) error {
	base := filepath.Base(mirror)
	if old, err := filepath.Glob(filepath.Join(root, base+mirrorTmpInfix+"*")); err == nil {
		for _, d := range old {
			_ = os.RemoveAll(d)
		}
	}
	tmp, err := os.MkdirTemp(root, base+mirrorTmpInfix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if _, err := mirrorGit(ctx, root, nil, "init", "--quiet", "--bare", tmp); err != nil {
		return fmt.Errorf("create the mirror: %w", err)
	}
	for _, kv := range [][2]string{
		{cacheMarkerKey, repoURL},
		// Nothing removes an object from the mirror: no automatic gc or
		// maintenance, no reflogs; every fetch is kept as a pack.
		{"gc.auto", "0"}, {"maintenance.auto", "false"}, {"core.logAllRefUpdates", "false"},
		{"fetch.unpackLimit", "1"}, {"gc.pruneExpire", "never"}, {"gc.reflogExpireUnreachable", "never"},
	} {
		if _, err := mirrorGit(ctx, tmp, nil, "config", kv[0], kv[1]); err != nil {
			return fmt.Errorf("configure the mirror: %w", err)
		}
	}
	if err := fetchMirror(ctx, tmp, repoURL, cred); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o700); err != nil {
		return err
	}
	return os.Rename(tmp, mirror)
}

// fetchMirror fetches every branch and tag of repoURL into mirror, never
// deleting a ref (so the objects of a deleted or rewritten branch stay
// reachable, whatever runs in the mirror later).
func fetchMirror(ctx context.Context, mirror, repoURL string, cred []string) error {
	if _, err := mirrorGit(ctx, mirror, cred, "fetch", "--quiet", "--no-write-fetch-head", "--", repoURL, mirrorRefspec, mirrorTagRefspec); err != nil {
		return fmt.Errorf("update the mirror: %w", err)
	}
	return nil
}

// mirrorGit runs git in a mirror (or the cache folder) with the same safe
// settings as in a workspace and no automatic gc.
func mirrorGit(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	return inRepo(ctx, dir, env, append([]string{"-c", "gc.auto=0", "-c", "maintenance.auto=false"}, args...)...)
}

// setAside renames a suspect mirror out of the way (under its lock), so
// that the next Prepare makes a new one; the previous suspect, if any, is
// deleted. Clones never depend on a mirror once made, so renaming one a
// concurrent clone is reading fails only that clone, which then falls back.
func setAside(ctx context.Context, root, repoURL string) error {
	mirror := mirrorPath(root, repoURL)
	unlock, err := lockFile(ctx, mirror+lockSuffix, cacheLockWait, syscall.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.RemoveAll(mirror + suspectSuffix); err != nil {
		return err
	}
	return os.Rename(mirror, mirror+suspectSuffix)
}

// ownFolder checks that dir is a real folder (not a link) owned by this
// process's user and writable by no one else: anyone else able to write
// the cache could plant objects that a later clone takes as the
// repository's. With create, a missing dir is made (mode 0700).
func ownFolder(dir string, create bool) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("the git object cache folder %s is not an absolute path", dir)
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) && create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create the git object cache folder: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a folder", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is not owned by this process's user", dir)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %v)", dir, fi.Mode().Perm())
	}
	return nil
}

var errLockBusy = errors.New("the lock is held by another process")

// lockFile takes a flock(2) on path (made if missing), exclusive
// (syscall.LOCK_EX) or shared (LOCK_SH), waiting up to wait. On NFS (EFS) Linux turns flock into a whole-file POSIX lock,
// which NFSv4.1 servers keep for the client that holds it and release when
// its lease lapses, so a harness killed while updating blocks others for
// at most a lease period.
func lockFile(ctx context.Context, path string, wait time.Duration, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the cache lock: %w", err)
	}
	deadline := time.Now().Add(wait)
	for delay := 50 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock the cache: %w", err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, errLockBusy
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, galleyerr.E(galleyerr.Unavailable, ctx.Err())
		case <-time.After(delay):
		}
	}
}
