// Package client calls a galley endpoint the way kitchn's client does on
// the wire: kitchn's routes (package contract), JSON bodies encoded
// compactly and without HTML escaping, "Accept: application/json", the
// bearer token in Authorization, an effect's key in Idempotency-Key, no
// redirect followed, at most MaxAnswer of an answer read, and a deadline
// per call (await's wait on top) that the service never learns. Every
// answer is read with package protocol's strict parsers, which read at
// least as strictly as kitchn's client. It is the one kitchn client of the
// conformance checks, the history checker, the load, cost and launch tools
// and the tests; the worker API has its own (pkg/workerapi/client).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// MaxAnswer is the most of an answer kitchn's client reads: 1 MiB.
const MaxAnswer = 1 << 20

// DefaultTimeout is a call's deadline unless WithTimeout says otherwise.
const DefaultTimeout = 10 * time.Second

// Client calls one endpoint. It is safe for concurrent use.
type Client struct {
	base           string // the endpoint, without a trailing slash
	token          string
	backend        string // the bound namespace: every receipt resource must be in it
	timeout        time.Duration
	expectContinue bool
	hc             *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithBackend sets the backend namespace the endpoint is bound as: every
// resource of a receipt must be in it (default contract.DefaultBackend).
func WithBackend(backend string) Option { return func(c *Client) { c.backend = backend } }

// WithTimeout sets each call's deadline; await gets its wait on top. Zero
// leaves the caller's context alone to bound a call.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithTransport makes the calls through rt. The default is kitchn's: a new
// connection per call, no compression asked for, the proxy the
// environment names.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) { c.hc.Transport = rt }
}

// WithExpectContinue asks before sending a body ("Expect: 100-continue"),
// as curl does: a service must cope with it.
func WithExpectContinue() Option { return func(c *Client) { c.expectContinue = true } }

