package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parked workers (docs/parking.md). A worker whose agent waited on its
// coordinator for the house's "park after" is parked by its harness: it
// saves what the agent needs, reports the parking (WorkerPark) and its
// compute ends. A reply or a message resumes it (resumeParked): one
// conditional write moves the record from parked to resuming, with a new
// credential for the new compute, and the runtime starts that compute
// (Resumer). Cancel and release settle a parked worker as any other and
// start nothing.

// Resumer is a Runtime that can start a parked worker's compute again.
type Resumer interface {
	// Resume starts the compute that resumes parking n of spec.Handle,
	// with spec.Token its new credential. It is idempotent per handle and
	// n: a retry converges on the same process or task, and started says
	// whether this call started it (false: an earlier call had, and that
	// compute may have ended since). While the parked compute has not
	// ended yet it may refuse for now (Unavailable); the service tries
	// again once that end is seen (WorkerExited).
	Resume(ctx context.Context, spec WorkerSpec, n int) (started bool, err error)
}

// ParkedFiles forgets what a parked worker's harness saved (its agent's
// session archive) once the worker has settled: nothing resumes it.
type ParkedFiles interface {
	DeleteParked(ctx context.Context, handle string) error
}

// WithParkedFiles deletes a settled worker's parked files with p (galley
// serve: its data folder's park store).
func WithParkedFiles(p ParkedFiles) Option { return func(v *Service) { v.parkedFiles = p } }

// WorkerPark records parking req.Parking of the worker: one conditional
// write, refused (Conflict) when the worker has settled or was released,
// and Invalid when this deployment cannot resume workers or the request
// is out of turn or too large, or reports a parking already recorded with
// another cursor or state. The same report again answers nil and writes
// nothing. Input that raced the parking (an inbox item after req.Read)
// resumes the worker at once. A write galley could not make (contention,
// the store) is Unavailable: the harness retries it, and a 409 is only
// ever "settled".
func (s *Service) WorkerPark(ctx context.Context, handle string, req workerapi.ParkRequest) error {
	if _, ok := s.runtime.(Resumer); !ok {
		return galleyerr.Errorf(galleyerr.Invalid, "this deployment does not park workers: its runtime cannot resume them")
	}
	if len(req.State) > workerapi.MaxParkState {
		return galleyerr.Errorf(galleyerr.Invalid, "a parking's state is at most %d bytes", workerapi.MaxParkState)
	}
	var state bytes.Buffer
	if err := json.Compact(&state, req.State); err != nil || state.Len() == 0 || state.Bytes()[0] != '{' {
		return galleyerr.Errorf(galleyerr.Invalid, "a parking's state must be a JSON object")
	}
	if req.Parking < 1 || req.Read < 0 {
		return galleyerr.Errorf(galleyerr.Invalid, "a parking's number is at least 1 and its inbox cursor not negative")
	}
	first := false
	res, err := s.updateWorkerRecord(ctx, handle, "parked by its harness", func(r *store.Resource) error {
		w := r.Worker
		switch {
		case w.State == protocol.StateSettled:
			return errSettled
		case w.Park != nil && w.Park.Gen == req.Parking && w.Parks == req.Parking:
			if w.Park.Read != req.Read || !bytes.Equal(w.Park.State, state.Bytes()) {
				return galleyerr.Errorf(galleyerr.Invalid, "parking %d was reported with another inbox cursor or state", req.Parking)
			}
			return errNoChange // a retry of this report
		case req.Parking != w.Parks+1:
			return galleyerr.Errorf(galleyerr.Invalid, "parking %d is out of turn: the worker parked %d times", req.Parking, w.Parks)
		}
		first = true
		w.Parks = req.Parking
		w.Park = &store.Park{Gen: req.Parking, Since: s.clock.Now(), Read: req.Read, State: state.Bytes()}
		w.State = protocol.StateAwaitingReply
		return nil
	})
	switch {
	case galleyerr.Is(galleyerr.Invalid, err) && (res.Released || res.Worker == nil):
		// What the refused parking saved goes too: the settle that came
		// first may have run before it was saved.
		s.forgetParked(ctx, handle)
		return galleyerr.Errorf(galleyerr.Conflict, "worker was released")
	case galleyerr.Is(galleyerr.Conflict, err):
		s.forgetParked(ctx, handle)
		return err
	case galleyerr.Is(galleyerr.InFlight, err):
		return galleyerr.E(galleyerr.Unavailable, "the parking could not be recorded now; retry", err)
	case err != nil:
		return err
	}
	if first {
		s.log.Info("worker parked", "worker", handle, "parking", req.Parking)
		s.event(handle, eventlog.KindCompute, "parked while its agent waits on its coordinator", "event", "parked",
			"parking", strconv.Itoa(req.Parking))
	}
	// An item appended before the parking's write is found here; one
	// appended after it finds the record parked (message, deliverReply).
	// Either failure is the report's: its retry looks again.
	waiting, err := s.inputWaits(ctx, handle, req.Read)
	if err != nil {
		return galleyerr.E(galleyerr.Unavailable, "the parking is recorded, but whether input waits is unknown; retry", err)
	}
	if waiting {
		return s.resumeParked(ctx, handle, "input arrived while it parked")
	}
	return nil
}

