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
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/safepath"
)

// RestoreOption is an optional setting of Restore.
type RestoreOption func(*restoreConfig)

type restoreConfig struct {
	owner    bool
	uid, gid int
}

// AsOwner gives every entry Restore writes, and the worktree's folder, to
// uid:gid (the agent's): each is created by the process and given away on
// its own descriptor (or, for a folder or a link, without following it)
// before anything is written in it. It needs the right to chown (root);
// without it Restore fails and the worktree is left as it was.
func AsOwner(uid, gid int) RestoreOption {
	return func(c *restoreConfig) { c.owner, c.uid, c.gid = true, uid, gid }
}

// Restore puts the archive r (as Save writes it) into the worktree at dir:
// afterwards dir holds the archive's entries, and its own .git folder if it
// had one; nothing else of what it held is kept. dir's parent must be
// closed to the agent (galley's folder of workspaces is): the restore is
// staged there.
//
// The archive is the agent's, so hostile. Restore writes it into a new
// folder beside dir, closed to everyone else (mode 0700, the process's),
// through an os.Root, and refuses (Invalid, naming the entry by its number
// and never its name or contents) an entry that is not a plain relative
// path, leaves the worktree (`..`, an absolute path), names the worktree's
// .git, comes before its folder or beneath a link or a file, repeats a
// name, is a hard link, a device, a fifo or anything but a folder, a file
// or a link, has a setuid, setgid or sticky bit, or has a name longer than
// Linux allows. It stops (TooLarge) before the entry that would take it
// past limits, and cuts the decompressed stream where it goes past its
// budget (the contents declared so far and a little for each header), so
// a compression bomb costs no more than its budget. A truncated or corrupt
// archive, or one not of Save's format, is Malformed. On any failure the
// staging folder is removed and dir is left as it was.
//
// Only then is dir's .git moved into the restored folder and the folder
// put in dir's place, by renames in dir's parent; the folder takes dir's
// permission bits (0700 for a new one). A Restore interrupted there (the
// process killed) is finished or undone by the next Restore of dir.
func Restore(ctx context.Context, r io.Reader, dir string, limits Limits, opts ...RestoreOption) (Stats, error) {
	var cfg restoreConfig
	for _, o := range opts {
		o(&cfg)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Stats{}, err
	}
	base := filepath.Base(dir)
	parent, err := safepath.Open(filepath.Dir(dir))
	if err != nil {
		return Stats{}, galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot open the worktree's folder", err)
	}
	defer parent.Close()
	if err := recoverSwap(parent, base); err != nil {
		return Stats{}, err
	}
	staging := stagingPrefix(base) + randomHex()
	if err := parent.Mkdir(staging, 0o700); err != nil {
		return Stats{}, galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot make the staging folder", err)
	}
	done := false
	defer func() {
		if !done {
			_ = parent.RemoveAll(staging)
		}
	}()
	root, err := os.OpenRoot(filepath.Join(parent.Name(), staging))
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	if err := sameAsListed(parent, staging, root); err != nil {
		return Stats{}, err
	}
	x := &extractor{ctx: ctx, root: root, cfg: cfg, limits: limits.orDefault(), kinds: map[string]byte{".": tar.TypeDir}, buf: make([]byte, 32<<10)}
	if err := x.extract(r); err != nil {
		return x.stats, err
	}
	if err := x.finishTop(parent, base); err != nil {
		return x.stats, err
	}
	if err := swapIn(parent, base, staging); err != nil {
		return x.stats, err
	}
	done = true
	return x.stats, nil
}

// sameAsListed checks that root is the folder staging in parent (no one
// but the process could have put another there, since the parent is
// closed to the agent; this says so).
func sameAsListed(parent *safepath.Dir, staging string, root *os.Root) error {
	st, err := parent.Lstat(staging)
	if err != nil {
		return err
	}
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	if rs, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(rs.Dev) != uint64(st.Dev) || rs.Ino != st.Ino {
		return errors.New("snapshot: the staging folder changed under the restore")
	}
	return nil
}

type extractor struct {
	ctx    context.Context
	root   *os.Root
	cfg    restoreConfig
	limits Limits
	stream *budgetReader
	stats  Stats
	// kinds holds the type of every entry written so far, by path: an
	// entry's folder must be one of them, and a folder (never a link or a
	// file), so nothing is written through a link the archive made.
	kinds map[string]byte
	dirs  []dirEntry // folders, whose modes and times are set last
	buf   []byte     // for copying the files' contents
}

// writerOnly hides all but Write.
type writerOnly struct{ w io.Writer }

func (w writerOnly) Write(p []byte) (int, error) { return w.w.Write(p) }

type dirEntry struct {
	name  string
	mode  os.FileMode
	mtime time.Time
}

