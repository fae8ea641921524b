package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Limits bound what one snapshot may hold. Save refuses a worktree past
// them (TooLarge), and Restore an archive, before it writes the entry that
// would go past them. A zero field takes DefaultLimits' value.
type Limits struct {
	// MaxBytes bounds the bytes of the files' contents and the links'
	// targets, summed (what a restore writes to disk).
	MaxBytes int64
	// MaxEntries bounds the files, folders and links.
	MaxEntries int
}

// DefaultLimits are the limits of a caller that sets none: room for a
// repository with its installed packages and build caches (a large
// node_modules holds some 100,000 files), well within a Fargate task's
// 20 GiB of ephemeral storage.
var DefaultLimits = Limits{MaxBytes: 4 << 30, MaxEntries: 500_000}

func (l Limits) orDefault() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	return l
}

// Stats count what a Save wrote or a Restore wrote.
type Stats struct {
	Files, Dirs, Links int
	// Bytes is the files' contents and the links' targets, summed.
	Bytes int64
	// Skipped counts what Save does not keep: sockets, fifos and devices.
	Skipped int
	// Stream is the bytes of the decompressed stream Restore read (its
	// budget's measure: see streamAllowance).
	Stream int64
}

func (s Stats) entries() int { return s.Files + s.Dirs + s.Links }

// The archive's format: a PAX global header first, naming the format and
// its version; the worktree's entries, each folder before what it holds;
// a PAX global header last, with the count of entries and bytes, so that a
// stream cut at an entry's end is told from a whole one.
const (
	paxVersion    = "GALLEY.snapshot.version"
	paxEntries    = "GALLEY.snapshot.entries"
	paxBytes      = "GALLEY.snapshot.bytes"
	formatVersion = "1"
)

// Names: Linux's PATH_MAX (4096, with its NUL) and NAME_MAX.
const (
	maxPathLen      = 4095
	maxComponentLen = 255
)

// zstd's window: the encoder's, and the most a decoder allocates for an
// archive's frame (a frame may declare a window of up to 3.75 TB; the
// decoder's default accepts 512 MiB).
const (
	windowSize    = 4 << 20
	maxWindowSize = 8 << 20
)

// streamAllowance is what Restore lets one entry's header take of the
// decompressed stream, beyond the contents it declares: a header block,
// PAX records for a name and a link target of PATH_MAX each, their
// padding, and a content's padding. The stream's budget is the declared
// contents of the entries accepted so far plus this for each entry read so
// far and two more, so it grows only as entries are accepted: a stream that
// goes past it (a flood of headers, a file longer than it declared, zeros
// after the end) is cut where it does.
const streamAllowance = 10 << 10

// Why a save or a restore failed, in the message of a galleyerr.Error.
func refused(entry int, why string) error {
	return galleyerr.E(galleyerr.Invalid, galleyerr.Op("snapshot.restore"),
		fmt.Sprintf("entry %d of the archive is refused: %s", entry, why))
}

func malformed(why string, err error) error {
	if err == nil {
		return galleyerr.E(galleyerr.Malformed, galleyerr.Op("snapshot.restore"), why)
	}
	return galleyerr.E(galleyerr.Malformed, galleyerr.Op("snapshot.restore"), why, err)
}

func tooLarge(op, why string) error {
	return galleyerr.E(galleyerr.TooLarge, galleyerr.Op(op), why)
}

// ctxReader fails its reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// errStreamBudget is budgetReader's error past its limit.
var errStreamBudget = errors.New("the archive's decompressed stream is longer than its budget")

// budgetReader reads at most limit bytes of r in all (limit may grow
// between reads), and counts them.
type budgetReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		return 0, errStreamBudget
	}
	if room := b.limit - b.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}
