// Package logbuf buffers a process's log lines and writes them out together,
// so a busy server pays one write system call per interval instead of one
// per request line. Lines at warning level and above are written at once,
// as is everything on Close, so what matters reaches the log even when the
// process is about to exit; a SIGKILL loses at most one interval of
// informational lines, never state (the store holds that).
package logbuf

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval bounds how long a line waits in the buffer.
const DefaultInterval = 100 * time.Millisecond

// Writer is an io.Writer that holds what is written for at most its
// interval. It is safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	buf    *bufio.Writer
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// New returns a Writer over w that flushes every interval (DefaultInterval
// when interval <= 0), and whenever 64 KiB are waiting.
func New(w io.Writer, interval time.Duration) *Writer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	b := &Writer{buf: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop(interval)
	return b
}

func (b *Writer) loop(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = b.Flush()
		case <-b.stop:
			return
		}
	}
}

// Write buffers p; after Close it writes through.
func (b *Writer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if err == nil && b.closed {
		err = b.buf.Flush()
	}
	return n, err
}

// Flush writes out what is waiting.
func (b *Writer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Buffered() == 0 {
		return nil
	}
	return b.buf.Flush()
}

// Close stops the interval flushes and writes out what is waiting; later
// writes go straight through. It does not close the underlying writer.
func (b *Writer) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Flush()
}

// NewJSONLogger returns a JSON slog.Logger writing through b that flushes
// b after every record at warning level or above.
func NewJSONLogger(b *Writer, opts *slog.HandlerOptions) *slog.Logger {
	return slog.New(flushOnWarn{Handler: slog.NewJSONHandler(b, opts), w: b})
}

// flushOnWarn writes out the buffer after a warning or an error, so the
// lines that explain a failure never wait for the interval.
type flushOnWarn struct {
	slog.Handler
	w *Writer
}

func (h flushOnWarn) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := h.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h flushOnWarn) WithAttrs(as []slog.Attr) slog.Handler {
	return flushOnWarn{Handler: h.Handler.WithAttrs(as), w: h.w}
}

func (h flushOnWarn) WithGroup(name string) slog.Handler {
	return flushOnWarn{Handler: h.Handler.WithGroup(name), w: h.w}
}