func (x *extractor) extract(r io.Reader) error {
	zr, err := zstd.NewReader(ctxReader{x.ctx, r}, zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(maxWindowSize), zstd.WithDecoderLowmem(true))
	if err != nil {
		return malformed("not a zstd stream", err)
	}
	defer zr.Close()
	x.stream = &budgetReader{r: zr, limit: 2 * streamAllowance}
	defer func() { x.stats.Stream = x.stream.n }()
	tr := tar.NewReader(x.stream)
	hdr, err := tr.Next()
	if err != nil {
		return x.readErr("the archive's first header", err)
	}
	if hdr.Typeflag != tar.TypeXGlobalHeader || hdr.PAXRecords[paxVersion] != formatVersion {
		return malformed("not a galley snapshot of format "+formatVersion, nil)
	}
	for entry := 1; ; entry++ {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		x.stream.limit += streamAllowance
		hdr, err := tr.Next()
		if err != nil {
			return x.readErr(fmt.Sprintf("entry %d's header", entry), err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			return x.end(hdr)
		}
		if err := x.entry(entry, hdr, tr); err != nil {
			return err
		}
	}
}

// readErr says what a failed read of the archive means.
func (x *extractor) readErr(what string, err error) error {
	switch {
	case x.ctx.Err() != nil:
		return x.ctx.Err()
	case errors.Is(err, errStreamBudget):
		return tooLarge("snapshot.restore", fmt.Sprintf("%s goes past the archive's stream budget (%d bytes read)", what, x.stream.n))
	case errors.Is(err, io.EOF):
		return malformed("the archive ends before its last header (truncated)", nil)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return malformed("the archive is cut short, in "+what+" (truncated or corrupt)", nil)
	case errors.Is(err, tar.ErrInsecurePath):
		return refusedPath(what)
	default:
		return malformed("cannot read "+what, err)
	}
}

func refusedPath(what string) error {
	return galleyerr.E(galleyerr.Invalid, galleyerr.Op("snapshot.restore"), what+" names a path out of the worktree")
}

// end checks the last header's counts, and that nothing but the tar's end
// (zeros) follows it: reading to the end of the zstd stream also checks
// its checksum.
func (x *extractor) end(hdr *tar.Header) error {
	if hdr.PAXRecords[paxEntries] != strconv.Itoa(x.stats.entries()) || hdr.PAXRecords[paxBytes] != strconv.FormatInt(x.stats.Bytes, 10) {
		return malformed("the archive's last header does not count what it holds", nil)
	}
	var buf [4096]byte
	for {
		n, err := x.stream.Read(buf[:])
		for _, b := range buf[:n] {
			if b != 0 {
				return malformed("the archive holds data after its end", nil)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return x.readErr("the archive's end", err)
		}
	}
	return x.finishDirs()
}

// checkName answers hdr's path, or why it is refused.
func checkName(hdr *tar.Header) (string, string) {
	name := hdr.Name
	if hdr.Typeflag == tar.TypeDir {
		name = strings.TrimSuffix(name, "/")
	}
	switch {
	case name == "":
		return "", "an empty name"
	case len(name) > maxPathLen:
		return "", fmt.Sprintf("a name longer than %d bytes", maxPathLen)
	case strings.HasPrefix(name, "/"):
		return "", "an absolute path"
	case strings.ContainsRune(name, 0):
		return "", "a name with a NUL byte"
	}
	parts := strings.Split(name, "/")
	for _, p := range parts {
		if p == ".." {
			return "", "a path out of the worktree (..)"
		}
	}
	for _, p := range parts {
		switch {
		case p == "" || p == ".":
			return "", "a name that is not a plain relative path"
		case len(p) > maxComponentLen:
			return "", fmt.Sprintf("a name with a component longer than %d bytes", maxComponentLen)
		}
	}
	if parts[0] == ".git" {
		return "", "a path in the worktree's .git, which a restore keeps"
	}
	return name, ""
}

// entry writes one entry of the archive, or refuses it before writing.
func (x *extractor) entry(entry int, hdr *tar.Header, tr *tar.Reader) error {
	name, why := checkName(hdr)
	if why != "" {
		return refused(entry, why)
	}
	if why := x.checkFolder(name); why != "" {
		return refused(entry, why)
	}
	if _, dup := x.kinds[name]; dup {
		return refused(entry, "a name the archive has already written")
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
	case tar.TypeLink:
		return refused(entry, "a hard link")
	case tar.TypeChar, tar.TypeBlock:
		return refused(entry, "a device")
	case tar.TypeFifo:
		return refused(entry, "a fifo")
	default:
		return refused(entry, fmt.Sprintf("an entry of type %q", hdr.Typeflag))
	}
	if hdr.Mode&^0o7777 != 0 || hdr.Mode < 0 {
		return refused(entry, "a mode with bits no file has")
	}
	if hdr.Mode&0o7000 != 0 {
		return refused(entry, "a setuid, setgid or sticky bit")
	}
	if x.stats.entries()+1 > x.limits.MaxEntries {
		return tooLarge("snapshot.restore", fmt.Sprintf("the archive holds more than %d entries", x.limits.MaxEntries))
	}
	var size int64
	switch hdr.Typeflag {
	case tar.TypeReg:
		size = hdr.Size
	case tar.TypeSymlink:
		if hdr.Linkname == "" || len(hdr.Linkname) > maxPathLen {
			return refused(entry, "a link with an empty or overlong target")
		}
		size = int64(len(hdr.Linkname))
	}
	if size < 0 || size > x.limits.MaxBytes-x.stats.Bytes {
		return tooLarge("snapshot.restore", fmt.Sprintf("the archive holds more than %d bytes", x.limits.MaxBytes))
	}
	x.stats.Bytes += size
	if hdr.Typeflag == tar.TypeReg {
		x.stream.limit += size
	}
	x.kinds[name] = hdr.Typeflag
	mode := os.FileMode(hdr.Mode) & os.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		x.stats.Dirs++
		return x.mkdir(name, mode, hdr.ModTime)
	case tar.TypeSymlink:
		x.stats.Links++
		return x.symlink(name, hdr.Linkname)
	default:
		x.stats.Files++
		return x.write(entry, name, mode, hdr, tr)
	}
}

// checkFolder answers why name's folder is refused, if it is: it must be a
// folder the archive made before; the nearest of its folders the archive
// made says why not.
func (x *extractor) checkFolder(name string) string {
	dir := path.Dir(name)
	if x.kinds[dir] == tar.TypeDir {
		return ""
	}
	for ; ; dir = path.Dir(dir) {
		switch x.kinds[dir] {
		case tar.TypeSymlink:
			return "a path beneath a symbolic link"
		case tar.TypeReg:
			return "a path beneath a file"
		case tar.TypeDir:
			return "a path whose folder is not in the archive before it"
		}
	}
}

func (x *extractor) chown(name string) error {
	if !x.cfg.owner {
		return nil
	}
	if err := x.root.Lchown(name, x.cfg.uid, x.cfg.gid); err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot give an entry to its owner", err)
	}
	return nil
}

