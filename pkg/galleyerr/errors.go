// Package galleyerr gives galley's errors a Kind, in the manner of Upspin's
// errors package, so that one place (package api) can map every failure to
// the protocol answer the client expects: a not-applied reason, a 4xx status
// or an uncertain 5xx.
package galleyerr

import (
	"errors"
	"fmt"
	"strings"
)

// Kind classifies an error by the answer it deserves, not by where it came
// from.
type Kind uint8

const (
	Other          Kind = iota // unclassified: an internal error, answered 500 (uncertain)
	Invalid                    // well-formed but refused: not-applied "rejected"
	Unsupported                // an operation or executor galley does not serve: not-applied "unsupported"
	CrossHouse                 // names another house: not-applied "cross-house"
	ForeignBackend             // names another backend namespace: not-applied "foreign-backend"
	RateLimited                // capacity or throttling: not-applied "rate-limited"
	Malformed                  // the body is not JSON of the right shape: 400
	TooLarge                   // the body exceeds its limit: 413
	Unauthorized               // missing or wrong bearer token: 401
	NotFound                   // a record that does not exist
	Conflict                   // a conditional write lost its condition; retry from a fresh read
	InFlight                   // another copy of the request holds the key: uncertain (409)
	Fenced                     // a superseded coordinator: mailbox "fenced"
	Unavailable                // a dependency failed transiently: uncertain (503)
)

var kindNames = [...]string{
	Other: "other", Invalid: "invalid", Unsupported: "unsupported", CrossHouse: "cross-house",
	ForeignBackend: "foreign-backend", RateLimited: "rate-limited", Malformed: "malformed",
	TooLarge: "too-large", Unauthorized: "unauthorized", NotFound: "not-found", Conflict: "conflict",
	InFlight: "in-flight", Fenced: "fenced", Unavailable: "unavailable",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Error is a galley error: an operation, a kind, a message safe to show the
// client, and an optional underlying error.
type Error struct {
	Op   string // what was being done, such as "effects.launch"
	Kind Kind
	Msg  string // safe for logs and answers: never a secret
	// Capability names the missing capability for Unsupported.
	Capability string
	// RetryAfterSeconds is a hint for RateLimited; 0 means none.
	RetryAfterSeconds int
	Err               error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Kind.String())
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// E builds an error from its arguments, by type: a Kind, a string (the
// message), an error (the cause) and an Op.
func E(args ...any) error {
	e := &Error{}
	for _, a := range args {
		switch a := a.(type) {
		case Kind:
			e.Kind = a
		case Op:
			e.Op = string(a)
		case string:
			e.Msg = a
		case error:
			e.Err = a
		default:
			panic(fmt.Sprintf("galleyerr.E: bad argument %T", a))
		}
	}
	return e
}

// Op names the operation in E's arguments.
type Op string

// Errorf is E(kind, fmt.Sprintf(format, args...)).
func Errorf(kind Kind, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// KindOf reports the kind of the outermost classified error in err's chain,
// or Other.
func KindOf(err error) Kind {
	var e *Error
	for err != nil {
		if errors.As(err, &e) {
			if e.Kind != Other {
				return e.Kind
			}
			err = e.Err
			continue
		}
		return Other
	}
	return Other
}

// Is reports whether err is of kind k.
func Is(k Kind, err error) bool { return err != nil && KindOf(err) == k }

// As returns the first *Error of err's chain with a kind, or nil.
func As(err error) *Error {
	var e *Error
	for err != nil {
		if !errors.As(err, &e) {
			return nil
		}
		if e.Kind != Other {
			return e
		}
		err = e.Err
	}
	return nil
}
