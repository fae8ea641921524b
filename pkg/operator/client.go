package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/store"
)

// Client calls an operator API with the operator token: the galley
// commands workers, events, cancel and revoke.
type Client struct {
	endpoint string
	token    string
	hc       *http.Client
}

// NewClient returns a client of the operator API at endpoint (the galley
// endpoint, without /operator/).
func NewClient(endpoint, token string) *Client {
	return &Client{endpoint: strings.TrimRight(endpoint, "/"), token: token, hc: &http.Client{}}
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		e := &StatusError{Status: resp.StatusCode, What: method + " " + path}
		var ej errorJSON
		if json.Unmarshal(body, &ej) == nil && ej.Error != "" {
			e.Msg = ej.Error
		}
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}

// StatusError is an answer other than 200.
type StatusError struct {
	Status int
	What   string // the method and path
	Msg    string // the answer's error, when it has one
}

func (e *StatusError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s: %s (HTTP %d)", e.What, e.Msg, e.Status)
	}
	return fmt.Sprintf("%s: HTTP %d", e.What, e.Status)
}

// passing reports whether err is worth a retry: a throttle (429, API
// Gateway's answer to a burst) or the gateway's or function's 5xx.
func passing(err error) bool {
	var se *StatusError
	return errors.As(err, &se) && (se.Status == http.StatusTooManyRequests || se.Status >= 500)
}

// Workers lists the workers, newest first.
func (c *Client) Workers(ctx context.Context) ([]WorkerView, error) {
	var a WorkersAnswer
	err := c.do(ctx, http.MethodGet, PathWorkers, &a)
	return a.Workers, err
}

// Events answers the worker's events after the cursor, holding up to
// wait (at most MaxWait) for one.
func (c *Client) Events(ctx context.Context, handle string, after int64, wait time.Duration) (EventsAnswer, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if wait > 0 {
		q.Set("wait", strconv.FormatFloat(wait.Seconds(), 'f', 3, 64))
	}
	var a EventsAnswer
	err := c.do(ctx, http.MethodGet, PathWorkers+"/"+url.PathEscape(handle)+"/events?"+q.Encode(), &a)
	return a, err
}

// Follow calls fn with each of the worker's events after the cursor, in
// order, long polling for new ones until ctx ends or fn returns false. A
// throttled or failed poll (429, 5xx) is asked again from the same cursor
// after a pause (half a second, doubling to 10 s), so nothing is missed
// or repeated; any other error ends it.
func (c *Client) Follow(ctx context.Context, handle string, after int64, fn func(store.Event) bool) error {
	pause := 500 * time.Millisecond
	for {
		a, err := c.Events(ctx, handle, after, MaxWait)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !passing(err) {
				return err
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			pause = min(2*pause, 10*time.Second)
			continue
		}
		pause = 500 * time.Millisecond
		for _, e := range a.Events {
			if !fn(e) {
				return nil
			}
		}
		after = a.Next
	}
}

// Cancel cancels the worker.
func (c *Client) Cancel(ctx context.Context, handle string) error {
	return c.do(ctx, http.MethodPost, PathWorkers+"/"+url.PathEscape(handle)+"/cancel", nil)
}

// Revoke revokes the worker's credential.
func (c *Client) Revoke(ctx context.Context, handle string) error {
	return c.do(ctx, http.MethodPost, PathWorkers+"/"+url.PathEscape(handle)+"/revoke", nil)
}