func (x *extractor) mkdir(name string, mode os.FileMode, mtime time.Time) error {
	// 0700 while it is filled; its own mode is set once it is.
	if err := x.root.Mkdir(name, 0o700); err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot make a folder", err)
	}
	x.dirs = append(x.dirs, dirEntry{name, mode, mtime})
	return x.chown(name)
}

func (x *extractor) symlink(name, target string) error {
	if err := x.root.Symlink(target, name); err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot make a link", err)
	}
	return x.chown(name)
}

func (x *extractor) write(entry int, name string, mode os.FileMode, hdr *tar.Header, tr *tar.Reader) error {
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot make a file", err)
	}
	defer f.Close()
	if x.cfg.owner {
		if err := f.Chown(x.cfg.uid, x.cfg.gid); err != nil {
			return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot give a file to its owner", err)
		}
	}
	// CopyBuffer with a buffer of the restore's own: *os.File's ReadFrom
	// would take a new 32 KiB buffer for each file.
	n, err := io.CopyBuffer(writerOnly{f}, tr, x.buf)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return galleyerr.E(galleyerr.Op("snapshot.restore"), "cannot write a file", err)
		}
		return x.readErr(fmt.Sprintf("entry %d's contents", entry), err)
	}
	if n != hdr.Size {
		return malformed(fmt.Sprintf("entry %d's contents are shorter than it declares", entry), nil)
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	t := modTime(hdr.ModTime)
	return x.root.Chtimes(name, t, t)
}

// finishDirs sets the folders' modes and times, deepest first (a folder's
// time changes while entries are made in it).
func (x *extractor) finishDirs() error {
	for _, d := range slices.Backward(x.dirs) {
		if err := x.root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		t := modTime(d.mtime)
		if err := x.root.Chtimes(d.name, t, t); err != nil {
			return err
		}
	}
	return nil
}

// finishTop gives the restored folder the owner asked for and dir's
// permission bits (0700 when dir is new).
func (x *extractor) finishTop(parent *safepath.Dir, base string) error {
	mode := os.FileMode(0o700)
	if st, err := parent.Lstat(base); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		mode = os.FileMode(st.Mode) & os.ModePerm
	}
	if err := x.chown("."); err != nil {
		return err
	}
	return x.root.Chmod(".", mode)
}

// modTime is a tar header's time as Restore sets it.
func modTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0)
	}
	return t
}
