//go:build unix

package localproc

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// stopPoll is how often a pending stop checks whether the group has ended.
const stopPoll = 50 * time.Millisecond

// Stop sends SIGTERM to the worker's process group and returns; SIGKILL
// follows after the grace unless the group has ended. The deadline is
// recorded first, so a server that restarts meanwhile still kills it.
// Stopping a stopped, exited or unknown worker succeeds.
func (r *Runtime) Stop(ctx context.Context, handle string) error {
	const op = galleyerr.Op("localproc.stop")
	if err := checkHandle(op, handle); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return galleyerr.E(op, galleyerr.Unavailable, "runtime closed")
	}
	w, err := r.lookupLocked(handle)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if w == nil || w.stopping || !r.groupAliveLocked(w) {
		return nil
	}
	deadline, err := r.stopDeadline(handle)
	if err != nil {
		return galleyerr.E(op, err)
	}
	w.stopping = true
	r.signalLocked(w, syscall.SIGTERM)
	r.log.Info("worker stopping", "handle", handle, "pid", w.pid, "deadline", deadline)
	r.wg.Add(1)
	go r.finishStop(w, deadline.Sub(r.clock.Now()))
	return nil
}

// stopRecord is the stop file's content.
type stopRecord struct {
	Requested time.Time `json:"requested"`
	Deadline  time.Time `json:"deadline"` // when SIGKILL is due
}

// stopDeadline returns the recorded SIGKILL deadline, recording one a grace
// from now if none was.
func (r *Runtime) stopDeadline(handle string) (time.Time, error) {
	if rec, ok := r.readStop(handle); ok {
		return rec.Deadline, nil
	}
	now := r.clock.Now().UTC()
	rec := stopRecord{Requested: now, Deadline: now.Add(r.grace)}
	b, err := json.Marshal(rec)
	if err != nil {
		return time.Time{}, err
	}
	return rec.Deadline, writeAtomic(r.stopFile(handle), append(b, '\n'))
}

func (r *Runtime) readStop(handle string) (stopRecord, bool) {
	var rec stopRecord
	b, err := os.ReadFile(r.stopFile(handle))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return stopRecord{}, false
	}
	return rec, true
}

// finishStop waits for w's group to end, or kills it at the deadline.
func (r *Runtime) finishStop(w *worker, wait time.Duration) {
	defer r.wg.Done()
	kill := time.NewTimer(max(wait, 0))
	defer kill.Stop()
	poll := time.NewTicker(stopPoll)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			r.mu.Lock()
			alive := r.groupAliveLocked(w)
			r.mu.Unlock()
			if !alive {
				r.log.Info("worker stopped", "handle", w.handle)
				return
			}
		case <-kill.C:
			r.mu.Lock()
			r.signalLocked(w, syscall.SIGKILL)
			r.mu.Unlock()
			r.log.Info("worker killed after its grace", "handle", w.handle)
			return
		}
	}
}

// resumeStops takes over the stops an earlier server recorded but may not
// have finished.
func (r *Runtime) resumeStops() {
	ents, err := os.ReadDir(r.workersDir())
	if err != nil {
		r.log.Error("cannot list workers", "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range ents {
		h := e.Name()
		rec, ok := r.readStop(h)
		if !ok || !handleRE.MatchString(h) {
			continue
		}
		w, err := r.lookupLocked(h)
		if err != nil || w == nil || !r.groupAliveLocked(w) {
			continue
		}
		w.stopping = true
		r.log.Info("resuming a stop", "handle", h, "deadline", rec.Deadline)
		r.wg.Add(1)
		go r.finishStop(w, rec.Deadline.Sub(r.clock.Now()))
	}
}

// pidReused reports whether w's pid now names another process: then neither
// it nor the group of that number is the worker's.
func pidReused(w *worker) bool {
	info, ok := procStat(w.pid)
	return ok && w.start != "" && info.start != w.start
}

// groupAliveLocked reports whether any process of w's group runs: the
// harness, or what it left behind in its group.
func (r *Runtime) groupAliveLocked(w *worker) bool {
	if w.pid == 0 {
		return false
	}
	if r.runningLocked(w) {
		return true
	}
	return !pidReused(w) && groupExists(w.pid)
}

// signalLocked signals w's process group, unless its pid was reused.
func (r *Runtime) signalLocked(w *worker, sig syscall.Signal) {
	if w.pid == 0 || pidReused(w) {
		return
	}
	if err := syscall.Kill(-w.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error("cannot signal a worker", "handle", w.handle, "signal", sig.String(), "err", err)
	}
}
