package service

import (
	"context"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// MaxInventory is the most rows the inventory answers.
const MaxInventory = 1024

// Observe answers a worker's state without changing it. A worker galley has
// no record of is missing, never settled.
func (s *Service) Observe(ctx context.Context, r protocol.Resource) (protocol.Observation, error) {
	if r.Backend != s.cfg.Backend || r.Kind != protocol.KindWorker {
		return protocol.Observation{State: protocol.StateUnknown}, nil
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, r.Handle)
	if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && (res.Released || res.Worker == nil)) {
		return protocol.Observation{State: protocol.StateMissing}, nil
	}
	if err != nil {
		return protocol.Observation{}, err
	}
	w := res.Worker
	if w.State == protocol.StateSettled {
		return protocol.Observation{State: protocol.StateSettled, Outcome: w.Outcome}, nil
	}
	return protocol.Observation{State: w.State}, nil
}

// Inventory lists the resources galley manages for the house, newest last,
// at most MaxInventory. It asks the runtime and the git host once each,
// however many rows: a long-lived house has hundreds.
func (s *Service) Inventory(ctx context.Context) (protocol.Inventory, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return protocol.Inventory{}, err
	}
	kept := make([]store.Resource, 0, len(all))
	for _, r := range all {
		if !r.Released {
			kept = append(kept, r)
		}
	}
	if len(kept) > MaxInventory {
		kept = kept[len(kept)-MaxInventory:]
	}
	lv := s.livenesses(ctx, kept)
	rows := make([]protocol.InventoryRow, 0, len(kept))
	for _, r := range kept {
		row := protocol.InventoryRow{Resource: s.resource(r.Kind, r.Handle), Liveness: lv.of(r)}
		if r.Owner != "" {
			owner := r.Owner
			row.Owner = &owner
		}
		rows = append(rows, row)
	}
	return protocol.Inventory{Resources: rows}, nil
}

// inventoryLiveness is what one batch read of the runtime and one of the
// git host said of the inventory's workers and branches.
type inventoryLiveness struct {
	workers  map[string]Liveness // absent: unverifiable
	branches map[string]bool     // false: no such branch, unless !branchesRead
	// branchesRead is false when the git host could not be read.
	branchesRead bool
}

// livenesses asks the runtime about every worker whose exit galley has not
// recorded, and the git host about every branch, one call each.
func (s *Service) livenesses(ctx context.Context, rs []store.Resource) inventoryLiveness {
	var handles, branches []string
	for _, r := range rs {
		switch {
		case r.Kind == protocol.KindWorker && (r.Worker == nil || !r.Worker.Exited):
			handles = append(handles, r.Handle)
		case r.Kind == protocol.KindBranch && protocol.IsBranchName(r.Handle):
			branches = append(branches, r.Handle)
		}
	}
	lv := inventoryLiveness{branchesRead: true}
	if len(handles) > 0 {
		var err error
		if lv.workers, err = s.runtime.Livenesses(ctx, handles); err != nil {
			s.log.Warn("inventory: worker liveness unverifiable", "workers", len(handles)-len(lv.workers), "err", err)
		}
	}
	if len(branches) > 0 {
		var err error
		if lv.branches, err = s.git.ExistingBranches(ctx, branches); err != nil {
			lv.branchesRead = false
			s.log.Warn("inventory: branch liveness unverifiable", "branches", len(branches), "err", err)
		}
	}
	return lv
}

// of is r's liveness, honest: unverifiable where galley cannot tell.
func (lv inventoryLiveness) of(r store.Resource) string {
	switch r.Kind {
	case protocol.KindWorker:
		if r.Worker != nil && r.Worker.Exited {
			return protocol.LivenessExited
		}
		if r.Worker.Parked() {
			// Its compute ended at its parking: the worker goes on
			// (docs/parking.md).
			return protocol.LivenessLive
		}
		l, ok := lv.workers[r.Handle]
		switch {
		case !ok:
			return protocol.LivenessUnverifiable
		case l == LivenessLive:
			return protocol.LivenessLive
		case l == LivenessExited && !r.Worker.ResumeOwed():
			return protocol.LivenessExited
		}
		// An owed resume's compute that does not run is not started yet,
		// or was started and ended before its record said so: galley
		// cannot tell.
		return protocol.LivenessUnverifiable
	case protocol.KindBranch:
		if !lv.branchesRead || !protocol.IsBranchName(r.Handle) {
			return protocol.LivenessUnverifiable
		}
		if lv.branches[r.Handle] {
			return protocol.LivenessLive
		}
		return protocol.LivenessExited
	case protocol.KindWorktree:
		// A worktree lives until released; its files are the runtime's.
		return protocol.LivenessLive
	}
	return protocol.LivenessUnverifiable
}

// Usage answers what the worker reported, nothing invented.
func (s *Service) Usage(ctx context.Context, r protocol.Resource) (protocol.UsageAnswer, error) {
	if r.Backend != s.cfg.Backend || r.Kind != protocol.KindWorker {
		return protocol.UsageAnswer{Status: "none"}, nil
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, r.Handle)
	if galleyerr.Is(galleyerr.NotFound, err) {
		return protocol.UsageAnswer{Status: "none"}, nil
	}
	if err != nil {
		return protocol.UsageAnswer{}, err
	}
	if res.Worker == nil || res.Worker.Usage == nil {
		return protocol.UsageAnswer{Status: "none"}, nil
	}
	return protocol.UsageAnswer{Status: "reported", Report: res.Worker.Usage}, nil
}
