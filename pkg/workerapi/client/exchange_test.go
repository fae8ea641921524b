package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
)

// A bootstrap exchange that API Gateway throttles (429, no Retry-After,
// or with one) is tried again until it is answered; another refusal is
// final at once; a throttle that outlasts the caller's context ends with
// the rate-limited error.
func TestExchangeRetriesThrottle(t *testing.T) {
	serve := func(throttled int32, status int) (*httptest.Server, *atomic.Int32) {
		var calls atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := calls.Add(1)
			if n <= throttled {
				if n%2 == 0 {
					w.Header().Set("Retry-After", "1")
				}
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"message":"Too Many Requests"}`))
				return
			}
			_ = json.NewEncoder(w).Encode(workerapi.CredentialAnswer{Token: "w-1.tok"})
		}))
		t.Cleanup(srv.Close)
		return srv, &calls
	}
	fastRetry := client.WithRetry(4, time.Millisecond, 5*time.Millisecond)

	srv, calls := serve(3, http.StatusTooManyRequests)
	tok, err := client.ExchangeBootstrap(context.Background(), srv.URL, "w-1", "gb1.x", "claim", fastRetry)
	if err != nil || tok != "w-1.tok" || calls.Load() != 4 {
		t.Fatalf("throttled three times: %q %v after %d calls", tok, err, calls.Load())
	}

	srv, calls = serve(100, http.StatusUnauthorized)
	if _, err := client.ExchangeBootstrap(context.Background(), srv.URL, "w-1", "gb1.x", "claim", fastRetry); !galleyerr.Is(galleyerr.Unauthorized, err) || calls.Load() != 1 {
		t.Fatalf("refused: %v after %d calls", err, calls.Load())
	}

	srv, _ = serve(1<<30, http.StatusTooManyRequests)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := client.ExchangeBootstrap(ctx, srv.URL, "w-1", "gb1.x", "claim", fastRetry); !galleyerr.Is(galleyerr.RateLimited, err) {
		t.Fatalf("throttled for ever: %v", err)
	}
}
