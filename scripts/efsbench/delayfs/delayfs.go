// Package delayfs mounts a FUSE passthrough of a local directory that
// sleeps before answering each operation, to stand in for a network file
// system such as EFS on a machine whose kernel has no NFS client and no
// netem. Operations fall in three classes: lookups and reads (the kernel
// asks for a name, attributes, data or a directory listing), writes (the
// operation changes the file system: data, a new or removed name,
// attributes), and the free ones the kernel sends without waiting on the
// answer or that an NFS client answers locally (forget, release, flush).
//
// Requests are served concurrently, as a network file system's are, so
// delays of parallel operations overlap.
package delayfs

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Delays are the latencies added to each operation of a class.
type Delays struct {
	// Read is added to each lookup, attribute read, open, data read and
	// directory read.
	Read time.Duration
	// Write is added to each operation that changes the file system.
	Write time.Duration
}

// Counts are the operations a mount has answered, by class.
type Counts struct {
	Reads, Writes int64
}

// Sub is c minus an earlier snapshot: the operations in between.
func (c Counts) Sub(earlier Counts) Counts {
	return Counts{Reads: c.Reads - earlier.Reads, Writes: c.Writes - earlier.Writes}
}

// Mount is a mounted delaying file system.
type Mount struct {
	server *fuse.Server
	fs     *delaying
}

type options struct {
	cacheTimeout time.Duration
}

// Option is a setting of Mount.
type Option func(*options)

// WithCacheTimeout sets how long the kernel may keep a name or a file's
// attributes before asking again (default 1 s, go-fuse's own default;
// Linux's NFS client keeps attributes 3 to 60 s, directories 30 to 60 s).
func WithCacheTimeout(d time.Duration) Option {
	return func(o *options) { o.cacheTimeout = d }
}

// New mounts at mountpoint a passthrough of the directory backing that
// adds d to every operation.
func New(mountpoint, backing string, d Delays, opts ...Option) (*Mount, error) {
	o := options{cacheTimeout: time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, fmt.Errorf("delayfs: loopback of %s: %w", backing, err)
	}
	timeout := o.cacheTimeout
	fsOpts := &fs.Options{
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		MountOptions: fuse.MountOptions{
			FsName: "delayfs",
			Name:   "delayfs",
			// Root may mount without the setuid fusermount helper.
			DirectMount: true,
			// Kernel passthrough would send reads and writes of an open
			// file straight to the backing file, past the delays.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
	}
	dfs := &delaying{RawFileSystem: fs.NewNodeFS(root, fsOpts), delays: d}
	server, err := fuse.NewServer(dfs, mountpoint, &fsOpts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("delayfs: mount at %s: %w", mountpoint, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("delayfs: mount at %s: %w", mountpoint, err)
	}
	return &Mount{server: server, fs: dfs}, nil
}

// Counts returns the operations answered so far.
func (m *Mount) Counts() Counts {
	return Counts{Reads: m.fs.reads.Load(), Writes: m.fs.writes.Load()}
}

// Unmount unmounts the file system and waits for its server to stop.
func (m *Mount) Unmount() error {
	if err := m.server.Unmount(); err != nil {
		return fmt.Errorf("delayfs: unmount: %w", err)
	}
	m.server.Wait()
	return nil
}

// delaying wraps go-fuse's node file system, sleeping in each operation
// before passing it on. Operations it does not name (forget, release,
// flush, ioctl, init) pass through undelayed.
type delaying struct {
	fuse.RawFileSystem
	delays        Delays
	reads, writes atomic.Int64
}

func (f *delaying) read() {
	f.reads.Add(1)
	time.Sleep(f.delays.Read)
}

func (f *delaying) write() {
	f.writes.Add(1)
	time.Sleep(f.delays.Write)
}

// Lookups and reads.

func (f *delaying) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	f.read()
	return f.RawFileSystem.Lookup(c, h, name, out)
}

func (f *delaying) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.read()
	return f.RawFileSystem.GetAttr(c, in, out)
}

func (f *delaying) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	f.read()
	return f.RawFileSystem.Statx(c, in, out)
}

func (f *delaying) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	f.read()
	return f.RawFileSystem.Access(c, in)
}

func (f *delaying) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	f.read()
	return f.RawFileSystem.Readlink(c, h)
}

func (f *delaying) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	f.read()
	return f.RawFileSystem.GetXAttr(c, h, attr, dest)
}

func (f *delaying) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	f.read()
	return f.RawFileSystem.ListXAttr(c, h, dest)
}

func (f *delaying) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.read()
	return f.RawFileSystem.Open(c, in, out)
}

func (f *delaying) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	f.read()
	return f.RawFileSystem.Read(c, in, buf)
}

func (f *delaying) Lseek(c <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	f.read()
	return f.RawFileSystem.Lseek(c, in, out)
}

func (f *delaying) GetLk(c <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	f.read()
	return f.RawFileSystem.GetLk(c, in, out)
}

func (f *delaying) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	f.read()
	return f.RawFileSystem.OpenDir(c, in, out)
}

func (f *delaying) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	f.read()
	return f.RawFileSystem.ReadDir(c, in, out)
}

func (f *delaying) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	f.read()
	return f.RawFileSystem.ReadDirPlus(c, in, out)
}

func (f *delaying) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	f.read()
	return f.RawFileSystem.StatFs(c, h, out)
}

// Writes.

func (f *delaying) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.write()
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f *delaying) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Mknod(c, in, name, out)
}

func (f *delaying) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Mkdir(c, in, name, out)
}

func (f *delaying) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.write()
	return f.RawFileSystem.Unlink(c, h, name)
}

func (f *delaying) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	f.write()
	return f.RawFileSystem.Rmdir(c, h, name)
}

func (f *delaying) Rename(c <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	f.write()
	return f.RawFileSystem.Rename(c, in, oldName, newName)
}

func (f *delaying) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Link(c, in, name, out)
}

func (f *delaying) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Symlink(c, h, target, name, out)
}

func (f *delaying) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	f.write()
	return f.RawFileSystem.SetXAttr(c, in, attr, data)
}

func (f *delaying) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	f.write()
	return f.RawFileSystem.RemoveXAttr(c, h, attr)
}

func (f *delaying) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Create(c, in, name, out)
}

func (f *delaying) Tmpfile(c <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	f.write()
	return f.RawFileSystem.Tmpfile(c, in, out)
}

func (f *delaying) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	f.write()
	return f.RawFileSystem.Write(c, in, data)
}

// Writev is tried first for each WRITE; on ENOSYS the server calls Write,
// which then counts the operation, so an unanswered Writev is free.
func (f *delaying) Writev(c <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := f.RawFileSystem.Writev(c, in, data)
	if st == fuse.ENOSYS {
		return n, st
	}
	f.write()
	return n, st
}

func (f *delaying) CopyFileRange(c <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	f.write()
	return f.RawFileSystem.CopyFileRange(c, in)
}

func (f *delaying) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.write()
	return f.RawFileSystem.Fsync(c, in)
}

func (f *delaying) FsyncDir(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.write()
	return f.RawFileSystem.FsyncDir(c, in)
}

func (f *delaying) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	f.write()
	return f.RawFileSystem.Fallocate(c, in)
}

func (f *delaying) SetLk(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	f.write()
	return f.RawFileSystem.SetLk(c, in)
}

func (f *delaying) SetLkw(c <-chan struct{}, in *fuse.LkIn) fuse.Status {
	f.write()
	return f.RawFileSystem.SetLkw(c, in)
}
