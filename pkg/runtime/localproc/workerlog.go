//go:build unix

package localproc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/galley-run/galley/pkg/harness"
)

// logFile is the harness's stdout and stderr.
func (r *Runtime) logFile(h string) string { return filepath.Join(r.workerDir(h), "harness.log") }

// cutLog cuts a log past limit to it, ending with harness.CutLine. The
// harness keeps its own log within the budget; only an agent that wrote
// around it (one left unconfined, which can open the harness's stderr)
// leaves more, and only until its harness ends.
func cutLog(path string, limit int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= limit {
		return err
	}
	line := harness.CutLine(limit)
	keep := limit - int64(len(line))
	if err := f.Truncate(keep); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(line), keep); err != nil {
		return err
	}
	return f.Close()
}
