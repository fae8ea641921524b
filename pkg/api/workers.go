package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

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
		token, err := ws.ExchangeBootstrap(r.Context(), req.Handle, req.Code, req.Claim)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, http.StatusOK, workerapi.CredentialAnswer{Token: token})
	}
}

func (h *Handler) worker(ws Workers, call func(ctx context.Context, handle string, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearer(r)
		if !ok {
			h.fail(w, r, galleyerr.E(galleyerr.Unauthorized, errNoWorkerToken), readAnswer)
			return
		}
		handle, err := ws.AuthenticateWorker(r.Context(), token)
		if err != nil {
			h.fail(w, r, err, readAnswer)
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
		writeJSON(w, http.StatusOK, ans)
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
