package awswire

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Handler serves one operation: from the request's body, its answer (sent
// as JSON with HTTP 200) or an error.
type Handler func(body []byte) (any, *Error)

// Service is the server side of one awsJson API; it is an http.Handler.
// Set its fields before it serves, and change none while it does (the
// Faults and the stand-in's state behind the handlers are its own to
// guard).
type Service struct {
	// Name names the service in messages: "ECS", "Secrets Manager".
	Name string
	// TargetPrefix is what X-Amz-Target starts with, before the
	// operation: "AmazonEC2ContainerServiceV20141113.".
	TargetPrefix string
	// ContentType is the protocol's (ContentTypeJSON10 or 11): every
	// answer's.
	ContentType string
	// MaxBody bounds a request's body, in bytes; a larger one is refused
	// (413) unread.
	MaxBody int
	// BodyTimeout, if positive, bounds how long a body may take to arrive
	// once the headers have: a client that trickles its body, or never
	// sends it, is cut off rather than waited for.
	BodyTimeout time.Duration
	// Admit, if set, refuses a request the service would not serve (its
	// method, path, headers, authentication: the checks the service makes,
	// in its order) before the operation is looked at, and names its
	// caller, for the record, whether it refuses or not.
	Admit func(r *http.Request) (caller string, refusal *Error)
	// Ops serve the operations, by name (X-Amz-Target without the
	// prefix); any other operation is refused as one the stand-in does
	// not serve, never faked.
	Ops map[string]Handler
	// Faults, if set, answer a call before its handler does.
	Faults *Faults
	// Record, if set, is told of every exchange once answered.
	Record func(Exchange)
	// Now stamps the exchanges; nil is time.Now.
	Now func() time.Time
}

// Exchange is one request and its answer, as Record is told of it.
type Exchange struct {
	Op     string // from X-Amz-Target, without the prefix
	Target string // X-Amz-Target as sent
	Body   []byte // as received, at most MaxBody+1 bytes; the Service keeps none
	Header http.Header
	Caller string    // as Admit named it
	Status int       // the answer's
	Code   string    // the error code, if it failed
	Time   time.Time // when it arrived
}

// ServeHTTP serves one call.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Amzn-Requestid", UUID())
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	target := r.Header.Get("X-Amz-Target")
	op, _ := strings.CutPrefix(target, s.TargetPrefix)
	x := Exchange{Op: op, Target: target, Header: r.Header, Time: now()}
	body, err := s.readBody(w, r)
	x.Body = body
	var refusal *Error
	if s.Admit != nil {
		x.Caller, refusal = s.Admit(r)
	}
	answer := func(status int, v any) {
		x.Status = status
		if s.Record != nil {
			s.Record(x)
		}
		b, _ := json.Marshal(v)
		w.Header().Set("Content-Type", s.ContentType)
		w.WriteHeader(status)
		_, _ = w.Write(b)
	}
	fail := func(e *Error) {
		x.Code = e.Code
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
		}
		w.Header().Set("X-Amzn-Errortype", e.Code)
		answer(e.status(), e.body())
	}
	switch {
	case err != nil:
		fail(Errorf(400, "SerializationException", "cannot read the body"))
		return
	case len(body) > s.MaxBody:
		fail(Errorf(413, "SerializationException", "the body is larger than %d bytes", s.MaxBody))
		return
	case refusal != nil:
		fail(refusal)
		return
	case !strings.HasPrefix(target, s.TargetPrefix):
		fail(Errorf(400, "UnknownOperationException", "no %s operation named in X-Amz-Target", s.Name))
		return
	}
	if s.Faults != nil {
		if f, ok := s.Faults.Take(op); ok {
			if f.Err != nil {
				fail(f.Err)
			} else {
				answer(200, f.Out)
			}
			return
		}
	}
	h, ok := s.Ops[op]
	if !ok {
		fail(Errorf(400, "UnknownOperationException", "the stand-in does not serve %s", op))
		return
	}
	out, e := h(body)
	if e != nil {
		fail(e)
		return
	}
	answer(200, out)
}

// readBody reads at most MaxBody+1 bytes of r's body, within BodyTimeout
// if set. The deadline is left in place: net/http lifts it when it has
// read a body to its end, and a body cut short must stay cut off (net/http
// reads what remains of a small one before answering). A body behind a
// handler that cannot set deadlines (a wrapper without Unwrap) is bounded
// by its server's limits only.
func (s *Service) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if s.BodyTimeout > 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.BodyTimeout))
	}
	return io.ReadAll(io.LimitReader(r.Body, int64(s.MaxBody)+1))
}
