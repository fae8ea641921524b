package service

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// A worker's credential is "<handle>.<mac>", the mac an HMAC of the handle
// under the deployment's worker secret. It lets the worker act as itself and
// nothing else; it is derived, not stored, so every attempt of a launch
// hands the same credential to the same worker, and a store dump reveals no
// credential.

func (s *Service) workerToken(handle string) string {
	return handle + "." + s.workerMAC(handle)
}

func (s *Service) workerMAC(handle string) string {
	m := hmac.New(sha256.New, s.cfg.WorkerSecret)
	m.Write([]byte("galley-worker\x00" + handle))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// AuthenticateWorker returns the handle a worker credential names, if the
// credential is genuine.
func (s *Service) AuthenticateWorker(token string) (string, error) {
	handle, ok := workerapi.TokenHandle(token)
	if !ok {
		return "", galleyerr.Errorf(galleyerr.Unauthorized, "malformed worker credential")
	}
	mac := token[len(handle)+1:]
	if !hmac.Equal([]byte(mac), []byte(s.workerMAC(handle))) {
		return "", galleyerr.Errorf(galleyerr.Unauthorized, "bad worker credential")
	}
	return handle, nil
}
