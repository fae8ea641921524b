package protocol

import (
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// NotApplied is a not-applied outcome with reason, one of the five reasons.
func NotApplied(reason string) EffectOutcome {
	return EffectOutcome{Status: StatusNotApplied, Reason: reason}
}

// RateLimited is a rate-limited outcome; a retryAfter of 0 or less sends no
// hint.
func RateLimited(retryAfter int) EffectOutcome {
	o := NotApplied(ReasonRateLimited)
	if retryAfter > 0 {
		o.RetryAfterSeconds = retryAfter
	}
	return o
}

// UnsupportedOutcome is an unsupported outcome naming capability. A name
// that is not a real capability is left out, since the client would read
// the whole answer as unreadable (and the outcome as uncertain).
func UnsupportedOutcome(capability string) EffectOutcome {
	o := NotApplied(ReasonUnsupported)
	if IsCapability(capability) {
		o.Capability = capability
	}
	return o
}

// Applied is an applied outcome with its receipt.
func Applied(r Receipt) EffectOutcome {
	return EffectOutcome{Status: StatusApplied, Receipt: &r}
}

// Encoders: galley sends every answer through them (package api), and
// every receipt it stores. Each one refuses a value the client would not
// read, with an error of kind Other: such a value is galley's own bug, and
// an uncertain 500 is the only safe answer to it (never a not-applied,
// which would be a promise). Their output is compact, in a fixed field
// order, with arrays never null, so that one value always encodes to the
// same bytes.

// internal turns a validation error into an encoder error of kind Other,
// keeping its message but not its kind.
func internal(what string, err error) error {
	msg := err.Error()
	if e := galleyerr.As(err); e != nil {
		msg = e.Msg
	}
	return &galleyerr.Error{Kind: galleyerr.Other, Msg: "protocol: cannot encode " + what + ": " + msg}
}

func validOutcome(o EffectOutcome) error {
	switch o.Status {
	case StatusApplied:
		if o.Receipt == nil {
			return invalidf("receipt", "missing")
		}
		if o.Reason != "" || o.RetryAfterSeconds != 0 || o.Capability != "" {
			return invalidf("status", "applied carries only a receipt")
		}
		return o.Receipt.validate("receipt")
	case StatusNotApplied:
		switch {
		case o.Receipt != nil:
			return invalidf("receipt", "not allowed when not applied")
		case !IsReason(o.Reason):
			return invalidf("reason", "must be rejected, rate-limited, unsupported, cross-house or foreign-backend")
		case o.RetryAfterSeconds < 0 || o.RetryAfterSeconds != 0 && o.Reason != ReasonRateLimited:
			return invalidf("retryAfterSeconds", "only a positive hint on rate-limited")
		case o.Capability != "" && (o.Reason != ReasonUnsupported || !IsCapability(o.Capability)):
			return invalidf("capability", "only a real capability name on unsupported")
		}
		return nil
	}
	return invalidf("status", "must be applied or not-applied")
}

// EncodeEffectOutcome encodes the answer of POST /v1/effects. It does not
// know the service's backend: check the receipt with Receipt.Validate too.
func EncodeEffectOutcome(o EffectOutcome) ([]byte, error) {
	if err := validOutcome(o); err != nil {
		return nil, internal("effect outcome", err)
	}
	b := append([]byte(`{"status":`), appendString(nil, o.Status)...)
	if o.Status == StatusApplied {
		b = append(b, `,"receipt":`...)
		b = appendReceipt(b, *o.Receipt)
		return append(b, '}'), nil
	}
	b = append(b, `,"reason":`...)
	b = appendString(b, o.Reason)
	if o.RetryAfterSeconds > 0 {
		b = append(b, `,"retryAfterSeconds":`...)
		b = strconv.AppendInt(b, int64(o.RetryAfterSeconds), 10)
	}
	if o.Capability != "" {
		b = append(b, `,"capability":`...)
		b = appendString(b, o.Capability)
	}
	return append(b, '}'), nil
}

// EncodeLookupAnswer encodes applied (with its receipt), absent or unknown.
func EncodeLookupAnswer(a LookupAnswer) ([]byte, error) {
	switch a.Status {
	case StatusApplied:
		if a.Receipt == nil {
			return nil, internal("lookup answer", invalidf("receipt", "missing"))
		}
		if err := a.Receipt.validate("receipt"); err != nil {
			return nil, internal("lookup answer", err)
		}
		b := append([]byte(`{"status":"applied","receipt":`), appendReceipt(nil, *a.Receipt)...)
		return append(b, '}'), nil
	case StatusAbsent, StatusUnknown:
		if a.Receipt != nil {
			return nil, internal("lookup answer", invalidf("receipt", "only on applied"))
		}
		return append(appendString([]byte(`{"status":`), a.Status), '}'), nil
	}
	return nil, internal("lookup answer", invalidf("status", "must be applied, absent or unknown"))
}

// IsState reports whether s is one of the seven worker states.
func IsState(s string) bool {
	switch s {
	case StateStarting, StateReady, StateAwaitingReply, StateUserTakeover,
		StateSettled, StateMissing, StateUnknown:
		return true
	}
	return false
}

// EncodeObservation encodes {"state"} with "outcome" exactly when settled.
func EncodeObservation(o Observation) ([]byte, error) {
	switch {
	case !IsState(o.State):
		return nil, internal("observation", invalidf("state", "must be a worker state"))
	case o.State == StateSettled && !IsOutcome(o.Outcome):
		return nil, internal("observation", invalidf("outcome", "must be succeeded, failed or cancelled when settled"))
	case o.State != StateSettled && o.Outcome != "":
		return nil, internal("observation", invalidf("outcome", "only when settled"))
	}
	b := appendString([]byte(`{"state":`), o.State)
	if o.Outcome != "" {
		b = append(b, `,"outcome":`...)
		b = appendString(b, o.Outcome)
	}
	return append(b, '}'), nil
}

func isLiveness(s string) bool {
	return s == LivenessLive || s == LivenessExited || s == LivenessUnverifiable
}

// EncodeInventory encodes at most 1024 rows of exactly
// {"resource","owner","liveness"}, owner null when unknown.
func EncodeInventory(inv Inventory) ([]byte, error) {
	if len(inv.Resources) > MaxInventoryRows {
		return nil, internal("inventory", invalidf("resources", "more than 1024 rows"))
	}
	b := []byte(`{"resources":[`)
	for i, row := range inv.Resources {
		p := "resources[" + strconv.Itoa(i) + "]"
		if err := row.Resource.validate(p + ".resource"); err != nil {
			return nil, internal("inventory", err)
		}
		if row.Owner != nil && !IsReference(*row.Owner) {
			return nil, internal("inventory", invalidf(p+".owner", msgReference))
		}
		if !isLiveness(row.Liveness) {
			return nil, internal("inventory", invalidf(p+".liveness", "must be live, exited or unverifiable"))
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"resource":`...)
		b = appendResource(b, row.Resource)
		b = append(b, `,"owner":`...)
		if row.Owner == nil {
			b = append(b, "null"...)
		} else {
			b = appendString(b, *row.Owner)
		}
		b = append(b, `,"liveness":`...)
		b = appendString(b, row.Liveness)
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}
