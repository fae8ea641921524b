package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/galley-run/galley/local/gateway"
)

// recorder is a function that answers 200 and keeps the route key and the
// greedy segment of each event it gets.
type recorder struct {
	name string
	mu   sync.Mutex
	got  []events.APIGatewayV2HTTPRequest
}

func (r *recorder) Invoke(_ context.Context, payload []byte) ([]byte, error) {
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(payload, &ev); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.got = append(r.got, ev)
	r.mu.Unlock()
	return json.Marshal(events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: r.name})
}

// TestMostSpecificRouteWins: API Gateway picks a route by how well it
// matches, never by the order routes were declared: a full match of path
// and method, then the full path under ANY, then the greedy route with the
// longest prefix (its method before ANY). So galley's catch-all
// ANY /v1/{proxy+} takes exactly the /v1/ requests no route of kitchn's
// takes, and shadows none of them nor the workers' routes, in whatever
// order the template lists them (aws-local sorts them by key, which puts
// ANY first).
func TestMostSpecificRouteWins(t *testing.T) {
	declared := []gateway.Route{
		{Method: "ANY", Path: "/v1/{proxy+}", Function: "catchall"},
		{Method: "POST", Path: "/v1/effects", Function: "effects"},
		{Method: "POST", Path: "/v1/effects/lookup", Function: "effects"},
		{Method: "GET", Path: "/v1/descriptor", Function: "reads"},
		{Method: "POST", Path: "/v1/deliveries/{proxy+}", Function: "mailbox"},
		{Method: "ANY", Path: "/v1/deliveries/{proxy+}", Function: "deliveries-any"},
		{Method: "ANY", Path: "/v1/runs/adopt", Function: "adopt-any"},
		{Method: "POST", Path: "/v1/runs/adopt", Function: "adopt"},
		{Method: "POST", Path: "/worker/v1/{proxy+}", Function: "workerapi"},
		{Method: "POST", Path: "/worker/v1/credential", Function: "credential"},
	}
	cases := []struct {
		method, path string
		fn, key      string // "" for API Gateway's own 404
		proxy        string
	}{
		{"POST", "/v1/effects", "effects", "POST /v1/effects", ""},
		{"POST", "/v1/effects/lookup", "effects", "POST /v1/effects/lookup", ""},
		{"GET", "/v1/descriptor", "reads", "GET /v1/descriptor", ""},
		{"GET", "/v1/effects", "catchall", "ANY /v1/{proxy+}", "effects"},
		{"DELETE", "/v1/descriptor", "catchall", "ANY /v1/{proxy+}", "descriptor"},
		{"POST", "/v1/nothing/deeper", "catchall", "ANY /v1/{proxy+}", "nothing/deeper"},
		{"POST", "/v1/effects/lookup/more", "catchall", "ANY /v1/{proxy+}", "effects/lookup/more"},
		{"POST", "/v1/deliveries/await", "mailbox", "POST /v1/deliveries/{proxy+}", "await"},
		{"GET", "/v1/deliveries/await", "deliveries-any", "ANY /v1/deliveries/{proxy+}", "await"},
		{"POST", "/v1/runs/adopt", "adopt", "POST /v1/runs/adopt", ""},
		{"GET", "/v1/runs/adopt", "adopt-any", "ANY /v1/runs/adopt", ""},
		{"POST", "/worker/v1/credential", "credential", "POST /worker/v1/credential", ""},
		{"POST", "/worker/v1/self", "workerapi", "POST /worker/v1/{proxy+}", "self"},
		{"GET", "/worker/v1/self", "", "", ""},
		{"GET", "/nothing", "", "", ""},
		{"GET", "/v1", "", "", ""},
	}
	orders := map[string][]gateway.Route{"declared": declared, "reversed": reversed(declared), "by key": byKey(declared)}
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			fns := map[string]gateway.Invoker{}
			recs := map[string]*recorder{}
			for _, r := range order {
				if recs[r.Function] == nil {
					recs[r.Function] = &recorder{name: r.Function}
					fns[r.Function] = recs[r.Function]
				}
			}
			g, err := gateway.New(order, fns)
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(g)
			defer srv.Close()
			for _, c := range cases {
				req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader("{}"))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if c.fn == "" {
					if resp.StatusCode != http.StatusNotFound || string(b) != `{"message":"Not Found"}` {
						t.Errorf("%s %s: %d %s, want the gateway's 404", c.method, c.path, resp.StatusCode, b)
					}
					continue
				}
				if resp.StatusCode != 200 || string(b) != c.fn {
					t.Errorf("%s %s: served by %q (%d), want %q", c.method, c.path, b, resp.StatusCode, c.fn)
					continue
				}
				rec := recs[c.fn]
				ev := rec.got[len(rec.got)-1]
				if ev.RouteKey != c.key || ev.PathParameters["proxy"] != c.proxy || ev.RawPath != c.path {
					t.Errorf("%s %s: route %q proxy %q path %q, want %q %q %q", c.method, c.path,
						ev.RouteKey, ev.PathParameters["proxy"], ev.RawPath, c.key, c.proxy, c.path)
				}
			}
		})
	}
}

func reversed(rs []gateway.Route) []gateway.Route {
	out := make([]gateway.Route, len(rs))
	for i, r := range rs {
		out[len(rs)-1-i] = r
	}
	return out
}

func byKey(rs []gateway.Route) []gateway.Route {
	out := append([]gateway.Route(nil), rs...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].Key() < out[i].Key() {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
