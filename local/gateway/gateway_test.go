package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/local/gateway"
)

// adapter is a function as galley builds them: httpadapter.NewV2 over an
// http.Handler, invoked in process with the gateway's payload.
type adapter struct {
	h    http.Handler
	mu   sync.Mutex
	last []byte
}

func (a *adapter) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	a.mu.Lock()
	a.last = payload
	a.mu.Unlock()
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	resp, err := httpadapter.NewV2(a.h).ProxyWithContext(ctx, ev)
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

func (a *adapter) event(t *testing.T) events.APIGatewayV2HTTPRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(a.last, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

type canned struct {
	result []byte
	err    error
	block  bool
}

func (c canned) Invoke(ctx context.Context, _ []byte) ([]byte, error) {
	if c.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return c.result, c.err
}

var routes = []gateway.Route{
	{Method: "POST", Path: "/v1/effects", Function: "effects"},
	{Method: "GET", Path: "/v1/descriptor", Function: "reads"},
	{Method: "POST", Path: "/worker/v1/{proxy+}", Function: "workerapi"},
}

func newGateway(t *testing.T, fns map[string]gateway.Invoker, opts ...gateway.Option) *httptest.Server {
	t.Helper()
	g, err := gateway.New(routes, fns, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv
}

// What the function sees is what it would see behind API Gateway, and
// what it answers reaches the client unchanged.
func TestRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_123_456)
	var seen struct {
		method, path, auth, accept, ctype string
		body                              []byte
		epoch                             int64
		reqID                             string
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.method, seen.path = r.Method, r.URL.Path
		seen.auth, seen.accept, seen.ctype = r.Header.Get("Authorization"), r.Header.Get("Accept"), r.Header.Get("Content-Type")
		seen.body, _ = io.ReadAll(r.Body)
		if rc, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok {
			seen.epoch, seen.reqID = rc.TimeEpoch, rc.RequestID
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, `{"status":"applied"}`)
	})
	fn := &adapter{h: h}
	srv := newGateway(t, map[string]gateway.Invoker{"effects": fn, "reads": fn, "workerapi": fn},
		gateway.WithClock(func() time.Time { return at }))

	body := `{"run":"run-1","request":{"key":"k-1"}}`
	req, _ := http.NewRequest("POST", srv.URL+"/v1/effects?x=1&x=2", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok-123")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	req.AddCookie(&http.Cookie{Name: "c1", Value: "v1"})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(got) != `{"status":"applied"}` || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("answer %d %q %q", resp.StatusCode, got, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("Apigw-Requestid") == "" || resp.Header.Get("Apigw-Requestid") != seen.reqID {
		t.Errorf("request id %q, function saw %q", resp.Header.Get("Apigw-Requestid"), seen.reqID)
	}
	if seen.method != "POST" || seen.path != "/v1/effects" || seen.auth != "Bearer tok-123" ||
		seen.accept != "application/json" || string(seen.body) != body || seen.epoch != at.UnixMilli() {
		t.Errorf("function saw %+v", seen)
	}
	ev := fn.event(t)
	if ev.Version != "2.0" || ev.RouteKey != "POST /v1/effects" || ev.RawPath != "/v1/effects" || ev.RawQueryString != "x=1&x=2" {
		t.Errorf("event: version %q route %q path %q query %q", ev.Version, ev.RouteKey, ev.RawPath, ev.RawQueryString)
	}
	if ev.IsBase64Encoded || ev.Body != body {
		t.Errorf("a JSON body was encoded: %v %q", ev.IsBase64Encoded, ev.Body)
	}
	if ev.Headers["idempotency-key"] != "k-1" || ev.Headers["x-multi"] != "a,b" || ev.Headers["content-length"] != "39" {
		t.Errorf("headers: %v", ev.Headers)
	}
	if _, ok := ev.Headers["Authorization"]; ok {
		t.Error("header names are not lowercased")
	}
	if len(ev.Cookies) != 1 || ev.Cookies[0] != "c1=v1" || ev.Headers["cookie"] != "" {
		t.Errorf("cookies %v, header %q", ev.Cookies, ev.Headers["cookie"])
	}
	if ev.QueryStringParameters["x"] != "1,2" || ev.RequestContext.HTTP.Method != "POST" || ev.RequestContext.Stage != "$default" {
		t.Errorf("context: %+v, query %v", ev.RequestContext, ev.QueryStringParameters)
	}
}

