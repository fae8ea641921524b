package history

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Paths of the routes, below the endpoint.
var paths = map[Route]string{
	Descriptor:  "/v1/descriptor",
	Effect:      "/v1/effects",
	Lookup:      "/v1/effects/lookup",
	Observe:     "/v1/workers/observe",
	Inventory:   "/v1/inventory",
	Usage:       "/v1/workers/usage",
	Next:        "/v1/deliveries/next",
	Acknowledge: "/v1/deliveries/acknowledge",
	Await:       "/v1/deliveries/await",
	Adopt:       "/v1/runs/adopt",
}

// Path is the route's path below the endpoint ("" for Post, which is not a
// kitchn route).
func (r Route) Path() string { return paths[r] }

// maxAnswer is the most of an answer kitchn's client reads.
const maxAnswer = 1 << 20

// Client calls a galley endpoint the way kitchn does on the wire and
// records every call in a Recorder. It is safe for concurrent use; each
// caller passes its own client name.
type Client struct {
	base  string
	token string
	rec   *Recorder
	hc    *http.Client
	// Timeout is each call's deadline; await gets its waitMs on top.
	Timeout time.Duration
}

// ErrNotLoopback refuses an endpoint off this machine: load and fault runs
// stay on loopback.
var ErrNotLoopback = errors.New("history: the endpoint must be http on a loopback address")

// NewClient returns a client of endpoint (plain http on a loopback address
// only) with token, recording into rec. hc may be nil for a pooled default.
func NewClient(endpoint, token string, rec *Recorder, hc *http.Client) (*Client, error) {
	if err := CheckLoopback(endpoint); err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{
			Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
			// kitchn never follows a redirect.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{base: strings.TrimRight(endpoint, "/"), token: token, rec: rec, hc: hc, Timeout: 10 * time.Second}, nil
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
// and a Pending op; any status is an answer.
func (c *Client) Do(ctx context.Context, client string, route Route, body []byte, key string, extra time.Duration) (Op, error) {
	path, ok := paths[route]
	if !ok {
		return Op{}, fmt.Errorf("history: route %q has no path", route)
	}
	method := "POST"
	if body == nil {
		method = "GET"
	}
	rc := c.rec.Begin(client, route, body)
	status, answer, err := c.roundTrip(ctx, method, path, body, key, extra)
	var oe *net.OpError
	if err != nil && errors.As(err, &oe) && oe.Op == "dial" {
		return rc.EndUnsent(err), err
	}
	return rc.End(status, answer, err), err
}

func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte, key string, extra time.Duration) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout+extra)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return 0, nil, err
	}
	if len(b) > maxAnswer {
		return 0, nil, errors.New("history: answer larger than 1 MiB")
	}
	return resp.StatusCode, b, nil
}

// CloseIdle releases the transport's idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }
