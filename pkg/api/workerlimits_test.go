package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
)

// On the wire: a post beyond the worker's budget is a 429 with Retry-After,
// which the harness's client surfaces at once (rate-limited, with the hint)
// instead of retrying; a settled worker's write is a 409; a released
// worker's credential is a 401.
func TestWorkerLimitsOnTheWire(t *testing.T) {
	env := servicetest.New(t, func(c *service.Config) {
		c.PostBudget = service.PostBudget{Rows: 0.001, RowBurst: 2, Bytes: 1 << 20, ByteBurst: 1 << 20}
	})
	var posts atomic.Int64
	h := api.New(api.WithService(env.Service), api.WithAuthenticator(api.StaticToken(token)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == workerapi.PathPost {
			posts.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	hh := &harness{srv: srv, env: env}
	effect := func(key, body string) {
		t.Helper()
		if status, out := hh.do(t, "POST", "/v1/effects", strings.NewReader(envelope(key, body))); status != 200 || !strings.Contains(out, `"applied"`) {
			t.Fatalf("effect %s: %d %s", key, status, out)
		}
	}
	effect("k-launch", launch)
	var worker string
	for h := range env.Runtime.Specs {
		worker = h
	}
	key, err := dpop.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(srv.URL, env.Runtime.Specs[worker].Token, client.WithRetry(5, time.Millisecond, time.Millisecond), client.WithProofKey(key))
	ctx := t.Context()

	for range 2 {
		if _, err := c.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "working"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "working"})
	ge := galleyerr.As(err)
	if ge == nil || ge.Kind != galleyerr.RateLimited || ge.RetryAfterSeconds < 1 || !strings.Contains(ge.Msg, "budget") {
		t.Fatalf("a post beyond the budget: %v (%+v)", err, ge)
	}
	if n := posts.Load(); n != 3 {
		t.Fatalf("%d post requests, want 3: a 429 is not retried", n)
	}

	// Its own worker-done is never refused for the budget.
	if _, err := c.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded}); err != nil {
		t.Fatalf("worker-done beyond the budget: %v", err)
	}
	if err := c.Ready(ctx, "again"); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("ready after settling: %v, want 409", err)
	}
	if self, err := c.Self(ctx); err != nil || self.State != protocol.StateSettled {
		t.Fatalf("self after settling: %+v, %v", self, err)
	}

	ref, _ := json.Marshal(protocol.Resource{Kind: "worker", Backend: "galley", Handle: worker})
	effect("k-release", `{"type":"release-resource","resource":`+string(ref)+`}`)
	for name, call := range map[string]func() error{
		"self":  func() error { _, err := c.Self(ctx); return err },
		"inbox": func() error { _, err := c.Inbox(ctx, 0, 0); return err },
		"exit":  func() error { return c.Exited(ctx, 1, "gone") },
	} {
		if err := call(); !galleyerr.Is(galleyerr.Unauthorized, err) {
			t.Errorf("%s with a released worker's credential: %v, want 401", name, err)
		}
	}
}
