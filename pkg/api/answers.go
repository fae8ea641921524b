package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// This file is the one place where an error's kind becomes an answer.

// effectAnswer maps an effect's error to its answer. A definite refusal of
// a well-formed request is 200 not-applied (the client reads any 4xx other
// than 401, 403 and 429 as uncertain); a failure that leaves the outcome
// open is a 5xx or 409, so the client reconciles by lookup.
func effectAnswer(err error) (int, any) {
	e := galleyerr.As(err)
	kind := galleyerr.KindOf(err)
	switch kind {
	case galleyerr.Invalid:
		return http.StatusOK, protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: protocol.ReasonRejected}
	case galleyerr.Unsupported:
		out := protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: protocol.ReasonUnsupported}
		if e != nil && protocol.IsCapability(e.Capability) {
			out.Capability = e.Capability
		}
		return http.StatusOK, out
	case galleyerr.CrossHouse:
		return http.StatusOK, protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: protocol.ReasonCrossHouse}
	case galleyerr.ForeignBackend:
		return http.StatusOK, protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: protocol.ReasonForeignBackend}
	case galleyerr.RateLimited:
		out := protocol.EffectOutcome{Status: protocol.StatusNotApplied, Reason: protocol.ReasonRateLimited}
		if e != nil && e.RetryAfterSeconds > 0 {
			out.RetryAfterSeconds = e.RetryAfterSeconds
		}
		return http.StatusOK, out
	}
	return readAnswer(err)
}

// readAnswer maps a read's error (and an effect's uncertain one) to a
// non-200 status: for reads the client infers nothing from it.
func readAnswer(err error) (int, any) {
	status := http.StatusInternalServerError
	switch galleyerr.KindOf(err) {
	case galleyerr.Malformed, galleyerr.Invalid:
		status = http.StatusBadRequest
	case galleyerr.TooLarge:
		status = http.StatusRequestEntityTooLarge
	case galleyerr.Unauthorized:
		status = http.StatusUnauthorized
	case galleyerr.NotFound:
		status = http.StatusNotFound
	case galleyerr.Conflict, galleyerr.InFlight:
		status = http.StatusConflict
	case galleyerr.Unavailable:
		status = http.StatusServiceUnavailable
	case galleyerr.RateLimited:
		status = http.StatusTooManyRequests
	}
	return status, errorBody(status, err)
}

type errorJSON struct {
	Error string `json:"error"`
}

// errorBody says what went wrong without echoing secrets: messages are
// built by galley from bounded, quoted values, and internal causes are not
// shown.
func errorBody(status int, err error) errorJSON {
	if status >= 500 {
		return errorJSON{Error: http.StatusText(status)}
	}
	if e := galleyerr.As(err); e != nil && e.Msg != "" {
		return errorJSON{Error: e.Msg}
	}
	return errorJSON{Error: http.StatusText(status)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"Internal Server Error"}`)
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appliedBody encodes an applied answer around the stored receipt bytes, so
// that every replay is byte for byte the first answer.
func appliedBody(receipt json.RawMessage) []byte {
	b := make([]byte, 0, len(receipt)+32)
	b = append(b, `{"status":"applied","receipt":`...)
	b = append(b, receipt...)
	return append(b, '}')
}