// inputWaits reports whether the worker's inbox holds an item after read.
func (s *Service) inputWaits(ctx context.Context, handle string, read int64) (bool, error) {
	items, err := s.store.ListInbox(ctx, handle, read, 1)
	return len(items) > 0, err
}

// markResuming moves a parked worker's record r to resuming, in the write
// of the caller: the state starting and a new credential nonce derived
// from the launch's key and the parking's number, with the key binding and
// the bootstrap claim cleared. The parked harness's credential is void
// from then on; the resumed one's is derived (every retry hands out the
// same) and bound afresh to its harness's key.
func (s *Service) markResuming(r *store.Resource) {
	w := r.Worker
	w.Park.Resume = s.clock.Now()
	w.State = protocol.StateStarting
	w.CredentialNonce = s.resumeNonce(r.Owner, w.Park.Gen)
	w.CredentialJKT, w.CredentialClaim = "", ""
}

// resumeParked resumes a parked worker: one conditional write marks it
// resuming, then its compute is started. A worker not parked is left as
// it is, except that a resume whose start is owed is started. An error
// (Unavailable) is the write's: the worker stays parked, and the caller
// must fail so that it is tried again. A start that fails is owed on the
// record and only logged: WorkerExited (the parked compute's end,
// housekeeping) starts it.
func (s *Service) resumeParked(ctx context.Context, handle, why string) error {
	res, err := s.updateWorkerRecord(ctx, handle, "resumed: "+why, func(r *store.Resource) error {
		if !r.Worker.Parked() {
			return errNoChange
		}
		s.markResuming(r)
		return nil
	})
	switch {
	case galleyerr.Is(galleyerr.Invalid, err):
		return nil // released: nothing to resume
	case err != nil:
		s.log.Warn("cannot resume a parked worker", "worker", handle, "err", err)
		return galleyerr.E(galleyerr.Unavailable, "the parked worker's resume could not be recorded", err)
	}
	if res.Worker.ResumeOwed() {
		s.startResumed(ctx, res)
	}
	return nil
}

// resumeNonce is the credential nonce of the compute that resumes parking
// n of the launch with key.
func (s *Service) resumeNonce(key string, n int) string {
	return s.derive("n-", key+"\x00resume\x00"+strconv.Itoa(n))
}

// startResumed asks the runtime for the compute that resumes res's
// parking and records that it was started. A cancel or release that
// settled the worker meanwhile is caught by that write: it finds the
// worker settled, and the compute just started is stopped (as a launch's).
//
// ended is true when the runtime had started that compute before (its
// Started write was lost) and it has ended since: nothing runs the worker
// any more, and the caller that saw a compute end settles it.
func (s *Service) startResumed(ctx context.Context, res store.Resource) (ended bool) {
	w := res.Worker
	rt, ok := s.runtime.(Resumer)
	if !ok {
		s.log.Error("a parked worker cannot be resumed: the runtime cannot resume", "worker", res.Handle)
		return false
	}
	spec := WorkerSpec{Handle: res.Handle, Token: s.workerToken(res.Handle, w.CredentialNonce),
		IdempotencyToken: s.derive("t-", res.Owner+"\x00resume\x00"+strconv.Itoa(w.Park.Gen)),
		Workspace:        w.Worktree, Branch: w.Branch, Run: w.Run, Task: w.Task, Key: res.Owner}
	if w.Agent != nil {
		spec.Agent = w.Agent.Agent
	}
	if w.Worktree != "" {
		wt, _, err := s.store.GetResource(ctx, protocol.KindWorktree, w.Worktree)
		if err != nil {
			s.log.Warn("cannot resume a parked worker: its worktree record is unreadable", "worker", res.Handle, "err", err)
			return false
		}
		spec.WorkspacePath = wt.Path
	}
	gen := w.Park.Gen
	started, err := rt.Resume(ctx, spec, gen)
	if err != nil {
		s.log.Info("the resumed compute is not started yet; it is owed", "worker", res.Handle, "parking", gen, "err", err)
		return false
	}
	if !started {
		// An earlier call started it and its record was not written: it
		// counts as started only while it runs.
		switch s.computeGone(ctx, res) {
		case goneYes:
			s.log.Warn("the resumed compute ended before its start was recorded", "worker", res.Handle, "parking", gen)
			return true
		case goneUnsure:
			return false // still owed; the next end or housekeeping looks again
		}
	}
	_, err = s.updateWorker(ctx, res.Handle, func(w *store.Worker) error {
		switch {
		case w.State == protocol.StateSettled:
			return errSettled
		case w.Park == nil || w.Park.Gen != gen || w.Park.Started:
			return errNoChange
		}
		w.Park.Started = true
		return nil
	})
	switch {
	case galleyerr.Is(galleyerr.Conflict, err) || galleyerr.Is(galleyerr.Invalid, err):
		// Settled or released while it started: stop what was started.
		if err := s.runtime.Stop(ctx, res.Handle); err != nil {
			s.log.Warn("cannot stop a resumed worker settled while it started", "worker", res.Handle, "err", err)
		}
		return false
	case err != nil:
		s.log.Warn("cannot record a resumed worker's start", "worker", res.Handle, "err", err)
		return false
	}
	s.log.Info("parked worker resumed", "worker", res.Handle, "parking", gen)
	s.event(res.Handle, eventlog.KindCompute, "compute started again to resume the parked worker", "event", "resumed",
		"parking", strconv.Itoa(gen))
	return false
}

