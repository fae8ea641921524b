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
// at most MaxInventory.
func (s *Service) Inventory(ctx context.Context) (protocol.Inventory, error) {
	all, err := s.store.ListResources(ctx)
	if err != nil {
		return protocol.Inventory{}, err
	}
	rows := make([]protocol.InventoryRow, 0, len(all))
	for _, r := range all {
		if r.Released {
			continue
		}
		row := protocol.InventoryRow{Resource: s.resource(r.Kind, r.Handle), Liveness: s.liveness(ctx, r)}
		if r.Owner != "" {
			owner := r.Owner
			row.Owner = &owner
		}
		rows = append(rows, row)
	}
	if len(rows) > MaxInventory {
		rows = rows[len(rows)-MaxInventory:]
	}
	return protocol.Inventory{Resources: rows}, nil
}

// liveness is honest: unverifiable where galley cannot tell.
func (s *Service) liveness(ctx context.Context, r store.Resource) string {
	switch r.Kind {
	case protocol.KindWorker:
		if r.Worker != nil && r.Worker.Exited {
			return protocol.LivenessExited
		}
		l, err := s.runtime.Liveness(ctx, r.Handle)
		switch {
		case err != nil:
			return protocol.LivenessUnverifiable
		case l == LivenessLive:
			return protocol.LivenessLive
		case l == LivenessExited:
			return protocol.LivenessExited
		}
		return protocol.LivenessUnverifiable
	case protocol.KindBranch:
		_, exists, err := s.git.BranchHead(ctx, r.Handle)
		switch {
		case err != nil:
			return protocol.LivenessUnverifiable
		case exists:
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
