package service

import (
	"context"
	"errors"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// The resource records the effects write: made once per key and never
// back once released; a worker's changed only by conditional writes.

// createResource creates r, or accepts the record an earlier attempt of the
// same key made. A released record of a reused handle (a branch deleted and
// made again) is replaced; one the same key made is replaced only when
// replaceOwn is set (its own undo released it), and is otherwise
// errReleased: a released resource never comes back.
func (s *Service) createResource(ctx context.Context, r store.Resource, replaceOwn bool) error {
	for range claimAttempts {
		_, err := s.store.PutResource(ctx, r, store.NoVersion)
		if !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
		cur, ver, gerr := s.store.GetResource(ctx, r.Kind, r.Handle)
		if gerr != nil {
			return gerr
		}
		if cur.Owner == r.Owner && !cur.Released {
			return nil
		}
		if !cur.Released {
			return galleyerr.Errorf(galleyerr.Invalid, "%s %s already exists", r.Kind, quoteShort(r.Handle))
		}
		if cur.Owner == r.Owner && (!replaceOwn || (cur.Worker != nil && cur.Worker.State == protocol.StateSettled)) {
			// An undo releases a worker it never settled; a settled one
			// was cancelled or released by a key, and stays so.
			return errReleased
		}
		if _, err = s.store.PutResource(ctx, r, ver); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "resource %s is contended", quoteShort(r.Handle))
}

func (s *Service) markReleased(ctx context.Context, kind, handle string) error {
	for range claimAttempts {
		res, v, err := s.store.GetResource(ctx, kind, handle)
		if err != nil {
			return err
		}
		if res.Released {
			return nil
		}
		res.Released = true
		if _, err = s.store.PutResource(ctx, res, v); !galleyerr.Is(galleyerr.Conflict, err) {
			return err
		}
	}
	return galleyerr.Errorf(galleyerr.InFlight, "resource %s is contended", quoteShort(handle))
}

// liveWorker returns a worker that exists, is not released and has not
// settled: the only kind a message or reply can reach.
func (s *Service) liveWorker(ctx context.Context, handle string) (store.Resource, store.Version, error) {
	res, ver, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case galleyerr.Is(galleyerr.NotFound, err) || (err == nil && (res.Released || res.Worker == nil)):
		return res, ver, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
	case err != nil:
		return res, ver, err
	case res.Worker.State == protocol.StateSettled:
		return res, ver, galleyerr.Errorf(galleyerr.Invalid, "worker %s has settled", quoteShort(handle))
	}
	return res, ver, nil
}

var errNoChange = errors.New("no change")

// updateWorker applies fn to the worker's record in a conditional write,
// retrying from a fresh read when the record changed underneath. fn returns
// errNoChange to write nothing. A missing or released worker is Invalid.
func (s *Service) updateWorker(ctx context.Context, handle string, fn func(*store.Worker) error) (store.Resource, error) {
	return s.updateWorkerWhy(ctx, handle, "", fn)
}

// updateWorkerWhy is updateWorker, recording a state change its write
// makes in the worker's event log with why as its evidence.
func (s *Service) updateWorkerWhy(ctx context.Context, handle, why string, fn func(*store.Worker) error) (store.Resource, error) {
	return s.updateWorkerRecord(ctx, handle, why, func(r *store.Resource) error { return fn(r.Worker) })
}

// updateWorkerRecord is updateWorkerWhy with the whole record given to fn
// (its Cleanup beside the worker).
func (s *Service) updateWorkerRecord(ctx context.Context, handle, why string, fn func(*store.Resource) error) (store.Resource, error) {
	for range claimAttempts {
		res, ver, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
		if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && (res.Released || res.Worker == nil)) {
			return res, galleyerr.Errorf(galleyerr.Invalid, "worker %s does not exist", quoteShort(handle))
		}
		if err != nil {
			return res, err
		}
		if res.Worker.Questions == nil {
			res.Worker.Questions = map[string]string{}
		}
		before := res.Worker.State
		if err := fn(&res); err != nil {
			if errors.Is(err, errNoChange) {
				return res, nil
			}
			return res, err
		}
		res.Worker.Updated = s.clock.Now()
		if _, err = s.store.PutResource(ctx, res, ver); !galleyerr.Is(galleyerr.Conflict, err) {
			if err == nil && res.Worker.State != before {
				s.event(handle, eventlog.KindState, why, "from", before, "state", res.Worker.State, "outcome", res.Worker.Outcome)
			}
			return res, err
		}
	}
	return store.Resource{}, galleyerr.Errorf(galleyerr.InFlight, "worker %s is contended", quoteShort(handle))
}
