package gitserve

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// Defaults of what one gate (BudgetedPushGate) holds at once beside its
// Budget's bytes. An agent's git runs one network operation at a time, a
// push or a fetch being a request or two in a row: these leave room for a
// few side by side and bound the git processes, descriptors and disk a
// flood can take.
const (
	// DefaultPushesInFlight bounds the receive-pack requests served at once.
	DefaultPushesInFlight = 2
	// DefaultRequestsInFlight bounds the requests of any kind served at
	// once (each may run a git process, and a fetch's body may be spooled:
	// MaxFetchBody).
	DefaultRequestsInFlight = 4
	// DefaultBodyTimeout bounds the time a request's body (a push's pack,
	// a fetch's negotiation) takes to arrive.
	DefaultBodyTimeout = 10 * time.Minute
	// DefaultRequestTimeout bounds a request's whole answer: a client that
	// stops reading a fetch's pack holds a git process no longer.
	DefaultRequestTimeout = time.Hour
	// MaxFetchBody bounds a fetch's request body (its "want" and "have"
	// lines), which Backend spools to disk when it comes chunked.
	MaxFetchBody = 16 << 20
)

// A GateOption changes one of BudgetedPushGate's bounds.
type GateOption func(*gateLimits)

type gateLimits struct {
	pushes, requests      int
	bodyTime, requestTime time.Duration
	spoolDir              string
}

func defaultGateLimits() gateLimits {
	return gateLimits{
		pushes: DefaultPushesInFlight, requests: DefaultRequestsInFlight,
		bodyTime: DefaultBodyTimeout, requestTime: DefaultRequestTimeout,
	}
}

// WithPushesInFlight bounds the pushes the gate serves at once (n > 0); a
// push beyond them is refused at once with git's report-status, saying so.
func WithPushesInFlight(n int) GateOption {
	return func(l *gateLimits) {
		if n > 0 {
			l.pushes = n
		}
	}
}

// WithRequestsInFlight bounds the requests of any kind the gate serves at
// once (n > 0, and at least the pushes); one beyond them is answered 429.
func WithRequestsInFlight(n int) GateOption {
	return func(l *gateLimits) {
		if n > 0 {
			l.requests = n
		}
	}
}

// WithBodyTimeout bounds the time a request's body takes to arrive (d > 0).
// A push whose pack is not whole by then is refused and its spool dropped.
func WithBodyTimeout(d time.Duration) GateOption {
	return func(l *gateLimits) {
		if d > 0 {
			l.bodyTime = d
		}
	}
}

// WithRequestTimeout bounds the time the gate writes a request's answer
// (d > 0); past it the answer is cut off.
func WithRequestTimeout(d time.Duration) GateOption {
	return func(l *gateLimits) {
		if d > 0 {
			l.requestTime = d
		}
	}
}

// WithSpoolDir puts the gate's pack spools (unlinked temporary files) in
// dir rather than the system's temporary folder.
func WithSpoolDir(dir string) GateOption {
	return func(l *gateLimits) { l.spoolDir = dir }
}

// errBodyTimeout is what reading a request body returns once its time is
// up.
var errBodyTimeout = errors.New("the request body took too long to arrive")

// timedBody is a request body that must arrive whole within a time limit.
// The limit is a read deadline on the connection, so that a read waiting
// on a silent client ends too; it is lifted once the body has been read to
// its end, so that what the handler does after (forwarding a push, writing
// a fetch's pack) is not cut, and the server's watch on the connection,
// which starts then, is not mistaken for a read past the deadline.
type timedBody struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	ended   bool
	expired bool
}

// timeBody puts r's body on a clock of d; a request without a body is left
// as it is.
func timeBody(w http.ResponseWriter, r *http.Request, d time.Duration) *timedBody {
	b := &timedBody{body: r.Body, rc: http.NewResponseController(w)}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		b.body, b.ended = http.NoBody, true
		return b
	}
	// A writer without deadlines (a test's recorder) leaves the body
	// untimed.
	_ = b.rc.SetReadDeadline(time.Now().Add(d))
	return b
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	switch {
	case err == io.EOF && !b.ended:
		b.ended = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.expired = true
		err = errBodyTimeout
	}
	return n, err
}

func (b *timedBody) Close() error { return b.body.Close() }

// tooMany answers a request over one of the gate's bounds, reading none
// of its body: the connection closes after the answer, and the server's
// own reading of what is left (up to 256 KiB, at the client's pace) ends
// at once.
func tooMany(w http.ResponseWriter, msg string) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	w.Header().Set("Retry-After", "5")
	w.Header().Set("Connection", "close")
	http.Error(w, msg, http.StatusTooManyRequests)
}
