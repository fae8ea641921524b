package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/local/gateway"
)

// gated is an emulator whose invocations each wait for a value on its
// channel (nil: answer at once).
type gated struct {
	release chan struct{}
	fail    bool
}

func (g gated) Invoke(ctx context.Context, _ []byte) ([]byte, error) {
	if g.release != nil {
		<-g.release
	}
	if g.fail {
		return nil, &gateway.InvokeError{Kind: gateway.FunctionError, Message: "boom"}
	}
	return []byte(`{"statusCode":200}`), nil
}

// The pool counts invocations, failures, billed milliseconds (each
// invocation rounded up to a whole one) and the invocations in flight:
// those waiting for an emulator included, down to 0 once all ended, with
// the peak kept until ResetPeak.
func TestPoolStats(t *testing.T) {
	release := make(chan struct{})
	p := gateway.NewPool(2, func(context.Context) (gateway.Invoker, error) { return gated{release: release}, nil })
	var wg sync.WaitGroup
	for range 3 { // two run, one waits for an emulator
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Invoke(context.Background(), []byte(`{}`)); err != nil {
				t.Error(err)
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); p.Stats().InFlight < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("in flight: %+v, want 3", p.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	st := p.Stats()
	if st.Invocations != 3 || st.Errors != 0 || st.InFlight != 0 || st.MaxInFlight != 3 {
		t.Fatalf("stats %+v: want 3 invocations, none in flight, at most 3", st)
	}
	if st.BilledMillis < 3 || time.Duration(st.BilledMillis)*time.Millisecond < st.Duration {
		t.Errorf("billed %d ms for %v of busy time: each invocation rounds up to a whole millisecond", st.BilledMillis, st.Duration)
	}
	p.ResetPeak()
	if st := p.Stats(); st.MaxInFlight != 0 {
		t.Errorf("after ResetPeak with nothing in flight, max %d", st.MaxInFlight)
	}

	// A failed invocation is billed and counted as an error; a caller that
	// gave up waiting for an emulator invoked nothing.
	failing := gateway.NewPool(1, func(context.Context) (gateway.Invoker, error) { return gated{fail: true}, nil })
	if _, err := failing.Invoke(context.Background(), nil); err == nil {
		t.Fatal("the failing function answered")
	}
	if st := failing.Stats(); st.Invocations != 1 || st.Errors != 1 || st.BilledMillis < 1 || st.InFlight != 0 {
		t.Errorf("after a failed invocation: %+v", st)
	}
	stuck := gateway.NewPool(1, func(ctx context.Context) (gateway.Invoker, error) { return nil, errors.New("no emulator") })
	if _, err := stuck.Invoke(context.Background(), nil); err == nil {
		t.Fatal("invoked without an emulator")
	}
	if st := stuck.Stats(); st.Invocations != 0 || st.InFlight != 0 || st.MaxInFlight != 1 {
		t.Errorf("an invocation that never started: %+v", st)
	}
}

// The gateway counts the requests each route admitted: not a path no route
// matches, nor one the route's throttle refused.
func TestGatewayCountsRequestsByRoute(t *testing.T) {
	ok := canned{result: []byte(`{"statusCode":200}`)}
	g, err := gateway.New(routes, map[string]gateway.Invoker{"effects": ok, "reads": ok, "workerapi": ok},
		gateway.WithThrottle("GET /v1/descriptor", gateway.Throttle{RateLimit: 0.001, BurstLimit: 1}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) int {
		rec := httptest.NewRecorder()
		req, _ := http.NewRequest(method, "http://local"+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		g.ServeHTTP(rec, req)
		return rec.Code
	}
	for range 2 {
		do("POST", "/v1/effects")
		do("POST", "/worker/v1/self")
		do("GET", "/v1/descriptor") // the second is throttled
	}
	if c := do("GET", "/nowhere"); c != http.StatusNotFound {
		t.Fatalf("unrouted: %d", c)
	}
	got := g.Requests()
	want := map[string]int{"POST /v1/effects": 2, "POST /worker/v1/{proxy+}": 2, "GET /v1/descriptor": 1}
	if len(got) != len(want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("requests %v, want %v", got, want)
		}
	}
}
