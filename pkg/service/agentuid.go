package service

import (
	"context"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// launchAgentUID answers the agent uid for the worker record a launch of
// key is about to create: the one an earlier attempt of the key already
// recorded, else the house's next (store.CounterAgentUID). Two attempts
// racing may each take a number; only the record's counts (createResource
// keeps the first record written), and the harness reads it from there,
// so a retried launch runs its agent under the same uid. A number taken
// and never recorded is simply never used.
func (s *Service) launchAgentUID(ctx context.Context, handle, key string) (uint32, error) {
	cur, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	switch {
	case err == nil && cur.Owner == key && cur.Worker != nil && cur.Worker.AgentUID != 0:
		return cur.Worker.AgentUID, nil
	case err != nil && !galleyerr.Is(galleyerr.NotFound, err):
		return 0, err
	}
	n, err := s.store.NextCount(ctx, store.CounterAgentUID)
	if err != nil {
		return 0, err
	}
	return agentUIDFor(n)
}

// agentUIDFor maps the house's n-th count to its uid.
func agentUIDFor(n int64) (uint32, error) {
	if n < 1 || n > workerapi.AgentUIDEnd-workerapi.AgentUIDBase {
		return 0, galleyerr.Errorf(galleyerr.Other, "the house has used every agent uid (count %d; at most %d workers)",
			n, workerapi.AgentUIDEnd-workerapi.AgentUIDBase)
	}
	return uint32(workerapi.AgentUIDBase + n - 1), nil
}
