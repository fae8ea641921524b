package service

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// Worker credentials are bound to a key their harness makes in memory at
// start (pkg/dpop, after RFC 9449): the bootstrap exchange records the
// key's thumbprint on the worker's record with its claim, and a harness
// given its credential directly (the local runtime's token file) binds it
// with its first call, made before its agent starts. From then on every
// call must carry a fresh proof signed by that key, naming the call's
// method and path, the credential's hash and a random id that is accepted
// once (the store's nonces, shared by every process). A credential read
// from an environment, a log or a core dump is worthless without the key.

// nonceLife is how long a proof's id is kept: past it the proof's time is
// refused anyway.
const nonceLife = dpop.Window + time.Second

// AuthenticateWorkerCall answers the worker a call's credential names, if
// the credential is genuine (AuthenticateWorker) and the call's proof is
// valid, signed by the key the credential is bound to (binding it if
// none is yet), and not seen before. Every refusal is Unauthorized with a
// message that says which check failed and holds no secret.
func (s *Service) AuthenticateWorkerCall(ctx context.Context, token string, req dpop.Request) (string, error) {
	checked, err := dpop.Verify(req.Proof, req.Method, req.Path, token, s.clock.Now())
	if err != nil {
		return "", galleyerr.E(galleyerr.Unauthorized, err.Error())
	}
	handle, res, err := s.authenticateWorker(ctx, token)
	if err != nil {
		return "", err
	}
	switch bound := res.Worker.CredentialJKT; {
	case bound == "":
		if err := s.bindKey(ctx, handle, checked.JKT); err != nil {
			return "", err
		}
		s.log.Info("worker credential bound to its harness's key", "worker", handle)
	case bound != checked.JKT:
		s.log.Warn("a worker's credential was used with another key's proof", "worker", handle)
		return "", galleyerr.Errorf(galleyerr.Unauthorized, "the worker credential is bound to another key")
	}
	if err := s.useProof(ctx, handle, checked); err != nil {
		return "", err
	}
	return handle, nil
}

// bindKey records jkt as the worker's key unless another is recorded.
func (s *Service) bindKey(ctx context.Context, handle, jkt string) error {
	_, err := s.updateWorker(ctx, handle, func(w *store.Worker) error {
		switch w.CredentialJKT {
		case "":
			w.CredentialJKT = jkt
			return nil
		case jkt:
			return errNoChange
		}
		return galleyerr.Errorf(galleyerr.Unauthorized, "the worker credential is bound to another key")
	})
	return err
}

// useProof accepts a proof's id once.
func (s *Service) useProof(ctx context.Context, handle string, c dpop.Checked) error {
	fresh, err := s.store.UseNonce(ctx, "dpop#"+c.JKT+"#"+c.JTI, c.IssuedAt.Add(nonceLife))
	if err != nil {
		return err
	}
	if !fresh {
		s.log.Warn("a worker's DPoP proof was replayed", "worker", handle)
		return galleyerr.Errorf(galleyerr.Unauthorized, "the DPoP proof was used before: every call needs a fresh one")
	}
	return nil
}
