package harness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/galley-run/galley/pkg/contract"
)

// DefaultLogLimit is the worker's log budget when contract.EnvLogLimit is
// unset: far more than a worker's own lines, little beside a machine's
// disk.
const DefaultLogLimit = 16 << 20

// LogLimitFromEnv reads contract.EnvLogLimit: DefaultLogLimit when unset,
// an error when it is not a positive number of bytes.
func LogLimitFromEnv(getenv func(string) string) (int64, error) {
	v := strings.TrimSpace(getenv(contract.EnvLogLimit))
	if v == "" {
		return DefaultLogLimit, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < int64(minLogLimit) {
		return 0, fmt.Errorf("%s must be a number of bytes, at least %d", contract.EnvLogLimit, minLogLimit)
	}
	return n, nil
}

// minLogLimit leaves room for the line that says the log was cut.
const minLogLimit = 4096

// CutLine is the last line of a log cut at its budget: JSON like the
// harness's other lines, so that the agent's operator (and a log query)
// reads why the log stops.
func CutLine(limit int64) string {
	return fmt.Sprintf(`{"level":"WARN","msg":"log cut: this worker used its log budget of %d bytes (%s); later lines are dropped"}`+"\n",
		limit, contract.EnvLogLimit)
}

// CappedWriter passes whole writes to w until the next would take the total
// past limit, less room for CutLine; then it writes CutLine once and drops
// every later write, reporting each as written so that the harness and
// its agent go on. Each slog line is one write, so no line is cut in two.
func CappedWriter(w io.Writer, limit int64) io.Writer {
	return &cappedWriter{w: w, room: limit - int64(len(CutLine(limit))), limit: limit}
}

type cappedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	room  int64
	limit int64
	cut   bool
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return len(p), nil
	}
	if int64(len(p)) > c.room {
		c.cut = true
		_, err := io.WriteString(c.w, CutLine(c.limit))
		return len(p), err
	}
	c.room -= int64(len(p))
	return c.w.Write(p)
}
