package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

func (h *Handler) effects(e Effects) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := h.arrival(r)
		rl := requestLogFrom(r.Context())
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, effectAnswer)
			return
		}
		call, err := protocol.DecodeEffectCall(body)
		if err == nil {
			rl.key = call.Request.Key
			if hk := r.Header.Get("Idempotency-Key"); hk != "" && hk != call.Request.Key {
				err = galleyerr.Errorf(galleyerr.Invalid, "Idempotency-Key header differs from request.key")
			}
		}
		var receipt json.RawMessage
		if err == nil {
			receipt, err = e.Apply(r.Context(), call, arrived)
		}
		if err != nil {
			h.fail(w, r, err, effectAnswer)
			return
		}
		rl.answer = protocol.StatusApplied
		writeRaw(w, http.StatusOK, appliedBody(receipt))
	}
}

func (h *Handler) lookup(e Effects) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeEffectCall(body)
		if galleyerr.Is(galleyerr.Malformed, err) {
			h.fail(w, r, err, readAnswer)
			return
		}
		rl := requestLogFrom(r.Context())
		if err != nil {
			// galley never applies a request it refuses on its face, so
			// its key was not applied by it and never will be.
			rl.answer = protocol.StatusAbsent
			writeJSON(w, r, http.StatusOK, protocol.LookupAnswer{Status: protocol.StatusAbsent})
			return
		}
		rl.key = call.Request.Key
		ans, receipt, err := e.Lookup(r.Context(), call)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		rl.answer = ans.Status
		if ans.Status == protocol.StatusApplied {
			writeRaw(w, http.StatusOK, appliedBody(receipt))
			return
		}
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) descriptor(rd Reads) http.HandlerFunc {
	// The descriptor never changes while the process runs: encode it once.
	body := sync.OnceValues(func() ([]byte, error) { return protocol.EncodeDescriptor(rd.Descriptor()) })
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := body()
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeRaw(w, http.StatusOK, b)
	}
}

func (h *Handler) observe(rd Reads) http.HandlerFunc {
	return workerRead(h, func(ctx context.Context, res protocol.Resource) (any, error) { return rd.Observe(ctx, res) })
}

func (h *Handler) usage(rd Reads) http.HandlerFunc {
	return workerRead(h, func(ctx context.Context, res protocol.Resource) (any, error) { return rd.Usage(ctx, res) })
}

func workerRead(h *Handler, read func(context.Context, protocol.Resource) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeWorkerCall(body)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		ans, err := read(r.Context(), call.Worker)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) inventory(rd Reads) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		inv, err := rd.Inventory(r.Context())
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		writeJSON(w, r, http.StatusOK, inv)
	}
}

func (h *Handler) mailbox(m Mailbox, op string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeMailboxCall(body, op)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		var ans protocol.MailboxAnswer
		switch op {
		case "next":
			ans, err = m.Next(r.Context(), call.Run, call.Coordinator)
		case "acknowledge":
			ans, err = m.Acknowledge(r.Context(), call.Run, call.Coordinator, call.Delivery)
		case "await":
			ans, err = m.Await(r.Context(), call.Run, call.Coordinator, time.Duration(*call.WaitMs)*time.Millisecond)
		}
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		requestLogFrom(r.Context()).answer = ans.Status
		writeJSON(w, r, http.StatusOK, ans)
	}
}

func (h *Handler) adopt(m Mailbox) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(r)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		call, err := protocol.DecodeMailboxCall(body, "adopt")
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		fenced, err := m.Adopt(r.Context(), call.Run, call.Coordinator)
		if err != nil {
			h.fail(w, r, err, readAnswer)
			return
		}
		if fenced {
			requestLogFrom(r.Context()).answer = protocol.MailFenced
		}
		writeRaw(w, http.StatusOK, protocol.EncodeAdoptAnswer(fenced))
	}
}
