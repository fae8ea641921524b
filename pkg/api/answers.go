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
	var capability string
	var retryAfter int
	if e := galleyerr.As(err); e != nil {
		capability, retryAfter = e.Capability, e.RetryAfterSeconds
	}
	switch galleyerr.KindOf(err) {
	case galleyerr.Invalid:
		return http.StatusOK, protocol.NotApplied(protocol.ReasonRejected)
	case galleyerr.Unsupported:
		return http.StatusOK, protocol.UnsupportedOutcome(capability)
	case galleyerr.CrossHouse:
		return http.StatusOK, protocol.NotApplied(protocol.ReasonCrossHouse)
	case galleyerr.ForeignBackend:
		return http.StatusOK, protocol.NotApplied(protocol.ReasonForeignBackend)
	case galleyerr.RateLimited:
		return http.StatusOK, protocol.RateLimited(retryAfter)
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

// encodeAnswer encodes one of the protocol's answers with its encoder in
// package protocol, the one encoding of every answer galley sends: compact,
// in a fixed field order, arrays never null, and a value the client would
// not read refused (with an error of kind Other). Any other body (an
// error's, the worker API's) is encoding/json's.
func encodeAnswer(v any) ([]byte, error) {
	switch a := v.(type) {
	case protocol.EffectOutcome:
		return protocol.EncodeEffectOutcome(a)
	case protocol.LookupAnswer:
		return protocol.EncodeLookupAnswer(a)
	case protocol.Observation:
		return protocol.EncodeObservation(a)
	case protocol.Inventory:
		return protocol.EncodeInventory(a)
	case protocol.UsageAnswer:
		return protocol.EncodeUsageAnswer(a)
	case protocol.MailboxAnswer:
		return protocol.EncodeMailboxAnswer(a)
	case protocol.Descriptor:
		return protocol.EncodeDescriptor(a)
	}
	return json.Marshal(v)
}

// writeJSON sends v with status. A value that does not encode (an answer
// the client would not read: galley's own bug) is answered 500, which
// leaves the client uncertain, and logged as the request's error.
func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	b, err := encodeAnswer(v)
	if err != nil {
		requestLogFrom(r.Context()).err = err
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
