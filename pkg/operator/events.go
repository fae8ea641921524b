package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
)

// EventsAnswer answers a poll: the events after the cursor, and Next, the
// cursor to ask from next (the last event's number, or the cursor itself).
type EventsAnswer struct {
	Events []store.Event `json:"events"`
	Next   int64         `json:"next"`
}

// pollLimit bounds one answer's events.
const pollLimit = 200

// cursor reads the cursor of a request: Last-Event-ID (a reconnecting
// EventSource) first, then ?after.
func cursor(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, galleyerr.Errorf(galleyerr.Malformed, "the cursor must be a number of 0 or more")
	}
	return n, nil
}

// poll answers the worker's events after the cursor, holding up to ?wait
// seconds (at most MaxWait) for one: the long poll of a deployment that
// cannot stream (API Gateway in front of Lambda), woken by the doorbell.
func (h *Handler) poll(w http.ResponseWriter, r *http.Request) {
	handle := r.PathValue("handle")
	after, err := cursor(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	wait := time.Duration(0)
	if v := r.URL.Query().Get("wait"); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s < 0 {
			h.fail(w, galleyerr.Errorf(galleyerr.Malformed, "wait must be a number of seconds"))
			return
		}
		wait = min(time.Duration(s*float64(time.Second)), MaxWait)
	}
	es, err := h.Wait(r.Context(), handle, after, wait)
	if err != nil {
		h.fail(w, err)
		return
	}
	next := after
	if len(es) > 0 {
		next = es[len(es)-1].Seq
	}
	if es == nil {
		es = []store.Event{}
	}
	writeJSON(w, http.StatusOK, EventsAnswer{Events: es, Next: next})
}

// Wait answers the worker's events after the cursor (a reset event first
// when some were dropped), holding up to wait for one, or until Drain. It
// listens before it reads, so an append between the read and the wait
// rings.
func (h *Handler) Wait(ctx context.Context, handle string, after int64, wait time.Duration) ([]store.Event, error) {
	var l service.Listener
	if wait > 0 && h.bell != nil {
		var err error
		if l, err = h.bell.Listen(ctx, eventlog.Topic(handle)); err != nil {
			h.log.Warn("cannot listen for a worker's events; polling once", "worker", handle, "err", err)
			l = nil
		} else {
			defer l.Close()
		}
	}
	deadline := h.now().Add(wait)
	for {
		es, err := eventlog.Read(ctx, h.events, handle, after, pollLimit)
		if err != nil || len(es) > 0 || wait <= 0 {
			return es, err
		}
		left := deadline.Sub(h.now())
		if left <= 0 || h.drained.Err() != nil {
			return nil, nil
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		undrain := context.AfterFunc(h.drained, cancel) // Drain ends the wait as the deadline would
		if l != nil {
			err = l.Wait(wctx)
		} else {
			<-wctx.Done()
			err = wctx.Err()
		}
		undrain()
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		_ = err // a ring, or the deadline: read again either way
	}
}

// stream serves the worker's events as Server-Sent Events from the
// cursor (Last-Event-ID, or ?after), then live: each event's id is its
// number, so a reconnecting EventSource resumes exactly after the last one
// it received. It ends when its credential no longer opens the API.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	if h.pollOnly {
		writeJSON(w, http.StatusNotFound, errorJSON{"this deployment cannot stream: long poll " + PathWorkers + "/{handle}/events?after=N&wait=25"})
		return
	}
	handle := r.PathValue("handle")
	after, err := cursor(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	checked := h.now() // the credential was checked as the request came in
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	// Tell the browser how soon to reconnect after a drop.
	fmt.Fprint(w, "retry: 1000\n\n")
	if err := rc.Flush(); err != nil {
		return
	}
	ctx := r.Context()
	for {
		// A stream outlives no session: the credential is checked again
		// every heartbeat, so a logout, an expiry or a new token ends it.
		if h.now().Sub(checked) >= h.heartbeat {
			if how, _, _ := h.auth(r); how == refused {
				return
			}
			checked = h.now()
		}
		es, err := h.Wait(ctx, handle, after, h.heartbeat)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("a worker's event stream failed", "worker", handle, "err", err)
			}
			return
		}
		for _, e := range es {
			b, _ := json.Marshal(e)
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", e.Seq, b)
			after = e.Seq
		}
		if len(es) == 0 {
			fmt.Fprint(w, ": keep-alive\n\n")
		}
		if err := rc.Flush(); err != nil || h.drained.Err() != nil {
			// A drained stream ends: the browser's EventSource reconnects
			// to whatever serves next.
			return
		}
	}
}
