package service

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/runtime/ecsrt/bootstrap"
	"github.com/galley-run/galley/pkg/store"
)

// ExchangeBootstrap answers a worker's credential for its one-time
// bootstrap code: only while the code is young (from the launch, or from
// the resume of a parked worker), only for a worker that has
// not settled, and only to the first claim (a second claimant, say one who
// read the code from the task's overrides, is refused and logged). Every
// refusal is the same Unauthorized error, so a caller learns nothing of why.
//
// The exchange carries a DPoP proof (pkg/dpop) without a credential: the
// credential is bound to the proof's key with the claim, and a retry of
// the first claim must come with the same key.
func (s *Service) ExchangeBootstrap(ctx context.Context, handle, code, claim string, proof dpop.Request) (string, error) {
	refused := galleyerr.Errorf(galleyerr.Unauthorized, "bootstrap code refused")
	if handle == "" || len(claim) < 16 || len(claim) > 256 {
		return "", refused
	}
	checked, err := dpop.Verify(proof.Proof, proof.Method, proof.Path, "", s.clock.Now())
	if err != nil {
		return "", galleyerr.E(galleyerr.Unauthorized, err.Error())
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if galleyerr.Is(galleyerr.NotFound, err) {
		return "", refused
	}
	if err != nil {
		return "", err
	}
	if res.Worker == nil {
		return "", refused
	}
	// The code is derived from the worker's current credential: a revoked
	// credential's code is refused with it.
	token := s.workerToken(handle, res.Worker.CredentialNonce)
	if !bootstrap.Valid(token, handle, code) {
		return "", refused
	}
	// Young counts from the compute's start: the launch, or the resume
	// of the worker's latest parking, whose task has a code of its own
	// (docs/parking.md).
	if res.Released || res.Worker == nil || res.Worker.State == protocol.StateSettled ||
		s.clock.Now().After(startedAt(res).Add(bootstrap.DefaultTTL)) {
		return "", refused
	}
	sum := sha256.Sum256([]byte(claim))
	want := hex.EncodeToString(sum[:])
	_, err = s.updateWorker(ctx, handle, func(w *store.Worker) error {
		switch {
		case w.CredentialClaim == "" && w.CredentialJKT == "":
			w.CredentialClaim, w.CredentialJKT = want, checked.JKT
			return nil
		case subtle.ConstantTimeCompare([]byte(w.CredentialClaim), []byte(want)) == 1 && w.CredentialJKT == checked.JKT:
			return errNoChange // a retry of the first claim
		}
		s.log.Warn("a second claim presented a worker's bootstrap code", "worker", handle)
		return refused
	})
	if err != nil {
		return "", err
	}
	if err := s.useProof(ctx, handle, checked); err != nil {
		return "", err
	}
	return token, nil
}
