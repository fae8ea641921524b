package service

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// A worker's credential is "<handle>.<mac>", the mac an HMAC under the
// deployment's worker secret of the handle and the worker record's
// credential nonce. It lets the worker act as itself and nothing else; it
// is derived, not stored, so every attempt of a launch hands the same
// credential to the same worker, and a store dump reveals no credential.
//
// It lives as long as its worker: once released the worker's credential
// authenticates nothing, and replacing the record's nonce
// (RevokeWorkerCredential) voids that one credential without rotating the
// secret every other worker's credential hangs on. A settled worker's
// credential still reads (self, inbox) and sends the final reports (the
// exit report once, one usage report after its own worker-done); every
// other call is refused (see workerside.go).

func (s *Service) workerToken(handle, nonce string) string {
	return handle + "." + s.workerMAC(handle, nonce)
}

func (s *Service) workerMAC(handle, nonce string) string {
	m := hmac.New(sha256.New, s.cfg.WorkerSecret)
	m.Write([]byte("galley-worker\x00" + handle))
	if nonce != "" {
		// Records made before nonces keep the credential their worker holds.
		m.Write([]byte("\x00" + nonce))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// launchNonce is a launch's first credential nonce: derived from its key,
// so that every attempt of the launch (and each retried start of its
// compute, whose parameters must not change) hands out the same credential.
func (s *Service) launchNonce(key string) string { return s.derive("n-", key) }

var errBadCredential = galleyerr.Errorf(galleyerr.Unauthorized, "bad worker credential")

// AuthenticateWorker returns the handle a worker credential names, if the
// credential is genuine and its worker's current one, and the worker has
// not been released. Every refusal is Unauthorized (401); a store failure
// is Unavailable.
func (s *Service) AuthenticateWorker(ctx context.Context, token string) (string, error) {
	handle, _, err := s.authenticateWorker(ctx, token)
	return handle, err
}

func (s *Service) authenticateWorker(ctx context.Context, token string) (string, store.Resource, error) {
	handle, ok := workerapi.TokenHandle(token)
	if !ok {
		return "", store.Resource{}, galleyerr.Errorf(galleyerr.Unauthorized, "malformed worker credential")
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if galleyerr.Is(galleyerr.NotFound, err) {
		return "", res, errBadCredential
	}
	if err != nil {
		return "", res, err
	}
	if res.Worker == nil {
		return "", res, errBadCredential
	}
	mac := token[len(handle)+1:]
	if !hmac.Equal([]byte(mac), []byte(s.workerMAC(handle, res.Worker.CredentialNonce))) {
		return "", res, errBadCredential
	}
	if res.Released {
		return "", res, galleyerr.Errorf(galleyerr.Unauthorized, "the worker was released; its credential is void")
	}
	return handle, res, nil
}

// RevokeWorkerCredential voids the worker's current credential (and the
// bootstrap code derived from it): the record's nonce is replaced by a
// random one that no credential was ever made with. Other workers'
// credentials are untouched. The worker keeps running, but every call its
// harness makes is refused; cancel it to stop its compute.
func (s *Service) RevokeWorkerCredential(ctx context.Context, handle string) error {
	_, err := s.updateWorker(ctx, handle, func(w *store.Worker) error {
		w.CredentialNonce = "r-" + randomHex(16)
		return nil
	})
	if err == nil {
		s.log.Warn("worker credential revoked", "worker", handle)
		s.event(handle, eventlog.KindCredential, "the worker's credential was revoked")
	}
	return err
}
