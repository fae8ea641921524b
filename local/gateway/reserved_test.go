package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/galley-run/galley/local/gateway"
)

// heldFn holds each invocation until its gate closes, saying when one began.
type heldFn struct {
	began chan struct{}
	gate  chan struct{}
}

func (g *heldFn) Invoke(ctx context.Context, _ []byte) ([]byte, error) {
	g.began <- struct{}{}
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return []byte(`{"statusCode":200,"body":"ok"}`), nil
}

// Issue 20, item 11: a function at its reserved concurrency refuses the
// next invoke at once (Lambda's TooManyRequestsException), and API Gateway
// answers it 500 {"message":"Internal Server Error"}: the gateway does not
// queue it for the integration timeout.
func TestReservedConcurrencyThrottles(t *testing.T) {
	fn := &heldFn{began: make(chan struct{}, 4), gate: make(chan struct{})}
	pool := gateway.NewReservedPool(1, func(context.Context) (gateway.Invoker, error) { return fn, nil })
	srv := newGateway(t, map[string]gateway.Invoker{"effects": pool, "reads": pool, "workerapi": pool})
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/v1/effects", "application/json", strings.NewReader("{}"))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-fn.began // the one reserved instance is busy
	resp, err := http.Post(srv.URL+"/v1/effects", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var msg map[string]any
	if resp.StatusCode != http.StatusInternalServerError || json.Unmarshal(body, &msg) != nil ||
		msg["message"] != "Internal Server Error" || len(msg) != 1 {
		t.Errorf("an invoke beyond the reserved concurrency = %d %s, want 500 Internal Server Error", resp.StatusCode, body)
	}
	close(fn.gate)
	if s := <-first; s != http.StatusOK {
		t.Errorf("the invocation within the reservation = %d", s)
	}
	// With its instance free again, the function takes the next invoke.
	resp, err = http.Post(srv.URL+"/v1/effects", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	<-fn.began
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the reservation freed: %d", resp.StatusCode)
	}
	// A reserved concurrency of 0 throttles every invoke.
	none := gateway.NewReservedPool(0, func(context.Context) (gateway.Invoker, error) { return fn, nil })
	zero := newGateway(t, map[string]gateway.Invoker{"effects": none, "reads": none, "workerapi": none})
	if resp, err := http.Post(zero.URL+"/v1/effects", "application/json", strings.NewReader("{}")); err != nil || resp.StatusCode != 500 {
		t.Errorf("reserved 0: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
