package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// workerRoutes serves the harness's API. Each call is authenticated by the
// worker's own credential, which names the worker: a worker can act only as
// itself, and kitchn's token is not accepted here.
func (h *Handler) workerRoutes(ws Workers) {
	h.mux.HandleFunc("POST "+workerapi.PathCredential, h.credential(ws))
	h.mux.HandleFunc("POST "+workerapi.PathSelf, h.worker(ws, func(ctx context.Context, id string, _ []byte) (any, error) {
		return ws.WorkerSelf(ctx, id)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathReady, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.ReadyRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerReady(ctx, id, req.Evidence)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathPost, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.PostRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return ws.WorkerPost(ctx, id, req)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathInbox, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.InboxRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return ws.WorkerInbox(ctx, id, req.After, time.Duration(req.WaitMs)*time.Millisecond)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathWake, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		if err := decodeStrict(b, &workerapi.WakeRequest{}); err != nil {
			return nil, err
		}
		return ws.WorkerWake(ctx, id)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathWait, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.WaitRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerWait(ctx, id, req.After, time.Duration(req.WaitMs)*time.Millisecond)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathUsage, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.UsageRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerUsage(ctx, id, req.Report)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathEvents, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.EventsRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerEvents(ctx, id, req.Events)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathExited, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.ExitedRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerExitReport(ctx, id, req.Code, req.Reason)
	}))
	h.mux.HandleFunc("POST "+workerapi.PathPark, h.worker(ws, func(ctx context.Context, id string, b []byte) (any, error) {
		var req workerapi.ParkRequest
		if err := decodeStrict(b, &req); err != nil {
			return nil, err
		}
		return workerapi.Ack{}, ws.WorkerPark(ctx, id, req)
	}))
}

// credential exchanges a bootstrap code; the code, not a bearer token, is
// the proof, and every refusal looks the same.
func (h *Handler) credential(ws Workers) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		var req workerapi.CredentialRequest
		if err := decodeStrict(body, &req); err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		token, err := ws.ExchangeBootstrap(r.Context(), req.Handle, req.Code, req.Claim, proofOf(r))
		if err != nil {
			h.failWorker(w, r, err)
			return
		}
		writeJSON(w, r, http.StatusOK, workerapi.CredentialAnswer{Token: token})
	}
}

var errNoWorkerToken = errors.New("missing worker credential")

func (h *Handler) worker(ws Workers, call func(ctx context.Context, handle string, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := workerCredential(r)
		if !ok {
			h.failWorker(w, r, galleyerr.E(galleyerr.Unauthorized, errNoWorkerToken))
			return
		}
		handle, err := ws.AuthenticateWorkerCall(r.Context(), token, proofOf(r))
		if err != nil {
			h.failWorker(w, r, err)
			return
		}
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		ans, err := call(r.Context(), handle, body)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, r, http.StatusOK, ans)
	}
}

// decodeStrict decodes one JSON value with no unknown fields; an empty body
// is an empty object.
func decodeStrict(b []byte, v any) error {
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return galleyerr.E(galleyerr.Malformed, "body is not the expected JSON", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return galleyerr.Errorf(galleyerr.Malformed, "trailing data after the JSON body")
	}
	return nil
}

// workerCredential is the credential of "Authorization: DPoP <token>" (a
// bound credential's scheme, RFC 9449), or of "Bearer <token>", which is
// refused the same way for want of a proof.
func workerCredential(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	const p = dpop.Scheme + " "
	if len(v) > len(p) && strings.EqualFold(v[:len(p)], p) {
		return strings.TrimSpace(v[len(p):]), true
	}
	return bearer(r)
}

// proofOf is what the request's DPoP proof is checked against.
func proofOf(r *http.Request) dpop.Request {
	return dpop.Request{Proof: r.Header.Get(dpop.Header), Method: r.Method, Path: r.URL.Path}
}

// failWorker answers a worker call's failure; a 401 says which scheme and
// algorithm a worker must use.
func (h *Handler) failWorker(w http.ResponseWriter, r *http.Request, err error) {
	if galleyerr.Is(galleyerr.Unauthorized, err) {
		w.Header().Set("WWW-Authenticate", dpop.Scheme+` algs="ES256"`)
	}
	h.fail(w, r, err, readAnswer)
}
