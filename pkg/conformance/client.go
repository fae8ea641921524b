package conformance

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

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// maxResponse is the most of a response body kitchn's client reads.
const maxResponse = 1 << 20

// Routes of the protocol, below the endpoint.
const (
	routeDescriptor  = "/v1/descriptor"
	routeEffects     = "/v1/effects"
	routeLookup      = "/v1/effects/lookup"
	routeObserve     = "/v1/workers/observe"
	routeInventory   = "/v1/inventory"
	routeNext        = "/v1/deliveries/next"
	routeAcknowledge = "/v1/deliveries/acknowledge"
	routeAwait       = "/v1/deliveries/await"
	routeAdopt       = "/v1/runs/adopt"
)

// client calls one endpoint the way kitchn's client does on the wire: a new
// connection per call, no redirects followed, no compression asked for, at
// most 1 MiB of answer read, and a deadline per call that the service never
// learns.
type client struct {
	base    string // the endpoint, without a trailing slash
	token   string
	backend string // the bound namespace: every receipt resource must be in it
	timeout time.Duration
	hc      *http.Client
}

func newClient(endpoint, token, backend string, timeout time.Duration) *client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DisableKeepAlives:     true,
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
		ExpectContinueTimeout: time.Second,
	}
	return &client{
		base:    strings.TrimRight(endpoint, "/"),
		token:   token,
		backend: backend,
		timeout: timeout,
		hc: &http.Client{
			Transport: tr,
			// Hand every 3xx back as it is: the client never follows one.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// withToken returns a copy of c that sends token instead (the bad-token
// check); an empty token sends no Authorization header at all.
func (c *client) withToken(token string) *client {
	cp := *c
	cp.token = token
	return &cp
}

// close releases the transport's idle state.
func (c *client) close() { c.hc.CloseIdleConnections() }

// reply is one answer: its status and at most maxResponse bytes of body.
type reply struct {
	status int
	body   []byte
}

// encode writes v as compact JSON without HTML escaping, as the client does.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// do makes one call. payload (nil for none) is sent as compact JSON; key,
// when not empty, goes in Idempotency-Key; extra is added to the call's
// deadline (await's waitMs). A transport failure, a deadline or an answer
// larger than 1 MiB is an error; any status is returned as it is.
func (c *client) do(ctx context.Context, method, route string, payload any, key string, extra time.Duration) (reply, error) {
	op := galleyerr.Op(method + " " + route)
	var body io.Reader
	var raw []byte
	if payload != nil {
		b, err := encode(payload)
		if err != nil {
			return reply{}, galleyerr.E(op, galleyerr.Invalid, "encode the request", err)
		}
		raw = b
		body = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout+extra)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+route, body)
	if err != nil {
		return reply{}, galleyerr.E(op, galleyerr.Invalid, "build the request", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
		// curl asks before sending a body; a service must cope with it.
		req.Header.Set("Expect", "100-continue")
		req.ContentLength = int64(len(raw))
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return reply{}, galleyerr.E(op, galleyerr.Unavailable, transportReason(ctx, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return reply{}, galleyerr.E(op, galleyerr.Unavailable, "read the answer: "+transportReason(ctx, err))
	}
	if len(b) > maxResponse {
		return reply{}, galleyerr.E(op, galleyerr.TooLarge, "answer larger than 1 MiB (the client reads no more)")
	}
	return reply{status: resp.StatusCode, body: b}, nil
}

// transportReason says why a call got no answer, without the URL that
// url.Error repeats (the failure line already names the route).
func transportReason(ctx context.Context, err error) string {
	if ctx.Err() == context.DeadlineExceeded {
		return "no answer within the client deadline"
	}
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return "transport: " + err.Error()
}

// read makes a read call and requires 200: for reads, any other status is a
// failed call from which nothing may be inferred.
func (c *client) read(ctx context.Context, method, route string, payload any, extra time.Duration) ([]byte, error) {
	r, err := c.do(ctx, method, route, payload, "", extra)
	if err != nil {
		return nil, err
	}
	if r.status != http.StatusOK {
		return nil, c.statusError(method, route, r)
	}
	return r.body, nil
}

// statusError describes an answer whose status carries no answer. The body
// is quoted with the token taken out first, in case the service echoes it.
func (c *client) statusError(method, route string, r reply) error {
	op := galleyerr.Op(method + " " + route)
	if r.status >= 300 && r.status < 400 {
		return galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("status %d: a redirect, which the client never follows", r.status))
	}
	return galleyerr.E(op, galleyerr.Unavailable, fmt.Sprintf("status %d%s", r.status, snippet(redact(r.body, c.token))))
}

func redact(b []byte, token string) []byte {
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

// effect posts one effect call with its key in Idempotency-Key. The status
// is returned as it is: the caller decides what a non-200 means.
func (c *client) effect(ctx context.Context, call protocol.EffectCall) (reply, error) {
	return c.do(ctx, http.MethodPost, routeEffects, call, call.Request.Key, 0)
}

func (c *client) descriptor(ctx context.Context) (protocol.Descriptor, error) {
	b, err := c.read(ctx, http.MethodGet, routeDescriptor, nil, 0)
	if err != nil {
		return protocol.Descriptor{}, err
	}
	return parseDescriptor(b)
}

// lookup answers the parsed outcome and the raw receipt bytes (nil unless
// applied).
func (c *client) lookup(ctx context.Context, call protocol.EffectCall) (protocol.LookupAnswer, []byte, error) {
	b, err := c.read(ctx, http.MethodPost, routeLookup, call, 0)
	if err != nil {
		return protocol.LookupAnswer{}, nil, err
	}
	a, err := parseLookup(b, c.backend)
	if err != nil {
		return a, nil, err
	}
	return a, rawMember(b, "receipt"), nil
}

func (c *client) observe(ctx context.Context, worker protocol.Resource) (protocol.Observation, error) {
	b, err := c.read(ctx, http.MethodPost, routeObserve, protocol.WorkerCall{Worker: worker}, 0)
	if err != nil {
		return protocol.Observation{}, err
	}
	return parseObservation(b)
}

func (c *client) inventory(ctx context.Context) (protocol.Inventory, error) {
	b, err := c.read(ctx, http.MethodGet, routeInventory, nil, 0)
	if err != nil {
		return protocol.Inventory{}, err
	}
	return parseInventory(b)
}

// mailbox is the answer of a mailbox call with the raw bytes of its
// delivery, for replays that must be identical in every field.
type mailbox struct {
	protocol.MailboxAnswer
	raw []byte // the "delivery" member as sent, or nil
}

func (c *client) mail(ctx context.Context, route string, call protocol.MailboxCall) (mailbox, error) {
	var extra time.Duration
	if call.WaitMs != nil {
		extra = time.Duration(*call.WaitMs) * time.Millisecond
	}
	b, err := c.read(ctx, http.MethodPost, route, call, extra)
	if err != nil {
		return mailbox{}, err
	}
	a, err := parseMailbox(b)
	if err != nil {
		return mailbox{}, err
	}
	return mailbox{MailboxAnswer: a, raw: rawMember(b, "delivery")}, nil
}

func (c *client) next(ctx context.Context, run, coordinator string) (mailbox, error) {
	return c.mail(ctx, routeNext, protocol.MailboxCall{Run: run, Coordinator: coordinator})
}

func (c *client) acknowledge(ctx context.Context, run, coordinator, delivery string) (mailbox, error) {
	return c.mail(ctx, routeAcknowledge, protocol.MailboxCall{Run: run, Coordinator: coordinator, Delivery: delivery})
}

func (c *client) await(ctx context.Context, run, coordinator string, wait time.Duration) (mailbox, error) {
	ms := wait.Milliseconds()
	return c.mail(ctx, routeAwait, protocol.MailboxCall{Run: run, Coordinator: coordinator, WaitMs: &ms})
}

// adopt answers whether the coordinator was fenced.
func (c *client) adopt(ctx context.Context, run, coordinator string) (fenced bool, err error) {
	b, err := c.read(ctx, http.MethodPost, routeAdopt, protocol.MailboxCall{Run: run, Coordinator: coordinator}, 0)
	if err != nil {
		return false, err
	}
	return parseAdopt(b)
}

// rawMember returns the bytes of one top-level member of a JSON object
// already validated by a strict parser, or nil.
func rawMember(body []byte, name string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	return m[name]
}
