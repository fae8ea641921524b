package history

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// kitchnRoutes are the contract's routes of the kitchn-facing Routes.
var kitchnRoutes = map[Route]contract.Route{
	Descriptor:  contract.RouteDescriptor,
	Effect:      contract.RouteEffects,
	Lookup:      contract.RouteLookup,
	Observe:     contract.RouteObserve,
	Inventory:   contract.RouteInventory,
	Usage:       contract.RouteUsage,
	Next:        contract.RouteNext,
	Acknowledge: contract.RouteAcknowledge,
	Await:       contract.RouteAwait,
	Adopt:       contract.RouteAdopt,
}

// Client calls a galley endpoint the way kitchn does on the wire (package
// client) and records every call in a Recorder. It is safe for concurrent
// use; each caller passes its own client name.
type Client struct {
	kc  *client.Client
	rec *Recorder
	// Timeout is each call's deadline; await gets its waitMs on top.
	Timeout time.Duration
}

// ErrNotLoopback refuses an endpoint off this machine: load and fault runs
// stay on loopback.
var ErrNotLoopback = errors.New("history: the endpoint must be http on a loopback address")

// NewClient returns a client of endpoint (plain http on a loopback address
// only) with token, recording into rec. hc may be nil for a pooled default;
// its transport carries the calls.
func NewClient(endpoint, token string, rec *Recorder, hc *http.Client) (*Client, error) {
	if err := CheckLoopback(endpoint); err != nil {
		return nil, err
	}
	var rt http.RoundTripper = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second}
	if hc != nil && hc.Transport != nil {
		rt = hc.Transport
	} else if hc != nil {
		rt = http.DefaultTransport
	}
	// Each call's deadline is set here, from Timeout, which callers may
	// change after NewClient.
	kc := client.New(endpoint, token, client.WithTransport(rt), client.WithTimeout(0))
	return &Client{kc: kc, rec: rec, Timeout: 10 * time.Second}, nil
}

// CheckLoopback accepts only http://127.0.0.0/8, [::1] or localhost.
func CheckLoopback(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.User != nil {
		return ErrNotLoopback
	}
	host := u.Hostname()
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return ErrNotLoopback
}

// Recorder is where the client records.
func (c *Client) Recorder() *Recorder { return c.rec }

// Do makes one call of route by client with body (nil for GET routes) and
// records it. key, when set, goes in Idempotency-Key. extra lengthens the
// deadline (await's waitMs). A transport failure or a deadline is an error
// and a Pending op (an unsent one when the connection was never made); any
// status is an answer.
func (c *Client) Do(ctx context.Context, client string, route Route, body []byte, key string, extra time.Duration) (Op, error) {
	kr, ok := kitchnRoutes[route]
	if !ok {
		return Op{}, fmt.Errorf("history: route %q is no kitchn route", route)
	}
	rc := c.rec.Begin(client, route, body)
	ctx, cancel := context.WithTimeout(ctx, c.Timeout+extra)
	defer cancel()
	a, err := c.kc.Call(ctx, kr, body, key, 0)
	var oe *net.OpError
	if err != nil && errors.As(err, &oe) && oe.Op == "dial" {
		return rc.EndUnsent(err), err
	}
	if err != nil {
		return rc.End(0, nil, err), err
	}
	return rc.End(a.Status, a.Body, nil), nil
}

// CloseIdle releases the transport's idle connections.
func (c *Client) CloseIdle() { c.kc.CloseIdle() }