func TestGreedyRouteAndBinaryBody(t *testing.T) {
	var gotBody []byte
	var gotPath string
	fn := &adapter{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotPath = r.URL.Path
		gotBody, _ = io.ReadAll(r.Body)
		w.Write([]byte{0xff, 0x00, 0xfe})
	})}
	srv := newGateway(t, map[string]gateway.Invoker{"effects": fn, "reads": fn, "workerapi": fn})
	bin := []byte{0x00, 0x01, 0xff, 'x'}
	resp, err := http.Post(srv.URL+"/worker/v1/inbox", "application/octet-stream", bytes.NewReader(bin))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ev := fn.event(t)
	if ev.RouteKey != "POST /worker/v1/{proxy+}" || ev.PathParameters["proxy"] != "inbox" || gotPath != "/worker/v1/inbox" {
		t.Errorf("route %q params %v path %q", ev.RouteKey, ev.PathParameters, gotPath)
	}
	if !ev.IsBase64Encoded || ev.Body != base64.StdEncoding.EncodeToString(bin) || !bytes.Equal(gotBody, bin) {
		t.Errorf("binary body: encoded %v, function got %v", ev.IsBase64Encoded, gotBody)
	}
	if !bytes.Equal(out, []byte{0xff, 0x00, 0xfe}) {
		t.Errorf("binary answer %v", out)
	}
}

func TestGatewayAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fn     gateway.Invoker
		method string
		path   string
		body   []byte
		status int
		want   string
	}{
		{"no route", canned{}, "GET", "/v1/nothing", nil, 404, `{"message":"Not Found"}`},
		{"wrong method", canned{}, "GET", "/v1/effects", nil, 404, `{"message":"Not Found"}`},
		{"greedy prefix alone", canned{}, "POST", "/worker/v1/", nil, 404, `{"message":"Not Found"}`},
		{"function error", canned{err: &gateway.InvokeError{Kind: gateway.FunctionError, Type: "errorString", Message: "boom"}},
			"POST", "/v1/effects", []byte("{}"), 500, `{"message":"Internal Server Error"}`},
		{"emulator down", canned{err: &gateway.InvokeError{Kind: gateway.Unreachable, Message: "connection refused"}},
			"POST", "/v1/effects", []byte("{}"), 503, `{"message":"Service Unavailable"}`},
		{"integration timeout", canned{block: true}, "POST", "/v1/effects", []byte("{}"), 503, `{"message":"Service Unavailable"}`},
		{"payload too large for Lambda", canned{err: &gateway.InvokeError{Kind: gateway.TooLarge}},
			"POST", "/v1/effects", []byte("{}"), 500, `{"message":"Internal Server Error"}`},
		{"body over 10 MB", canned{}, "POST", "/v1/effects", bytes.Repeat([]byte("a"), gateway.MaxPayload+1), 413, `{"message":"Request Entity Too Large"}`},
		{"result without statusCode", canned{result: []byte(`{"a":1}`)}, "POST", "/v1/effects", nil, 200, `{"a":1}`},
		{"result not JSON", canned{result: []byte(`nope`)}, "POST", "/v1/effects", nil, 500, `{"message":"Internal Server Error"}`},
		{"base64 result", canned{result: []byte(`{"statusCode":201,"body":"aGk=","isBase64Encoded":true}`)}, "POST", "/v1/effects", nil, 201, `hi`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newGateway(t, map[string]gateway.Invoker{"effects": tc.fn, "reads": tc.fn, "workerapi": tc.fn},
				gateway.WithTimeout(100*time.Millisecond))
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, bytes.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || string(got) != tc.want {
				t.Errorf("got %d %s, want %d %s", resp.StatusCode, got, tc.status, tc.want)
			}
		})
	}
}