// New returns a client of endpoint, the base URL kitchn is bound to, with
// token.
func New(endpoint, token string, opts ...Option) *Client {
	c := &Client{
		base:    strings.TrimRight(endpoint, "/"),
		token:   token,
		backend: contract.DefaultBackend,
		timeout: DefaultTimeout,
		hc: &http.Client{
			Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DisableKeepAlives:     true,
				DisableCompression:    true,
				ForceAttemptHTTP2:     true,
				ExpectContinueTimeout: time.Second,
			},
			// Hand every 3xx back as it is: the client never follows one.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithToken returns a copy of c that sends token instead; an empty token
// sends no Authorization header at all.
func (c *Client) WithToken(token string) *Client {
	cp := *c
	cp.token = token
	return &cp
}

// CloseIdle releases the transport's idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// Encode writes v as the client does: compact JSON without HTML escaping.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Answer is one call's answer: its status and at most MaxAnswer of its
// body.
type Answer struct {
	Status int
	Body   []byte
}

// Call makes one call of route. body (nil for none) is sent as it is;
// key, when not empty, goes in Idempotency-Key; extra lengthens the
// deadline (await's wait). A transport failure or the deadline is an error
// of kind Unavailable, and an answer larger than MaxAnswer one of kind
// TooLarge; the transport's own error stays in the chain (errors.As), but
// no message names the URL. Any status is an answer.
func (c *Client) Call(ctx context.Context, route contract.Route, body []byte, key string, extra time.Duration) (Answer, error) {
	op := galleyerr.Op(route.Pattern())
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+extra)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, route.Method, c.base+route.Path, rd)
	if err != nil {
		return Answer{}, galleyerr.E(op, galleyerr.Invalid, "build the request", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if c.expectContinue {
			req.Header.Set("Expect", "100-continue")
		}
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Answer{}, galleyerr.E(op, galleyerr.Unavailable, &transportError{transportReason(ctx, err), err})
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return Answer{}, galleyerr.E(op, galleyerr.Unavailable, &transportError{"read the answer: " + transportReason(ctx, err), err})
	}
	if len(b) > MaxAnswer {
		return Answer{}, galleyerr.E(op, galleyerr.TooLarge, "answer larger than 1 MiB (the client reads no more)")
	}
	return Answer{Status: resp.StatusCode, Body: b}, nil
}

// transportError is why a call got no answer: its message names no URL
// (the operation already names the route), its cause stays in the chain.
type transportError struct {
	msg   string
	cause error
}

func (e *transportError) Error() string { return e.msg }
func (e *transportError) Unwrap() error { return e.cause }

// transportReason says why a call got no answer, without the URL that
// url.Error repeats.
func transportReason(ctx context.Context, err error) string {
	if ctx.Err() == context.DeadlineExceeded {
		return "no answer within the client deadline"
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return "transport: " + err.Error()
}

// call encodes payload (nil for none) and makes the call.
func (c *Client) call(ctx context.Context, route contract.Route, payload any, key string, extra time.Duration) (Answer, error) {
	var body []byte
	if payload != nil {
		b, err := Encode(payload)
		if err != nil {
			return Answer{}, galleyerr.E(galleyerr.Op(route.Pattern()), galleyerr.Invalid, "encode the request", err)
		}
		body = b
	}
	return c.Call(ctx, route, body, key, extra)
}

// read makes a read call and requires 200: for reads, any other status is
// a failed call from which nothing may be inferred.
func (c *Client) read(ctx context.Context, route contract.Route, payload any, extra time.Duration) ([]byte, error) {
	a, err := c.call(ctx, route, payload, "", extra)
	if err != nil {
		return nil, err
	}
	if a.Status != http.StatusOK {
		return nil, c.StatusError(route, a)
	}
	return a.Body, nil
}

// StatusError describes an answer whose status carries no answer, as an
// error of kind Unavailable. The body is quoted with the token taken out
// first, in case the service echoes it.
func (c *Client) StatusError(route contract.Route, a Answer) error {
	op := galleyerr.Op(route.Pattern())
	if a.Status >= 300 && a.Status < 400 {
		return galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("status %d: a redirect, which the client never follows", a.Status))
	}
	return galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("status %d%s", a.Status, snippet(Redact(a.Body, c.token))))
}

// Redact takes token out of b.
func Redact(b []byte, token string) []byte {
	if token == "" {
		return b
	}
	return bytes.ReplaceAll(b, []byte(token), []byte("[token]"))
}

// snippet quotes the start of a body for a failure message.
func snippet(b []byte) string {
	const max = 160
	if len(b) == 0 {
		return ""
	}
	s := string(b)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return fmt.Sprintf(" (%q)", s)
}

// Effect posts one effect call with its key in Idempotency-Key and returns
// the answer as it is: the caller decides what a status other than 200
// means (for an effect, every one but 401, 403 and 429 leaves the outcome
// uncertain).
func (c *Client) Effect(ctx context.Context, call protocol.EffectCall) (Answer, error) {
	return c.call(ctx, contract.RouteEffects, call, call.Request.Key, 0)
}

// Apply posts one effect call and reads its outcome: a 200 answer's, read
// strictly (an unreadable one is an error: the outcome is uncertain), or
// an error of kind Unavailable for any other status.
func (c *Client) Apply(ctx context.Context, call protocol.EffectCall) (protocol.EffectOutcome, error) {
	a, err := c.Effect(ctx, call)
	if err != nil {
		return protocol.EffectOutcome{}, err
	}
	if a.Status != http.StatusOK {
		return protocol.EffectOutcome{}, c.StatusError(contract.RouteEffects, a)
	}
	return protocol.ParseEffectOutcome(a.Body, c.backend)
}

// Descriptor reads the descriptor.
func (c *Client) Descriptor(ctx context.Context) (protocol.Descriptor, error) {
	b, err := c.read(ctx, contract.RouteDescriptor, nil, 0)
	if err != nil {
		return protocol.Descriptor{}, err
	}
	return protocol.ParseDescriptor(b)
}

