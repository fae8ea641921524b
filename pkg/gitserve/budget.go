package gitserve

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Budget bounds the bytes pushes bring through one gate: PerPush of one
// push's pack and Total over every push (a force-push leaves the packs it
// replaced in the house repository until git collects them, so every
// accepted push counts, referenced or not). It is safe for concurrent use.
//
// A push reserves its room before a byte of its pack is read (reserve):
// PerPush, or less when the total, beside the pushes accepted and the
// reservations of those still in flight, leaves less. Its pack is spooled
// to disk up to that reservation and no further, so the disk the pushes in
// flight hold together is never more than the budget has left.
type Budget struct {
	PerPush, Total int64

	mu   sync.Mutex
	used int64 // bytes of the pushes accepted
	held int64 // bytes reserved by the pushes in flight
}

// NewBudget returns a budget of perPush bytes per push and total in all.
func NewBudget(perPush, total int64) *Budget { return &Budget{PerPush: perPush, Total: total} }

// Used returns the bytes of the pushes accepted so far.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Held returns the bytes reserved by the pushes in flight: the most their
// packs may spool to disk.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// reserve takes the room of one push, before its pack is read: 0 when the
// budget has none left.
func (b *Budget) reserve() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := max(0, min(b.PerPush, b.Total-b.used-b.held))
	b.held += n
	return n
}

// settle ends a reservation of reserved bytes: accepted of them count as
// used (0 for a push refused or cut off), the rest is free again.
func (b *Budget) settle(reserved, accepted int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= reserved
	b.used += min(accepted, reserved)
}

func (b *Budget) refusal() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held > 0 {
		return fmt.Sprintf("galley: this push is over the worker's push budget (%d bytes per push, %d in all; %d used, %d held by pushes in flight): push less, squash, or push again when they have ended",
			b.PerPush, b.Total, b.used, b.held)
	}
	return fmt.Sprintf("galley: this push is over the worker's push budget (%d bytes per push, %d in all; %d used): push less, or squash",
		b.PerPush, b.Total, b.used)
}

// spoolPack reads the rest of a push into an unlinked temporary file in
// dir ("": the system's), at most limit bytes: the file never holds more.
// A pack over the limit is reported as not fitting, its file dropped at
// once and the rest of it left unread.
func spoolPack(r io.Reader, limit int64, dir string) (*os.File, int64, bool, error) {
	f, err := os.CreateTemp(dir, "galley-push-*")
	if err != nil {
		return nil, 0, false, err
	}
	_ = os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, limit))
	if err != nil {
		f.Close()
		return nil, n, false, err
	}
	// One byte more is over the limit: it is read into memory, not the file.
	var more [1]byte
	switch m, err := io.ReadFull(r, more[:]); {
	case m > 0:
		f.Close()
		return nil, n + 1, false, nil
	case err != io.EOF:
		f.Close()
		return nil, n, false, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, false, err
	}
	return f, n, true, nil
}
