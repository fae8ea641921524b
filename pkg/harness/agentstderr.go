package harness

import (
	"bytes"
	"log/slog"
	"sync"
)

// lineLogger logs the agent's stderr one line at a time, so that the
// harness's own stderr stays JSON lines.
type lineLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	buf  []byte
	tail tailLines // the last lines, for the reason of an exit without an outcome
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.emit(l.buf)
		l.buf = nil
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

func (l *lineLogger) emit(line []byte) {
	s := truncate(string(bytes.TrimRight(line, "\r")), 4096)
	l.tail.add(s)
	l.log.Info("agent stderr", "line", s)
}

// stderrTail is the last lines the agent wrote to stderr, with every
// secret the harness holds, and anything shaped like a credential,
// redacted.
func (h *harness) stderrTail() string {
	if h.stderr == nil {
		return ""
	}
	h.stderr.mu.Lock()
	tail := h.stderr.tail.text()
	h.stderr.mu.Unlock()
	return redactSecrets(tail, h.secrets()...)
}
