package service

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// A worker's unconsumed mailbox rows are bounded in the store, whatever
// number of processes serve it: the worker record lists them (Pending), a
// post reserves its place there with a conditional write before the row is
// appended, and a place is free again once the run's acknowledged sequence
// passes the row. So ahead of any other worker's question a worker has at
// most store.MaxPendingNoise status and heartbeat rows (of at most
// store.MaxPendingNoiseBytes together) and store.MaxPendingAttention
// questions and escalations, and its worker-done: the fairness bound of
// docs/service.md.

// noise reports whether kind is a status or heartbeat row.
func noise(kind string) bool { return kind == protocol.MsgStatus || kind == protocol.MsgHeartbeat }

// reserveRow registers the post's row on the worker record: a question
// (so a reply never finds it unasked) and its pending place, refused when
// the worker's unconsumed rows of its kind are at their bound. A retried
// post (the same id) finds its place and changes nothing.
//
// A heartbeat whose worker's latest row is a heartbeat the coordinator has
// not consumed adds no row: it answers that row's id (coalesced) and only
// touches the record, which is the sign of life the gauges read (its
// subject and body, which the harness never sets, are dropped). So
// heartbeats never fill a worker's bound, and a worker whose coordinator
// is away keeps beating.
func (s *Service) reserveRow(ctx context.Context, handle, run, id string, req workerapi.PostRequest) (coalesced string, err error) {
	head, _, err := s.store.GetMailbox(ctx, run)
	if err != nil {
		return "", err
	}
	now := s.clock.Now()
	size := len(req.Subject) + len(req.Body)
	_, err = s.updateWorker(ctx, handle, func(w *store.Worker) error {
		coalesced = ""
		if w.State == protocol.StateSettled {
			return errSettled
		}
		pruned := prunePending(w, head.Acked, now.Add(-2*s.cfg.Lease))
		_, asked := w.Questions[id]
		if asked || slices.ContainsFunc(w.Pending, func(p store.PendingRow) bool { return p.ID == id }) {
			if pruned {
				return nil
			}
			return errNoChange // a retried post of the same row
		}
		if n := len(w.Pending); req.Kind == protocol.MsgHeartbeat && n > 0 &&
			w.Pending[n-1].Kind == protocol.MsgHeartbeat && w.Pending[n-1].Seq > 0 {
			// Appended (it has its sequence) and the worker's latest row:
			// answering its id keeps the worker's rows in order.
			coalesced = w.Pending[n-1].ID
			return nil
		}
		rows, bytes := 0, 0
		for _, p := range w.Pending {
			if noise(p.Kind) == noise(req.Kind) {
				rows++
				bytes += p.Bytes
			}
		}
		switch {
		case noise(req.Kind) && (rows >= store.MaxPendingNoise || bytes+size > store.MaxPendingNoiseBytes):
			return &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: 5, Msg: fmt.Sprintf(
				"the worker has %d status or heartbeat rows (%d bytes) the coordinator has not read yet; post again after it reads them", rows, bytes)}
		case !noise(req.Kind) && rows >= store.MaxPendingAttention:
			return &galleyerr.Error{Kind: galleyerr.RateLimited, RetryAfterSeconds: 5, Msg: fmt.Sprintf(
				"the worker has %d questions or escalations the coordinator has not read yet; post again after it reads them", rows)}
		case req.Kind == protocol.MsgQuestion && len(w.Questions) >= store.MaxQuestions:
			return galleyerr.Errorf(galleyerr.Invalid, "the worker has asked its %d questions; no more are taken", store.MaxQuestions)
		}
		w.Pending = append(w.Pending, store.PendingRow{ID: id, Kind: req.Kind, Bytes: size, At: now})
		if req.Kind == protocol.MsgQuestion {
			w.Questions[id] = ""
			w.State = protocol.StateAwaitingReply
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return coalesced, nil
}

// prunePending drops the rows the coordinator consumed (at or below acked)
// and the reservations whose append never came (reserved before stale),
// and reports whether it dropped any.
func prunePending(w *store.Worker, acked int64, stale time.Time) bool {
	n := len(w.Pending)
	w.Pending = slices.DeleteFunc(w.Pending, func(p store.PendingRow) bool {
		return (p.Seq > 0 && p.Seq <= acked) || (p.Seq == 0 && p.At.Before(stale))
	})
	if len(w.Pending) == 0 {
		w.Pending = nil
	}
	return len(w.Pending) != n
}

// notePending records the sequence a reserved row took, so that its place
// frees once the coordinator consumes it. If this write fails the place
// stays reserved until the reservation is stale (two leases) and is then
// dropped: only then can the worker have one row more than its bound.
func (s *Service) notePending(ctx context.Context, handle, id string, seq int64) {
	_, err := s.updateWorker(ctx, handle, func(w *store.Worker) error {
		i := slices.IndexFunc(w.Pending, func(p store.PendingRow) bool { return p.ID == id })
		if i < 0 || w.Pending[i].Seq == seq {
			return errNoChange
		}
		w.Pending[i].Seq = seq
		return nil
	})
	if err != nil {
		s.log.Warn("could not record a pending row's sequence", "worker", handle, "err", err)
	}
}