// Lookup looks an effect up, answering the outcome and the receipt's bytes
// as sent (nil unless applied).
func (c *Client) Lookup(ctx context.Context, call protocol.EffectCall) (protocol.LookupAnswer, []byte, error) {
	b, err := c.read(ctx, contract.RouteLookup, call, 0)
	if err != nil {
		return protocol.LookupAnswer{}, nil, err
	}
	a, err := protocol.ParseLookupAnswer(b, c.backend)
	if err != nil {
		return a, nil, err
	}
	return a, RawMember(b, "receipt"), nil
}

// Observe reads a worker's state.
func (c *Client) Observe(ctx context.Context, worker protocol.Resource) (protocol.Observation, error) {
	b, err := c.read(ctx, contract.RouteObserve, protocol.WorkerCall{Worker: worker}, 0)
	if err != nil {
		return protocol.Observation{}, err
	}
	return protocol.ParseObservation(b)
}

// Inventory reads the inventory.
func (c *Client) Inventory(ctx context.Context) (protocol.Inventory, error) {
	b, err := c.read(ctx, contract.RouteInventory, nil, 0)
	if err != nil {
		return protocol.Inventory{}, err
	}
	return protocol.ParseInventory(b)
}

// Usage reads a worker's usage.
func (c *Client) Usage(ctx context.Context, worker protocol.Resource) (protocol.UsageAnswer, error) {
	b, err := c.read(ctx, contract.RouteUsage, protocol.WorkerCall{Worker: worker}, 0)
	if err != nil {
		return protocol.UsageAnswer{}, err
	}
	return protocol.ParseUsageAnswer(b)
}

// Mailbox is a mailbox call's answer with the bytes of its delivery as
// sent, for replays that must be identical in every field.
type Mailbox struct {
	protocol.MailboxAnswer
	Raw []byte // the "delivery" member as sent, or nil
}

func (c *Client) mail(ctx context.Context, route contract.Route, call protocol.MailboxCall) (Mailbox, error) {
	var extra time.Duration
	if call.WaitMs != nil {
		extra = time.Duration(*call.WaitMs) * time.Millisecond
	}
	b, err := c.read(ctx, route, call, extra)
	if err != nil {
		return Mailbox{}, err
	}
	a, err := protocol.ParseMailboxAnswer(b)
	if err != nil {
		return Mailbox{}, err
	}
	return Mailbox{MailboxAnswer: a, Raw: RawMember(b, "delivery")}, nil
}

// Next reads the coordinator's current batch.
func (c *Client) Next(ctx context.Context, run, coordinator string) (Mailbox, error) {
	return c.mail(ctx, contract.RouteNext, protocol.MailboxCall{Run: run, Coordinator: coordinator})
}

// Acknowledge consumes batch delivery and reads the next.
func (c *Client) Acknowledge(ctx context.Context, run, coordinator, delivery string) (Mailbox, error) {
	return c.mail(ctx, contract.RouteAcknowledge, protocol.MailboxCall{Run: run, Coordinator: coordinator, Delivery: delivery})
}

// Await waits up to wait for a batch; the call's deadline is the client's
// and the wait.
func (c *Client) Await(ctx context.Context, run, coordinator string, wait time.Duration) (Mailbox, error) {
	ms := wait.Milliseconds()
	return c.mail(ctx, contract.RouteAwait, protocol.MailboxCall{Run: run, Coordinator: coordinator, WaitMs: &ms})
}

// Adopt makes coordinator the run's reader, answering whether it was
// fenced instead.
func (c *Client) Adopt(ctx context.Context, run, coordinator string) (fenced bool, err error) {
	b, err := c.read(ctx, contract.RouteAdopt, protocol.MailboxCall{Run: run, Coordinator: coordinator}, 0)
	if err != nil {
		return false, err
	}
	return protocol.ParseAdoptAnswer(b)
}

// RawMember returns the bytes of one top-level member of a JSON object
// already read by a strict parser, or nil.
func RawMember(body []byte, name string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return m[name]
}
