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
type Budget struct {
	PerPush, Total int64

	mu   sync.Mutex
	used int64
}

// NewBudget returns a budget of perPush bytes per push and total in all.
func NewBudget(perPush, total int64) *Budget { return &Budget{PerPush: perPush, Total: total} }

// Used returns the bytes of the pushes accepted so far.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// room is how much the next push may bring.
func (b *Budget) room() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(0, min(b.PerPush, b.Total-b.used))
}

// take counts n bytes of an accepted push, unless they no longer fit (a
// concurrent push took the room).
func (b *Budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.PerPush || b.used+n > b.Total {
		return false
	}
	b.used += n
	return true
}

func (b *Budget) refusal() string {
	return fmt.Sprintf("galley: this push is over the worker's push budget (%d bytes per push, %d in all; %d used): push less, or squash",
		b.PerPush, b.Total, b.Used())
}

// spoolPack reads the rest of a push into an unlinked temporary file, at
// most limit bytes: over the limit it reports false, having read (and
// dropped) the rest, so that the pusher reads the verdict.
func spoolPack(r io.Reader, limit int64) (*os.File, int64, bool, error) {
	f, err := os.CreateTemp("", "galley-push-*")
	if err != nil {
		return nil, 0, false, err
	}
	_ = os.Remove(f.Name())
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	if err != nil {
		f.Close()
		return nil, 0, false, err
	}
	if n > limit {
		f.Close()
		_, _ = io.Copy(io.Discard, r)
		return nil, n, false, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, false, err
	}
	return f, n, true, nil
}