// The emulator's answers, as measured: a returned error and a timeout come
// with 200, a panic and a runtime exit with 502.
func TestEmulatorClassifies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		kind   gateway.ErrorKind
	}{
		{"result", 200, `{"statusCode":200,"body":"x"}`, 0},
		{"plain JSON result", 200, `{"ok":true}`, 0},
		{"returned error", 200, `{"errorMessage":"file does not exist","errorType":"errorString"}`, gateway.FunctionError},
		{"panic", 502, `{"errorMessage":"boom","errorType":"string","stackTrace":[]}`, gateway.FunctionError},
		{"runtime exit", 502, `{"errorType":"Runtime.ExitError","errorMessage":"exit status 3"}`, gateway.FunctionError},
		{"timeout", 200, `Task timed out after 3.00 seconds`, gateway.FunctionError},
		{"emulator error", 500, `oops`, gateway.Unreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != gateway.InvocationsPath {
					t.Errorf("path %s", r.URL.Path)
				}
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			e := &gateway.Emulator{URL: srv.URL}
			got, err := e.Invoke(context.Background(), []byte(`{}`))
			var ie *gateway.InvokeError
			switch {
			case tc.kind == 0 && (err != nil || string(got) != tc.body):
				t.Errorf("got %q, %v", got, err)
			case tc.kind != 0 && (!errors.As(err, &ie) || ie.Kind != tc.kind):
				t.Errorf("err %v, want kind %d", err, tc.kind)
			}
		})
	}
	e := &gateway.Emulator{URL: "http://127.0.0.1:1"}
	if _, err := e.Invoke(context.Background(), make([]byte, gateway.MaxInvokePayload+1)); err == nil {
		t.Error("an oversized payload was sent")
	}
}

// One invocation per emulator at a time, even when callers give up: an
// emulator is reused only once its invocation ended; the pool starts more
// up to its bound.
func TestPoolOneInvocationPerEmulator(t *testing.T) {
	var spawned atomic.Int32
	release := make(chan struct{})
	type emu struct {
		busy, max atomic.Int32
	}
	var emus []*emu
	var mu sync.Mutex
	spawn := func(context.Context) (gateway.Invoker, error) {
		spawned.Add(1)
		e := &emu{}
		mu.Lock()
		emus = append(emus, e)
		mu.Unlock()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := e.busy.Add(1)
			defer e.busy.Add(-1)
			for {
				m := e.max.Load()
				if n <= m || e.max.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			io.WriteString(w, `{"statusCode":200}`)
		}))
		t.Cleanup(srv.Close)
		return &gateway.Emulator{URL: srv.URL}, nil
	}
	p := gateway.NewPool(2, spawn)
	var wg sync.WaitGroup
	// Callers that give up quickly, then callers that wait.
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			p.Invoke(ctx, []byte(`{}`))
		}()
	}
	wg.Wait()
	if got := spawned.Load(); got != 2 {
		t.Errorf("spawned %d emulators, want the bound 2", got)
	}
	results := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := p.Invoke(context.Background(), []byte(`{}`))
			results <- err
		}()
	}
	close(release)
	for range 4 {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, e := range emus {
		if e.max.Load() > 1 {
			t.Errorf("emulator %d served %d invocations at once", i, e.max.Load())
		}
	}
}

// dying is an emulator whose process ends during its invocation.
type dying struct{ done chan struct{} }

func (d *dying) Invoke(context.Context, []byte) ([]byte, error) {
	close(d.done)
	return nil, &gateway.InvokeError{Kind: gateway.FunctionError, Type: "Runtime.ExitError", Message: "exit status 2"}
}

func (d *dying) Done() <-chan struct{} { return d.done }

// An emulator that ended is not reused: the next request starts another.
func TestPoolReplacesEndedEmulator(t *testing.T) {
	var spawned atomic.Int32
	p := gateway.NewPool(1, func(context.Context) (gateway.Invoker, error) {
		if spawned.Add(1) == 1 {
			return &dying{done: make(chan struct{})}, nil
		}
		return canned{result: []byte(`{"statusCode":200}`)}, nil
	})
	if _, err := p.Invoke(context.Background(), []byte(`{}`)); err == nil {
		t.Fatal("the dying emulator answered")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Invoke(ctx, []byte(`{}`)); err != nil {
		t.Fatalf("after an emulator ended: %v", err)
	}
	if spawned.Load() != 2 || p.Size() != 1 {
		t.Errorf("spawned %d, size %d", spawned.Load(), p.Size())
	}
}
