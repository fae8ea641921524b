package ecsstandin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Sink receives task state change events, each the JSON EventBridge would
// deliver. An error makes the stand-in try again (three times in all), as
// EventBridge retries a failed target.
type Sink func(ctx context.Context, event []byte) error

// PostSink posts each event as a JSON body to url: the reconciler's
// function under the Lambda Runtime Interface Emulator, say
// (http://127.0.0.1:<port>/2015-03-31/functions/function/invocations).
// A status other than 2xx is an error.
func PostSink(client *http.Client, url string) Sink {
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, event []byte) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(event))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("event sink answered %s", resp.Status)
		}
		return nil
	}
}

// Delivery of one event.
const (
	sinkAttempts = 3
	sinkTimeout  = 30 * time.Second
	sinkBackoff  = 200 * time.Millisecond
)

// queue delivers events to a sink in order, on its own goroutine, so a slow
// sink never holds an API call.
type queue struct {
	sink Sink
	log  *slog.Logger

	mu     sync.Mutex
	cond   *sync.Cond
	items  [][]byte
	closed bool
	done   chan struct{}
}

func newQueue(sink Sink, log *slog.Logger) *queue {
	q := &queue{sink: sink, log: log, done: make(chan struct{})}
	q.cond = sync.NewCond(&q.mu)
	go q.run()
	return q
}

func (q *queue) push(ev []byte) {
	if q.sink == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.items = append(q.items, ev)
		q.cond.Signal()
	}
}

// close delivers what is queued, then ends.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.cond.Broadcast()
	q.mu.Unlock()
	<-q.done
}

func (q *queue) run() {
	defer close(q.done)
	for {
		q.mu.Lock()
		for len(q.items) == 0 && !q.closed {
			q.cond.Wait()
		}
		if len(q.items) == 0 {
			q.mu.Unlock()
			return
		}
		ev := q.items[0]
		q.items = q.items[1:]
		q.mu.Unlock()
		q.deliver(ev)
	}
}

func (q *queue) deliver(ev []byte) {
	var err error
	for attempt := range sinkAttempts {
		if attempt > 0 {
			time.Sleep(sinkBackoff << (attempt - 1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), sinkTimeout)
		err = q.sink(ctx, ev)
		cancel()
		if err == nil {
			return
		}
	}
	q.log.Error("event not delivered", "err", err)
}
