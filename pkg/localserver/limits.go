package localserver

import (
	"crypto/subtle"
	"io"
	"net/http"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Defaults of the HTTP server's limits (see Options).
const (
	DefaultReadHeaderTimeout  = 10 * time.Second
	DefaultBodyTimeout        = 15 * time.Second
	DefaultIdleTimeout        = 60 * time.Second
	DefaultMaxHeaderBytes     = 64 << 10
	DefaultMaxUnauthenticated = 64
)

// limits fills in the defaults of unset HTTP limits.
func (o *Options) limits() {
	setDur := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	setDur(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	setDur(&o.BodyTimeout, DefaultBodyTimeout)
	setDur(&o.IdleTimeout, DefaultIdleTimeout)
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxUnauthenticated <= 0 {
		o.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	o.Conns = o.Conns.WithDefaults()
}

// trustKitchn marks the connection of a request that carries kitchn's
// token as reserved capacity (connlimit.Trust): agents share kitchn's
// loopback address, so per-peer bounds alone cannot tell them apart, and a
// flood of their connections must not close kitchn's. The handler still
// authenticates the request itself; a connection is trusted once.
func trustKitchn(h http.Handler, token []byte) http.Handler {
	want := "Bearer " + string(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); len(got) == len(want) && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 {
			connlimit.Trust(r.Context())
		}
		h.ServeHTTP(w, r)
	})
}

// newHTTPServer is the server for h under o's limits. It sets no
// ReadTimeout nor WriteTimeout: both would end the long polls
// (deliveries/await, the worker inbox), which hold a call for up to the
// await cap after its body arrived. The body deadline is per request
// instead (BodyDeadline).
func newHTTPServer(h http.Handler, o Options) *http.Server {
	h = BodyDeadline(h, o.BodyTimeout)
	h = limitUnauthenticated(h, o.MaxUnauthenticated)
	return &http.Server{Handler: h, ReadHeaderTimeout: o.ReadHeaderTimeout, IdleTimeout: o.IdleTimeout,
		MaxHeaderBytes: o.MaxHeaderBytes}
}

// BodyDeadline gives a request's body d to arrive, counted from when its
// handler starts (just after the headers): a client that sends headers and
// then trickles the body, or never sends it, sees its read fail at the
// deadline and its connection closed. Once the body is read to its end the
// deadline is lifted, so a long poll can still answer late; a request
// without a body gets none, since nothing is read from it (and a read
// deadline left on an idle connection would cancel the call).
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline once the body is read to its end.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		// net/http now reads ahead on the connection to notice a client
		// that goes away; under a deadline that read would fail and cancel
		// the call. (net/http lifts the deadline itself when it starts that
		// read, as of Go 1.26; this does not depend on it.)
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// limitUnauthenticated lets at most n unauthenticated requests (the
// credential exchange, whose proof is in the body, and any request without
// an Authorization header) be served at once; the others are answered 503
// at once, which the harness's client retries. Authenticated calls are not
// counted: kitchn's and workers' tokens are checked before their bodies are
// read.
func limitUnauthenticated(h http.Handler, n int) http.Handler {
	const busy = `{"error":"too many unauthenticated requests in flight"}`
	sem := make(chan struct{}, n)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != workerapi.PathCredential && r.Header.Get("Authorization") != "" {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
			h.ServeHTTP(w, r)
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, busy)
		}
	})
}
