package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/local/gateway"
)

// counting is a function that counts its invocations and answers 200,
// after hold if set (checking that its context outlived it).
type counting struct {
	n    atomic.Int32
	hold time.Duration
}

func (c *counting) Invoke(ctx context.Context, _ []byte) ([]byte, error) {
	c.n.Add(1)
	if c.hold > 0 {
		select {
		case <-time.After(c.hold):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return []byte(`{"statusCode":200,"body":"ok"}`), nil
}

func fnsOf(fn gateway.Invoker) map[string]gateway.Invoker {
	return map[string]gateway.Invoker{"effects": fn, "reads": fn, "workerapi": fn}
}

// slowBody sends the headers of a request announcing a body of length
// bytes, then the body one byte at a time (trickle) or nothing, and returns once the
// gateway has answered or closed the connection; a minute without either
// is an error (a gateway without a body deadline holds it for ever).
func slowBody(addr string, length int, trickle bool) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /worker/v1/credential HTTP/1.1\r\nHost: gw\r\n"+
		"Content-Type: application/json\r\nContent-Length: "+strconv.Itoa(length)+"\r\n\r\n{"); err != nil {
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if trickle {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute)) // a safety net, not an assertion
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	var ne net.Error
	switch {
	case err == nil:
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			return fmt.Errorf("a body that never arrived was answered %s, want 400", resp.Status)
		}
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("the gateway still holds a connection whose body never arrived")
	}
	return nil // answered, or closed without an answer
}

// A client that sends headers and then trickles its body, or never sends
// it, is cut off at the body deadline without invoking anything, and the
// gateway keeps serving.
func TestSlowBodyCutOff(t *testing.T) {
	fn := &counting{}
	srv := newGateway(t, fnsOf(fn), gateway.WithBodyTimeout(100*time.Millisecond))
	addr := strings.TrimPrefix(srv.URL, "http://")
	var wg sync.WaitGroup
	for i := range 8 {
		// A large announced body is abandoned after the answer; what
		// remains of a small one net/http reads before answering.
		length, trickle := []int{1_000_000, 100}[i%2], i%4 < 2
		wg.Go(func() {
			if err := slowBody(addr, length, trickle); err != nil {
				t.Errorf("%d bytes announced, trickle %v: %v", length, trickle, err)
			}
		})
	}
	wg.Wait()
	if n := fn.n.Load(); n != 0 {
		t.Fatalf("%d invocations for bodies that never arrived", n)
	}
	resp, err := http.Post(srv.URL+"/worker/v1/credential", "application/json", strings.NewReader(`{"handle":"w-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || fn.n.Load() != 1 {
		t.Fatalf("after the slow clients: %s, %d invocations", resp.Status, fn.n.Load())
	}
}

// The body deadline ends with the body: an invocation may run past it.
func TestInvocationOutlivesBodyDeadline(t *testing.T) {
	const deadline = 50 * time.Millisecond
	fn := &counting{hold: 4 * deadline}
	srv := newGateway(t, fnsOf(fn), gateway.WithBodyTimeout(deadline))
	resp, err := http.Post(srv.URL+"/v1/effects", "application/json", strings.NewReader(`{"run":"r"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("an invocation longer than the body deadline: %s %q", resp.Status, body)
	}
}

// Route throttles are token buckets on the gateway's clock: a route's
// burst passes, the next request is answered 429 without invoking
// anything, other routes keep their own budget, and the bucket refills at
// the rate.
func TestThrottle(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	fn := &counting{}
	srv := newGateway(t, fnsOf(fn), gateway.WithClock(clock),
		gateway.WithThrottle("", gateway.Throttle{RateLimit: 50, BurstLimit: 100}),
		gateway.WithThrottle("POST /worker/v1/{proxy+}", gateway.Throttle{RateLimit: 1, BurstLimit: 2}))
	post := func(path string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	for i := range 2 {
		if code, _ := post("/worker/v1/credential"); code != 200 {
			t.Fatalf("request %d within the burst: %d", i+1, code)
		}
	}
	code, body := post("/worker/v1/credential")
	if code != http.StatusTooManyRequests || body != `{"message":"Too Many Requests"}` {
		t.Fatalf("over the burst: %d %s", code, body)
	}
	if fn.n.Load() != 2 {
		t.Fatalf("%d invocations, want the 2 within the burst", fn.n.Load())
	}
	for i := range 10 { // the stage default, a bucket of its own
		if code, _ := post("/v1/effects"); code != 200 {
			t.Fatalf("kitchn's request %d while the worker route is throttled: %d", i+1, code)
		}
	}
	advance(time.Second)
	if code, _ := post("/worker/v1/inbox"); code != 200 {
		t.Fatalf("after a second's refill: %d", code)
	}
	if code, _ := post("/worker/v1/inbox"); code != http.StatusTooManyRequests {
		t.Fatalf("a second's refill let 2 through: %d", code)
	}
}

func TestThrottleNamesARoute(t *testing.T) {
	_, err := gateway.New(routes, fnsOf(&counting{}), gateway.WithThrottle("POST /worker/v1/credential", gateway.Throttle{RateLimit: 1, BurstLimit: 1}))
	if err == nil || !strings.Contains(err.Error(), "POST /worker/v1/credential") {
		t.Fatalf("a throttle on a route that does not exist: %v", err)
	}
}
