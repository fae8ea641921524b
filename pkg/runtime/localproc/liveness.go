//go:build unix

package localproc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// reapEvery is how often the reaper looks when no SIGCHLD arrives.
const reapEvery = time.Second

// Liveness reports Live while the harness process runs, Exited once it has
// ended, and Unknown for a handle this data directory never started.
func (r *Runtime) Liveness(ctx context.Context, handle string) (service.Liveness, error) {
	const op = galleyerr.Op("localproc.liveness")
	if err := checkHandle(op, handle); err != nil {
		return service.LivenessUnknown, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w, err := r.lookupLocked(handle)
	switch {
	case err != nil:
		return service.LivenessUnknown, galleyerr.E(op, err)
	case w == nil:
		return service.LivenessUnknown, nil
	case r.runningLocked(w):
		return service.LivenessLive, nil
	}
	return service.LivenessExited, nil
}

// Livenesses answers Liveness for many handles under one hold of the lock,
// mostly from memory: a harness this Runtime started is its child, whose
// end the reaper learns of (SIGCHLD, or its tick) and records, so it is
// live until recorded exited; an exit once seen is final. Only a harness
// this Runtime did not start (an earlier server's) is verified with its
// /proc record each time, as nothing would tell of its end, and a handle
// not yet in memory is read from disk once. A malformed handle is Unknown.
// After Close, with no reaper, children are checked as Liveness does.
func (r *Runtime) Livenesses(ctx context.Context, handles []string) (map[string]service.Liveness, error) {
	const op = galleyerr.Op("localproc.livenesses")
	out := make(map[string]service.Liveness, len(handles))
	var first error
	failed := 0
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range handles {
		if !handleRE.MatchString(h) {
			out[h] = service.LivenessUnknown
			continue
		}
		w, err := r.lookupLocked(h)
		switch {
		case err != nil:
			// Left out of the map: unverifiable.
			if failed++; first == nil {
				first = err
			}
		case w == nil:
			out[h] = service.LivenessUnknown
		case w.exited:
			out[h] = service.LivenessExited
		case w.child && !r.closed:
			out[h] = service.LivenessLive
		case r.runningLocked(w):
			out[h] = service.LivenessLive
		default:
			out[h] = service.LivenessExited
		}
	}
	if failed > 0 {
		return out, galleyerr.E(op, strconv.Itoa(failed)+" workers unreadable", first)
	}
	return out, nil
}

// WatchInherited watches, every interval until Close, the harnesses an
// earlier server of this data directory started: one that ends (or had
// ended while no server ran) is noticed as if this runtime had started it,
// so its WithOnExit callback settles a worker whose harness ended without
// a report. Only workers whose token file is still there are watched: it
// is deleted once an exit has been noticed, by this runtime or an earlier
// one. Call it once the callback can act (the server's service exists).
func (r *Runtime) WatchInherited(interval time.Duration) {
	ents, err := os.ReadDir(r.workersDir())
	if err != nil {
		r.log.Error("cannot list workers", "err", err)
		return
	}
	var watched []*worker
	r.mu.Lock()
	for _, e := range ents {
		h := e.Name()
		if !handleRE.MatchString(h) {
			continue
		}
		if _, err := os.Stat(r.tokenFile(h)); err != nil {
			continue
		}
		if w, err := r.lookupLocked(h); err == nil && w != nil && !w.child && !w.stopping {
			watched = append(watched, w)
		}
	}
	r.mu.Unlock()
	if len(watched) == 0 {
		return
	}
	r.log.Info("watching the harnesses an earlier server started", "workers", len(watched))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for len(watched) > 0 {
			r.mu.Lock()
			live := watched[:0]
			for _, w := range watched {
				if r.runningLocked(w) {
					live = append(live, w)
				}
			}
			watched = live
			r.mu.Unlock()
			select {
			case <-r.done:
				return
			case <-t.C:
			}
		}
	}()
}

// runningLocked reports whether w's harness process runs, reaping it if it
// ended as a child of this process.
func (r *Runtime) runningLocked(w *worker) bool {
	if w.exited {
		return false
	}
	if w.child {
		res, ws := reap(w.pid)
		switch res {
		case reapRunning:
			return true
		case reapExited:
			r.recordExit(w, describe(ws))
		}
		r.markExited(w)
		return false
	}
	info, ok := procStat(w.pid)
	if !ok || (w.start != "" && info.start != w.start) {
		r.markExited(w)
		return false
	}
	if info.zombie {
		// Ended; if an earlier Runtime of this very process started it,
		// reap it here. The start time matched, so the pid is the worker's.
		if res, ws := reap(w.pid); res == reapExited {
			r.recordExit(w, describe(ws))
		}
		r.markExited(w)
		return false
	}
	return true
}

// markExited notes that w's harness has ended for good, and deletes its
// token file: the credential should not outlive its worker on disk.
func (r *Runtime) markExited(w *worker) {
	if !w.exited && r.onExit != nil {
		// Outside the lock: the callback may call back into the runtime.
		go r.onExit(w.handle)
	}
	w.exited = true
	if err := os.Remove(r.tokenFile(w.handle)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Error("cannot delete a worker's token file", "handle", w.handle, "err", err)
	}
	if err := cutLog(r.logFile(w.handle), r.logLimit); err != nil {
		r.log.Error("cannot cut a worker's log to its budget", "handle", w.handle, "err", err)
	}
}

// recordExit notes how the harness ended, for operators.
func (r *Runtime) recordExit(w *worker, how string) {
	if err := writeAtomic(filepath.Join(r.workerDir(w.handle), "exit"), []byte(how+"\n")); err != nil {
		r.log.Error("cannot record a worker's exit", "handle", w.handle, "err", err)
	}
	r.log.Info("worker exited", "handle", w.handle, "pid", w.pid, "how", how)
}

// reapLoop reaps this Runtime's harnesses as they end, so none lingers as a
// zombie when nobody asks for its liveness.
func (r *Runtime) reapLoop() {
	defer r.wg.Done()
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-r.sigchld:
		case <-t.C:
		}
		r.mu.Lock()
		for _, w := range r.workers {
			if w.child && !w.exited {
				r.runningLocked(w)
			}
		}
		r.mu.Unlock()
	}
}
