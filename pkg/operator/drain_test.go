package operator_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// TestDrainAnswersHeldPollsAndEndsStreams: Drain (the server shutting
// down) answers a held event poll at once, 200 with no event as its
// deadline would, ends an event stream, and a poll after it holds for
// nothing.
func TestDrainAnswersHeldPollsAndEndsStreams(t *testing.T) {
	st := memstore.New()
	h := operator.New([]byte("operator-secret-token"), &actions{}, st, st, localbell.New(), nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	type answer struct {
		status int
		body   string
		err    error
	}
	get := func(path string, header ...string) <-chan answer {
		c := make(chan answer, 1)
		go func() {
			// The test's context: a failing test ends what still holds,
			// and the server can close.
			req, _ := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
			req.Header.Set("Authorization", "Bearer operator-secret-token")
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				c <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			c <- answer{resp.StatusCode, string(b), err}
		}()
		return c
	}
	poll := get(operator.PathWorkers + "/w-1/events?after=0&wait=25")
	stream := get(operator.PathWorkers+"/w-1/stream", "Last-Event-ID", "0")
	select {
	case a := <-poll:
		t.Fatalf("the poll answered before Drain: %+v", a)
	case a := <-stream:
		t.Fatalf("the stream ended before Drain: %+v", a)
	case <-time.After(500 * time.Millisecond):
	}

	h.Drain()
	for what, c := range map[string]<-chan answer{"poll": poll, "stream": stream} {
		select {
		case a := <-c:
			if a.err != nil || a.status != 200 {
				t.Errorf("the %s: %d %v", what, a.status, a.err)
			}
			if what == "poll" {
				var ans operator.EventsAnswer
				if err := json.Unmarshal([]byte(a.body), &ans); err != nil || len(ans.Events) != 0 || ans.Next != 0 {
					t.Errorf("the poll answered %s, want no event", a.body)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s still holds after Drain", what)
		}
	}
	start := time.Now()
	if a := <-get(operator.PathWorkers + "/w-1/events?after=0&wait=25"); a.status != 200 || time.Since(start) > 10*time.Second {
		t.Errorf("a poll after Drain: %d after %v", a.status, time.Since(start))
	}
}
