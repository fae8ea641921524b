package awswire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Error is an error answer of an awsJson service: HTTP Status (400 when
// 0), the error Code, sent as X-Amzn-Errortype and as the body's __type,
// and Message, the body's message. A stand-in's messages never hold a
// request's secret.
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, if positive, is sent as a Retry-After header of that
	// many seconds.
	RetryAfter int
	// Fields are more members of the body, such as ECS's resourceIds of
	// a ConflictException.
	Fields map[string]any
}

// Errorf is an Error of status and code with a formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func (e *Error) status() int {
	if e.Status == 0 {
		return 400
	}
	return e.Status
}

// body is the error's JSON body: __type, message and the Fields, in the
// order encoding/json writes a map's keys (sorted).
func (e *Error) body() map[string]any {
	b := map[string]any{"__type": e.Code, "message": e.Message}
	for k, v := range e.Fields {
		b[k] = v
	}
	return b
}

// Decode decodes an operation's JSON input; an empty body is an empty
// object. Its error never quotes the body, which may carry a secret: it
// says only where the body is wrong.
func Decode(body []byte, v any) *Error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return Errorf(400, "SerializationException", "the body is not the operation's JSON: %s", where(err))
	}
	return nil
}

// Op is the Handler of an operation whose input decodes into In.
func Op[In, Out any](f func(*In) (Out, *Error)) Handler {
	return func(body []byte) (any, *Error) {
		in := new(In)
		if e := Decode(body, in); e != nil {
			return nil, e
		}
		out, e := f(in)
		if e != nil {
			return nil, e
		}
		return out, nil
	}
}

// where describes a JSON decoding error without quoting the input.
func where(err error) string {
	switch e := err.(type) {
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("member %s is not a %s", e.Field, e.Type)
	case *json.SyntaxError:
		return fmt.Sprintf("syntax error at offset %d", e.Offset)
	}
	return "malformed"
}
