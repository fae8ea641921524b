package service

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"

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
	// n: a retry converges on the same process or task. While the parked
	// compute has not ended yet it may refuse for now (Unavailable); the
	// service tries again once that end is seen (WorkerExited).
	Resume(ctx context.Context, spec WorkerSpec, n int) error
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
// is out of turn or too large. The same parking reported again answers
// nil and writes nothing. Input that raced the parking (an inbox item
// after req.Read) resumes the worker at once.
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
	if galleyerr.Is(galleyerr.Invalid, err) && (res.Released || res.Worker == nil) {
		return galleyerr.Errorf(galleyerr.Conflict, "worker was released")
	}
	if err != nil {
		return err
	}
	if first {
		s.log.Info("worker parked", "worker", handle, "parking", req.Parking)
		s.event(handle, eventlog.KindCompute, "parked while its agent waits on its coordinator", "event", "parked",
			"parking", strconv.Itoa(req.Parking))
	}
	// An item appended before the parking's write is found here; one
	// appended after it finds the record parked (message, deliverReply).
	items, err := s.store.ListInbox(ctx, handle, req.Read)
	if err != nil {
		return nil // parked; the next input, or housekeeping, resumes it
	}
	if len(items) > 0 {
		s.resumeParked(ctx, handle, "input arrived while it parked")
	}
	return nil
}

// resumeParked resumes a parked worker: one conditional write marks it
// resuming (starting, with a new credential), then its compute is
// started. A worker not parked is left as it is, except that a resume
// whose start is owed is started. Failures are logged: the record owes
// the start, and WorkerExited (the parked compute's end, housekeeping)
// starts it.
func (s *Service) resumeParked(ctx context.Context, handle, why string) {
	res, err := s.updateWorkerRecord(ctx, handle, "resumed: "+why, func(r *store.Resource) error {
		w := r.Worker
		if !w.Parked() {
			return errNoChange
		}
		w.Park.Resume = s.clock.Now()
		w.State = protocol.StateStarting
		// The parked harness's credential is void from here on; the
		// resumed one's is derived (every retry hands out the same) and
		// bound afresh to its harness's key.
		w.CredentialNonce = s.resumeNonce(r.Owner, w.Park.Gen)
		w.CredentialJKT, w.CredentialClaim = "", ""
		return nil
	})
	if err != nil {
		s.log.Warn("cannot resume a parked worker", "worker", handle, "err", err)
		return
	}
	if res.Worker.ResumeOwed() {
		s.startResumed(ctx, res)
	}
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
func (s *Service) startResumed(ctx context.Context, res store.Resource) {
	w := res.Worker
	rt, ok := s.runtime.(Resumer)
	if !ok {
		s.log.Error("a parked worker cannot be resumed: the runtime cannot resume", "worker", res.Handle)
		return
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
			return
		}
		spec.WorkspacePath = wt.Path
	}
	gen := w.Park.Gen
	if err := rt.Resume(ctx, spec, gen); err != nil {
		s.log.Info("the resumed compute is not started yet; it is owed", "worker", res.Handle, "parking", gen, "err", err)
		return
	}
	_, err := s.updateWorker(ctx, res.Handle, func(w *store.Worker) error {
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
		return
	case err != nil:
		s.log.Warn("cannot record a resumed worker's start", "worker", res.Handle, "err", err)
		return
	}
	s.log.Info("parked worker resumed", "worker", res.Handle, "parking", gen)
	s.event(res.Handle, eventlog.KindCompute, "compute started again to resume the parked worker", "event", "resumed",
		"parking", strconv.Itoa(gen))
}

// resumeIfParked resumes the worker if it is parked: called after input
// (a message) was appended to its inbox.
func (s *Service) resumeIfParked(ctx context.Context, handle, why string) {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil || res.Worker == nil || res.Released {
		return
	}
	if res.Worker.Parked() {
		s.resumeParked(ctx, handle, why)
	} else if res.Worker.ResumeOwed() {
		s.startResumed(ctx, res)
	}
}

// parkedExit decides the end of a worker's compute for a worker that
// parked: handled is true when the end is the parking's (nothing to do),
// or an earlier compute's late news (the resumed one runs), or the end a
// owed resume waited for (its start is made now).
func (s *Service) parkedExit(ctx context.Context, res store.Resource) (handled bool) {
	w := res.Worker
	switch {
	case w == nil || w.Park == nil || w.State == protocol.StateSettled:
		return false
	case w.Parked():
		// As its parking asks; input that came meanwhile and whose resume
		// was lost (its effect's holder died) resumes it now.
		if items, err := s.store.ListInbox(ctx, res.Handle, w.Park.Read); err == nil && len(items) > 0 {
			s.resumeParked(ctx, res.Handle, "input waits")
		}
		return true
	case w.ResumeOwed():
		s.startResumed(ctx, res)
		return true
	}
	if l, err := s.runtime.Liveness(ctx, res.Handle); err == nil && l == LivenessLive {
		s.log.Info("an earlier compute of a resumed worker ended; the resumed one runs", "worker", res.Handle)
		return true
	}
	return false
}

// forgetParked deletes what a settled worker's parkings saved.
func (s *Service) forgetParked(ctx context.Context, handle string, w *store.Worker) {
	if s.parkedFiles == nil || w == nil || w.Parks == 0 {
		return
	}
	if err := s.parkedFiles.DeleteParked(ctx, handle); err != nil {
		s.log.Warn("cannot delete a settled worker's parked files", "worker", handle, "err", err)
	}
}
