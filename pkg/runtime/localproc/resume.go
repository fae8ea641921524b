//go:build unix

package localproc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Resume starts the harness again for parking n of spec.Handle
// (service.Resumer, docs/parking.md), with spec.Token its new credential,
// in the worker's folder and workspace as before: once per handle and
// parking, whichever server of the data directory asks. started is true
// when this call started it, false when an earlier one had (the service
// then asks Liveness whether that harness still runs). The harness that
// parked must have ended first (it reported and is exiting): while it
// runs, Resume answers Unavailable, and the service asks again when the
// runtime's exit callback tells it that harness ended. A worker that was
// stopped (cancelled or released) is never resumed.
//
// The claim is the file resume-<n> in the worker's folder, made before the
// spawn and given back when the spawn fails. A server that dies between
// the two leaves a claim nothing runs for: Resume answers that it had
// started, and Liveness reads the worker's compute as exited, so a later
// WorkerExited settles it failed. Nothing on the local shape calls that by
// itself (housekeeping, SettleLost, runs on AWS; docs/parking.md, Known
// limits): such a worker stays starting until it is cancelled. It is lost,
// but never run twice.
func (r *Runtime) Resume(ctx context.Context, spec service.WorkerSpec, n int) (started bool, err error) {
	const op = galleyerr.Op("localproc.resume")
	if err := checkHandle(op, spec.Handle); err != nil {
		return false, err
	}
	switch {
	case spec.Token == "":
		return false, galleyerr.E(op, galleyerr.Invalid, "no worker token")
	case n < 1:
		return false, galleyerr.E(op, galleyerr.Invalid, "a parking's number is at least 1")
	}
	if _, ok := inside(r.WorkspacesDir(), filepath.Clean(spec.WorkspacePath)); !filepath.IsAbs(spec.WorkspacePath) || !ok {
		return false, galleyerr.E(op, galleyerr.Invalid, "workspace path "+strconv.Quote(spec.WorkspacePath)+" is not inside "+r.WorkspacesDir())
	}
	if err := ctx.Err(); err != nil {
		return false, galleyerr.E(op, galleyerr.Unavailable, err)
	}
	h := spec.Handle
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false, galleyerr.E(op, galleyerr.Unavailable, "runtime closed")
	}
	claim := filepath.Join(r.workerDir(h), "resume-"+strconv.Itoa(n))
	if _, err := os.Lstat(claim); err == nil {
		return false, nil // this parking's harness was started
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, galleyerr.E(op, err)
	}
	w, err := r.lookupLocked(h)
	switch {
	case err != nil:
		return false, galleyerr.E(op, err)
	case w == nil:
		return false, galleyerr.E(op, galleyerr.NotFound, "worker "+strconv.Quote(h)+" was never started here")
	case w.stopping:
		return false, galleyerr.E(op, galleyerr.Invalid, "worker "+strconv.Quote(h)+" was stopped")
	case r.runningLocked(w):
		return false, galleyerr.E(op, galleyerr.Unavailable, "the harness that parked worker "+strconv.Quote(h)+" has not ended yet")
	}
	if _, err := os.Lstat(r.stopFile(h)); !errors.Is(err, fs.ErrNotExist) {
		return false, galleyerr.E(op, galleyerr.Invalid, "worker "+strconv.Quote(h)+" was stopped")
	}
	if err := writeNew(claim, []byte(strconv.Itoa(n)+"\n")); err != nil {
		return false, galleyerr.E(op, err)
	}
	// The parked harness's files make way for the new one's: its token
	// went with its exit, its launch record is written again.
	for _, f := range []string{r.tokenFile(h), filepath.Join(r.workerDir(h), "meta.json")} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(claim)
			return false, galleyerr.E(op, err)
		}
	}
	nw, err := r.spawn(spec)
	if err != nil {
		_ = os.Remove(claim)
		_ = os.Remove(r.tokenFile(h))
		return false, galleyerr.E(op, "cannot start the harness again", err)
	}
	r.workers[h] = nw
	r.log.Info("worker resumed", "handle", h, "parking", n, "pid", nw.pid)
	return true, nil
}