// gone is what the runtime says of a worker's compute.
type gone int

const (
	goneNo     gone = iota // it runs
	goneYes                // it ended, or is lost
	goneUnsure             // the runtime cannot say yet
)

// computeGone asks the runtime whether res's compute is gone: exited, or
// unknown once LostAfter has passed since it was (re)started (a platform's
// listing may lag a new task's start).
func (s *Service) computeGone(ctx context.Context, res store.Resource) gone {
	l, err := s.runtime.Liveness(ctx, res.Handle)
	switch {
	case err != nil:
		return goneUnsure
	case l == LivenessLive:
		return goneNo
	case l == LivenessExited:
		return goneYes
	case s.clock.Now().Sub(startedAt(res)) > LostAfter:
		return goneYes
	}
	return goneUnsure
}

// startedAt is when res's worker's latest compute was asked for: its
// launch, or the resume of its latest parking (as the gauges count).
func startedAt(r store.Resource) time.Time {
	if w := r.Worker; w != nil && w.Park != nil && w.Park.Resume.After(r.Created) {
		return w.Park.Resume
	}
	return r.Created
}

// resumeIfParked resumes the worker if it is parked, or starts a resume
// that is owed: called after input was appended to its inbox. An error
// (Unavailable) means the worker may still be parked with that input
// waiting: the caller fails so that its retry runs this again.
func (s *Service) resumeIfParked(ctx context.Context, handle, why string) error {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case galleyerr.Is(galleyerr.NotFound, err):
		return nil
	case err != nil:
		return galleyerr.E(galleyerr.Unavailable, "whether the worker is parked is unknown", err)
	case res.Worker == nil || res.Released:
		return nil
	case res.Worker.Parked():
		return s.resumeParked(ctx, handle, why)
	case res.Worker.ResumeOwed():
		s.startResumed(ctx, res)
	}
	return nil
}

// parkedExit decides the end of a worker's compute for a worker that
// parked: handled is true when the end is the parking's (nothing to do),
// or an earlier compute's late news (the resumed one runs, or may not be
// listed yet), or the end a owed resume waited for (its start is made
// now). It is false, and the worker settles failed, when the compute that
// resumed it has ended.
func (s *Service) parkedExit(ctx context.Context, res store.Resource) (handled bool) {
	w := res.Worker
	switch {
	case w == nil || w.Park == nil || w.State == protocol.StateSettled:
		return false
	case w.Parked():
		// As its parking asks; input that came meanwhile and whose resume
		// was lost (its effect's holder died) resumes it now.
		waiting, err := s.inputWaits(ctx, res.Handle, w.Park.Read)
		if err != nil {
			s.log.Warn("a parked worker's inbox is unreadable; housekeeping looks again", "worker", res.Handle, "err", err)
		} else if waiting {
			_ = s.resumeParked(ctx, res.Handle, "input waits") // logged; housekeeping tries again
		}
		return true
	case w.ResumeOwed():
		return !s.startResumed(ctx, res)
	}
	if s.computeGone(ctx, res) != goneYes {
		s.log.Info("an earlier compute of a resumed worker ended; the resumed one runs", "worker", res.Handle)
		return true
	}
	return false
}

// resumeWaiting resumes the parked workers in rs whose inbox holds input
// after their parking's cursor (their resume was lost: a write that
// failed after the input's, a holder that died): for housekeeping, so
// that no worker stays parked with input waiting. It answers how many it
// resumed.
func (s *Service) resumeWaiting(ctx context.Context, rs []store.Resource) (int, error) {
	n := 0
	var errs []error
	for _, r := range rs {
		if r.Kind != protocol.KindWorker || r.Released || !r.Worker.Parked() {
			continue
		}
		waiting, err := s.inputWaits(ctx, r.Handle, r.Worker.Park.Read)
		if err == nil && waiting {
			err = s.resumeParked(ctx, r.Handle, "input waits (housekeeping found it)")
			if err == nil {
				s.log.Warn("housekeeping resumed a parked worker whose input waited", "worker", r.Handle)
				n++
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// forgetParked deletes what a worker's parkings saved, once it settled or
// a parking of it was refused: nothing resumes it. Every settle does it,
// whether or not the worker parked (a missing archive is no error), so
// that an archive saved by a parking that was then refused goes too.
func (s *Service) forgetParked(ctx context.Context, handle string) {
	if s.parkedFiles == nil {
		return
	}
	if err := s.parkedFiles.DeleteParked(ctx, handle); err != nil {
		s.log.Warn("cannot delete a settled worker's parked files", "worker", handle, "err", err)
	}
}
