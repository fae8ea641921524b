package service

import (
	"context"
	"errors"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
)

// StartWindow is how long after a worker's record was made a launch may
// still ask the runtime to start it. Past it, a task started now would
// boot after its bootstrap code expired (bootstrap.DefaultTTL, from the
// record's creation) and could never get its credential; and well before
// ECS forgets the launch's clientToken (24 hours), after which a RunTask
// would make a second task. A resumed launch past it settles the worker
// failed instead.
const StartWindow = bootstrap.DefaultTTL - 5*time.Minute

// startExpired reports whether a launch that finds its worker record still
// starting may no longer call Start: the record is older than StartWindow
// and no harness has exchanged its bootstrap code.
func (s *Service) startExpired(created time.Time, credentialClaim string) bool {
	return credentialClaim == "" && s.clock.Now().Sub(created) > StartWindow
}

// definiteStart reports whether a Start error says that call started
// nothing: rate-limited (capacity, quota, throttling) or refused.
func definiteStart(err error) bool {
	return galleyerr.Is(galleyerr.RateLimited, err) || errors.Is(err, ErrStartRefused)
}

// failStart settles a starting worker whose compute will never run: its
// Start was definitely refused, or its start window passed. The worker
// settles failed and its coordinator gets the worker-done row saying why,
// so the launch ends definite (applied, its worker failed) and the worker
// no longer counts against MaxWorkers. A task an earlier attempt may have
// started is stopped, the stop owed in the record until done (a failed one
// is retried by housekeeping; the reconciler also stops any task of a
// settled worker it sees running, and its harness's bootstrap exchange is
// refused for a settled worker).
func (s *Service) failStart(ctx context.Context, handle, why string) error {
	ctx = context.WithoutCancel(ctx)
	res, err := s.settleRecord(ctx, handle, protocol.OutcomeFailed, settleExited, true)
	if err != nil {
		return err
	}
	if err := s.stopOwed(ctx, handle); err != nil {
		s.log.Warn("could not stop the task of a worker that failed to start", "worker", handle, "err", err)
	}
	s.log.Warn("worker failed to start", "worker", handle, "why", why)
	if p, owed := owedDone(res.Worker); !owed || p.Seq > 0 {
		return nil // settled by a cancel, or its row is in the mailbox
	}
	_, err = s.appendDone(ctx, handle, res, "", "the worker could not be started: "+truncate(why, 1024))
	return err
}
