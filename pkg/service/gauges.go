package service

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/store"
)

// StaleAfter is how long a worker that reported ready may go without a
// sign of life before it counts as stuck: twenty of the harness's default
// heartbeats (every 30 s), so that a slow store or a busy agent never
// makes one, while a dead harness shows within a quarter of an hour.
const StaleAfter = 10 * time.Minute

// StartingStaleAfter is how long a worker may stay starting before it
// counts as stuck: its bootstrap code expires then, so a harness that has
// not started by now never will.
const StartingStaleAfter = bootstrap.DefaultTTL

// gaugePage is how many mailbox rows one read of the recent window takes.
const gaugePage = 200

// WorkerGauges counts the deployment's live workers and the stuck ones
// among them, for the housekeeping gauges (package metrics).
//
// Live is what the launch cap (Config.MaxWorkers) counts: worker records
// neither released nor settled. Stuck is the live workers that gave no
// sign of life in time: one starting for longer than StartingStaleAfter
// (the harness never reported ready), one ready or awaiting a reply whose
// last sign is older than StaleAfter, and one whose compute ended without
// a settle. A sign of life is a change of the worker's record (ready, a
// question, a reply, a usage report) or a row it posted to its run's
// mailbox (the harness's heartbeats among them), whichever came last.
// A worker awaiting a reply is not stuck for waiting: its harness goes on
// heartbeating.
//
// It reads the resource list once (what the inventory and the cap read),
// and the mailbox only of a run with a worker whose record went unchanged
// for StaleAfter: a binary search for the rows of the last StaleAfter, then
// those rows. Row times increase with their sequence up to the skew
// between the clocks that stamp them (seconds against a bound of minutes).
func (s *Service) WorkerGauges(ctx context.Context) (live, stuck int, err error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return 0, 0, err
	}
	now := s.clock.Now()
	since := now.Add(-StaleAfter)
	quiet := map[string][]string{} // run → its workers whose record is older than since
	for _, r := range all {
		w := r.Worker
		if r.Kind != protocol.KindWorker || r.Released || w == nil || w.State == protocol.StateSettled {
			continue
		}
		live++
		switch {
		case w.Exited:
			stuck++ // its compute ended and nothing settled it
		case w.Parked():
			// Its compute ended at its parking: it waits, heartbeating
			// nothing, until input resumes it (docs/parking.md).
		case w.State == protocol.StateStarting:
			started := r.Created
			if w.Park != nil && w.Park.Resume.After(started) {
				started = w.Park.Resume // resumed: its compute starts again
			}
			if now.Sub(started) > StartingStaleAfter {
				stuck++
			}
		case lastChange(r).Before(since):
			quiet[w.Run] = append(quiet[w.Run], r.Handle)
		}
	}
	for run, handles := range quiet {
		posted, err := s.postersSince(ctx, run, since)
		if err != nil {
			return live, 0, err
		}
		for _, h := range handles {
			if !posted[h] {
				stuck++
			}
		}
	}
	return live, stuck, nil
}

// lastChange is when r's worker record last changed.
func lastChange(r store.Resource) time.Time {
	if r.Worker.Updated.After(r.Created) {
		return r.Worker.Updated
	}
	return r.Created
}

// postersSince answers the workers that posted a row to run's mailbox at
// or after since.
func (s *Service) postersSince(ctx context.Context, run string, since time.Time) (map[string]bool, error) {
	after, err := s.lastRowBefore(ctx, run, since)
	if err != nil {
		return nil, err
	}
	posted := map[string]bool{}
	for {
		page, err := s.store.ListMessages(ctx, run, after, gaugePage)
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			if m.Row.Worker != nil && !m.At.Before(since) {
				posted[m.Row.Worker.Handle] = true
			}
			after = m.Seq
		}
		if len(page) < gaugePage {
			return posted, nil
		}
	}
}

// lastRowBefore finds a sequence such that every row of run at or below
// it was appended before since and the next row (if any) at or after it:
// probes of one row each, doubling from the start and then halving, so a
// run of n rows costs about 2·log2(n) reads however long it has run.
func (s *Service) lastRowBefore(ctx context.Context, run string, since time.Time) (int64, error) {
	// first answers the first row with a sequence of seq or more.
	first := func(seq int64) (store.Message, bool, error) {
		ms, err := s.store.ListMessages(ctx, run, seq-1, 1)
		if err != nil || len(ms) == 0 {
			return store.Message{}, false, err
		}
		return ms[0], true, nil
	}
	// Invariant: the rows up to lo are older than since; the first row
	// from hi on is not (or there is none).
	lo, hi := int64(0), int64(-1)
	for step := int64(1); hi < 0; step *= 2 {
		m, ok, err := first(lo + step)
		if err != nil {
			return 0, err
		}
		if !ok || !m.At.Before(since) {
			hi = lo + step
			break
		}
		lo = m.Seq
	}
	for hi-lo > 1 {
		m, ok, err := first(lo + (hi-lo)/2)
		if err != nil {
			return 0, err
		}
		if !ok || !m.At.Before(since) || m.Seq >= hi {
			hi = lo + (hi-lo)/2
			continue
		}
		lo = m.Seq
	}
	return lo, nil
}
