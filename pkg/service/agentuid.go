package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"

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
	return s.agentUIDFor(n)
}

// agentUIDSpan is how many agent uids a house has.
const agentUIDSpan = workerapi.AgentUIDEnd - workerapi.AgentUIDBase

// agentUIDFor maps the house's n-th count to its uid: consecutive from the
// deployment's own offset in the range, wrapping at its end. The offset
// keeps two deployments on one machine (a developer's server beside a
// test's, or two houses) from numbering agents alike: a harness ends its
// agent by killing every process of the agent's uid, which would reach
// another deployment's agent of the same number. It is derived from the
// worker signing key, so it is stable for a deployment and differs
// between two.
func (s *Service) agentUIDFor(n int64) (uint32, error) {
	if n < 1 || n > agentUIDSpan {
		return 0, galleyerr.Errorf(galleyerr.Other, "the house has used every agent uid (count %d; at most %d workers)",
			n, agentUIDSpan)
	}
	return uint32(workerapi.AgentUIDBase + (s.agentUIDOffset()+n-1)%agentUIDSpan), nil
}

// agentUIDOffset is the deployment's first agent uid, less AgentUIDBase.
func (s *Service) agentUIDOffset() int64 {
	m := hmac.New(sha256.New, s.cfg.WorkerSecret)
	m.Write([]byte("galley agent uid offset"))
	return int64(binary.BigEndian.Uint32(m.Sum(nil)) % agentUIDSpan)
}
