// Package client is the harness's HTTP client for galley's worker-facing
// API (package workerapi): JSON in and out, a bounded deadline per attempt,
// retries with capped, jittered exponential backoff where a retry is safe,
// and errors that carry galleyerr kinds. Only transport failures and 5xx
// answers are retried: a 429 (the worker's posting budget, with its
// Retry-After in RetryAfterSeconds), 401, 403 or 409 is final for the call,
// but for the bootstrap exchange, whose throttled 429 is tried again. The worker token goes only into the
// Authorization header; no error or log line ever holds it. With a proof
// key (WithProofKey), every attempt also carries a fresh DPoP proof.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Defaults; each can be changed by an Option.
const (
	DefaultCallTimeout = 10 * time.Second
	DefaultAttempts    = 5
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffCap  = 5 * time.Second
	// MaxInboxWait caps one long poll's waitMs at the longest galley
	// holds a call, below the 55 s most gateways allow for a whole
	// request (and API Gateway's 30 s).
	MaxInboxWait = contract.AwaitCap
)

// maxAnswer bounds what is read of one answer: an inbox answer may carry
// several 64 KiB bodies.
const maxAnswer = 8 << 20

// Client calls the worker API as one worker. It is safe for concurrent use.
type Client struct {
	base        *url.URL
	token       string
	hc          *http.Client
	callTimeout time.Duration
	attempts    int
	backoffBase time.Duration
	backoffCap  time.Duration
	key         *dpop.Key
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client; its redirect policy is replaced so
// that a 3xx is an answer, never followed with the token.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithProofKey makes every attempt carry a fresh DPoP proof signed by k
// (pkg/dpop), and the credential under the DPoP scheme: galley serves a
// worker credential only to the key it is bound to.
func WithProofKey(k *dpop.Key) Option { return func(c *Client) { c.key = k } }

// WithCallTimeout bounds each attempt of a call (an inbox long poll gets its
// wait on top).
func WithCallTimeout(d time.Duration) Option { return func(c *Client) { c.callTimeout = d } }

// WithRetry sets the number of attempts per call (at least 1) and the
// backoff's base and cap.
func WithRetry(attempts int, base, cap time.Duration) Option {
	return func(c *Client) {
		c.attempts = max(attempts, 1)
		c.backoffBase, c.backoffCap = base, cap
	}
}

// New returns a client for the galley endpoint (scheme, host and an optional
// path prefix) acting with the worker's token. A malformed endpoint makes
// every call fail with kind Invalid.
func New(endpoint, token string, opts ...Option) *Client {
	c := &Client{
		token:       token,
		callTimeout: DefaultCallTimeout,
		attempts:    DefaultAttempts,
		backoffBase: DefaultBackoffBase,
		backoffCap:  DefaultBackoffCap,
	}
	if u, err := ParseEndpoint(endpoint); err == nil {
		c.base = u
	}
	for _, o := range opts {
		o(c)
	}
	hc := http.Client{}
	if c.hc != nil {
		hc = *c.hc
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Timeout = 0 // per-attempt deadlines come from contexts
	c.hc = &hc
	return c
}

// ParseEndpoint checks a galley endpoint: http or https, a host, no user
// information, query or fragment.
func ParseEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, galleyerr.E(galleyerr.Invalid, galleyerr.Op("client.endpoint"),
			"the endpoint must be an http or https URL without user information, query or fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// Self fetches the worker's own launch facts.
func (c *Client) Self(ctx context.Context) (workerapi.Self, error) {
	var out workerapi.Self
	err := c.call(ctx, workerapi.PathSelf, workerapi.SelfRequest{}, &out, 0, retryAlways)
	return out, err
}

// Ready reports positive evidence that the agent runs.
func (c *Client) Ready(ctx context.Context, evidence string) error {
	return c.call(ctx, workerapi.PathReady, workerapi.ReadyRequest{Evidence: evidence}, &workerapi.Ack{}, 0, retryAlways)
}

// Post posts one mailbox row. It carries a client id chosen once per post,
// from which galley makes the row's id: a retry after a lost answer finds
// the row its first try appended (galley appends a row once per id), so
// the coordinator reads it once and no second question is asked.
func (c *Client) Post(ctx context.Context, req workerapi.PostRequest) (workerapi.PostAnswer, error) {
	if req.ClientID == "" {
		req.ClientID = newClientID()
	}
	var out workerapi.PostAnswer
	// The client id makes the post idempotent, so a lost answer may be
	// retried like any other call.
	err := c.call(ctx, workerapi.PathPost, req, &out, 0, retryAlways)
	return out, err
}

// ExchangeBootstrap trades a one-time bootstrap code for the worker's
// credential (the client needs no token for this call). claim must be the
// same on every retry.
//
// The exchange is the one call a worker makes before it has a credential,
// on a route API Gateway throttles tightly (infra: the credential route):
// a throttled exchange (429) is tried again, after its Retry-After or a
// backoff of at most ExchangeThrottleWait, until ctx ends or
// ExchangeThrottleBudget has passed. The claim makes a repeat harmless.
func ExchangeBootstrap(ctx context.Context, endpoint, handle, code, claim string, opts ...Option) (string, error) {
	c := New(endpoint, "", opts...)
	var out workerapi.CredentialAnswer
	req := workerapi.CredentialRequest{Handle: handle, Code: code, Claim: claim}
	deadline := time.Now().Add(ExchangeThrottleBudget)
	for throttled := 1; ; throttled++ {
		err := c.call(ctx, workerapi.PathCredential, req, &out, 0, retryAlways)
		if err == nil {
			break
		}
		var e *galleyerr.Error
		if !errors.As(err, &e) || e.Kind != galleyerr.RateLimited || !time.Now().Before(deadline) {
			return "", err
		}
		wait := min(c.backoff(throttled), ExchangeThrottleWait)
		if e.RetryAfterSeconds > 0 {
			wait = min(time.Duration(e.RetryAfterSeconds)*time.Second, ExchangeThrottleWait)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return "", err
		}
	}
	if out.Token == "" {
		return "", galleyerr.Errorf(galleyerr.Other, "galley answered no credential")
	}
	return out.Token, nil
}

// How long, and how far apart at most, a throttled bootstrap exchange is
// tried again (well inside the bootstrap code's 15 minutes).
const (
	ExchangeThrottleBudget = 2 * time.Minute
	ExchangeThrottleWait   = 5 * time.Second
)

func newClientID() string {
	var b [12]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Inbox waits up to wait (capped at MaxInboxWait) for items after the
// sequence after. An empty answer is normal at the end of the wait.
func (c *Client) Inbox(ctx context.Context, after int64, wait time.Duration) (workerapi.InboxAnswer, error) {
	wait = min(max(wait, 0), MaxInboxWait)
	var out workerapi.InboxAnswer
	req := workerapi.InboxRequest{After: after, WaitMs: wait.Milliseconds()}
	err := c.call(ctx, workerapi.PathInbox, req, &out, wait, retryAlways)
	return out, err
}

// Wake asks for the worker's wake grant (workerapi.WakeGrant).
func (c *Client) Wake(ctx context.Context) (workerapi.WakeGrant, error) {
	var out workerapi.WakeGrant
	err := c.call(ctx, workerapi.PathWake, workerapi.WakeRequest{}, &out, 0, retryAlways)
	return out, err
}

// Wait holds up to wait (capped at MaxInboxWait) until the inbox has items
// after the sequence after, or the worker is settled; the caller then reads
// the inbox. Only for a grant of kind workerapi.WakeGalley.
func (c *Client) Wait(ctx context.Context, after int64, wait time.Duration) error {
	wait = min(max(wait, 0), MaxInboxWait)
	req := workerapi.WaitRequest{After: after, WaitMs: wait.Milliseconds()}
	return c.call(ctx, workerapi.PathWait, req, &workerapi.Ack{}, wait, retryAlways)
}

// Usage reports the agent's usage so far; galley keeps the latest report.
func (c *Client) Usage(ctx context.Context, report protocol.UsageReport) error {
	return c.call(ctx, workerapi.PathUsage, workerapi.UsageRequest{Report: report}, &workerapi.Ack{}, 0, retryAlways)
}

// Exited reports that the agent ended without a worker-done report.
func (c *Client) Exited(ctx context.Context, code int, reason string) error {
	return c.call(ctx, workerapi.PathExited, workerapi.ExitedRequest{Code: code, Reason: reason}, &workerapi.Ack{}, 0, retryAlways)
}

// Park reports a parking (docs/parking.md). It is idempotent: the same
// parking reported again answers as the first report did.
func (c *Client) Park(ctx context.Context, req workerapi.ParkRequest) error {
	return c.call(ctx, workerapi.PathPark, req, &workerapi.Ack{}, 0, retryAlways)
}

// Events sends harness events for the worker's event log. It is not
// retried once sent (a lost answer must not record an event twice).
func (c *Client) Events(ctx context.Context, evs []workerapi.HarnessEvent) error {
	return c.call(ctx, workerapi.PathEvents, workerapi.EventsRequest{Events: evs}, &workerapi.Ack{}, 0, retryUnsent)
}

// retryPolicy says which failures of an attempt may be retried.
type retryPolicy int

const (
	retryAlways retryPolicy = iota // idempotent: transport failures and 5xx
	retryUnsent                    // not idempotent: only failures to connect
)

// attemptError is one failed attempt and whether it may be retried.
type attemptError struct {
	err       error
	retryable bool
}

func (c *Client) call(ctx context.Context, path string, in, out any, extra time.Duration, policy retryPolicy) error {
	op := galleyerr.Op("workerapi/" + strings.TrimPrefix(path, contract.WorkerAPIPrefix))
	if c.base == nil {
		return galleyerr.E(galleyerr.Invalid, op, "no valid endpoint")
	}
	body, err := json.Marshal(in)
	if err != nil {
		return galleyerr.E(galleyerr.Malformed, op, err)
	}
	var last attemptError
	for attempt := 0; attempt < c.attempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, c.backoff(attempt)); err != nil {
				return galleyerr.E(galleyerr.Unavailable, op, "gave up waiting to retry", last.err)
			}
		}
		last = c.attempt(ctx, path, body, out, extra, policy)
		if last.err == nil {
			return nil
		}
		if !last.retryable || ctx.Err() != nil {
			break
		}
	}
	var e *galleyerr.Error
	if errors.As(last.err, &e) {
		e.Op = string(op)
		return e
	}
	return galleyerr.E(op, last.err)
}

func (c *Client) attempt(ctx context.Context, path string, body []byte, out any, extra time.Duration, policy retryPolicy) attemptError {
	actx, cancel := context.WithTimeout(ctx, c.callTimeout+extra)
	defer cancel()
	u := *c.base
	u.Path += path
	req, err := http.NewRequestWithContext(actx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return attemptError{err: galleyerr.E(galleyerr.Invalid, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.key != nil {
		// A proof per attempt: a retried call must not replay one.
		proof, err := c.key.Proof(http.MethodPost, u.String(), c.token, time.Now())
		if err != nil {
			return attemptError{err: galleyerr.E(galleyerr.Other, "making the call's proof", err)}
		}
		req.Header.Set(dpop.Header, proof)
		if c.token != "" {
			req.Header.Set("Authorization", dpop.Scheme+" "+c.token)
		}
	} else if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		// The error names the URL and the cause, never headers.
		return attemptError{
			err:       galleyerr.E(galleyerr.Unavailable, "transport", err),
			retryable: policy == retryAlways || unsent(err),
		}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return attemptError{err: galleyerr.E(galleyerr.Unavailable, "reading the answer", err), retryable: policy == retryAlways}
	}
	if resp.StatusCode != http.StatusOK {
		kind := statusKind(resp.StatusCode)
		e := &galleyerr.Error{Kind: kind, Msg: fmt.Sprintf("status %d%s", resp.StatusCode, snippet(data))}
		if kind == galleyerr.RateLimited {
			// A refusal for the worker's posting budget (or a gateway's
			// throttle) is definite and not retried here: the caller
			// learns when to try again and decides whether to.
			e.RetryAfterSeconds = retryAfter(resp.Header.Get("Retry-After"))
		}
		return attemptError{err: e, retryable: policy == retryAlways && resp.StatusCode >= 500}
	}
	if len(data) > maxAnswer {
		return attemptError{err: galleyerr.E(galleyerr.TooLarge, "answer over 8 MiB")}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return attemptError{err: galleyerr.E(galleyerr.Malformed, "unreadable answer", err)}
	}
	return attemptError{}
}

// unsent reports whether a transport error proves the request never left:
// the connection could not be made.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func statusKind(status int) galleyerr.Kind {
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return galleyerr.Unauthorized
	case status == http.StatusNotFound:
		return galleyerr.NotFound
	case status == http.StatusBadRequest:
		return galleyerr.Malformed
	case status == http.StatusRequestEntityTooLarge:
		return galleyerr.TooLarge
	case status == http.StatusConflict:
		return galleyerr.Conflict
	case status == http.StatusTooManyRequests:
		return galleyerr.RateLimited
	case status >= 500:
		return galleyerr.Unavailable
	}
	return galleyerr.Other
}

// retryAfter reads a Retry-After header given in seconds (galley's form);
// 0 when absent or in another form.
func retryAfter(h string) int {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return 0
	}
	return min(n, 3600)
}

// snippet quotes the start of an error answer for the message; galley's
// answers never hold the caller's token.
func snippet(data []byte) string {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return ""
	}
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return ": " + s
}

// backoff is full-jitter exponential backoff: a random wait in
// [0, min(cap, base*2^(attempt-1))].
func (c *Client) backoff(attempt int) time.Duration {
	d := c.backoffBase << min(attempt-1, 20)
	if d <= 0 || d > c.backoffCap {
		d = c.backoffCap
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
