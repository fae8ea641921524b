package awsfault_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
)

func TestParsePlan(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		ok    bool
		seed  uint64
		rates map[awsfault.Fault]float64
		ops   int
		delay time.Duration
	}{
		{spec: "throttle=0.02,timeout=0.01,lost-response=0.02,delayed=0.01,condition-failed=0.01,seed=7", ok: true, seed: 7,
			rates: map[awsfault.Fault]float64{awsfault.Throttle: 0.02, awsfault.Timeout: 0.01, awsfault.LostResponse: 0.02,
				awsfault.Delayed: 0.01, awsfault.ConditionFailed: 0.01}},
		{spec: " timeout=0.5 , lost-response=0.5, ops=ReceiveMessage+SendMessage, delay=200ms", ok: true, seed: 1,
			rates: map[awsfault.Fault]float64{awsfault.Timeout: 0.5, awsfault.LostResponse: 0.5}, ops: 2, delay: 200 * time.Millisecond},
		{spec: "throttle=0.3,throttle=0.9", ok: true, seed: 1, rates: map[awsfault.Fault]float64{awsfault.Throttle: 0.9}},
		{spec: ""},
		{spec: "seed=3"},
		{spec: "throttle=0"},
		{spec: "throttle"},
		{spec: "throttle=1.5"},
		{spec: "throttle=-0.1"},
		{spec: "throttle=0.6,timeout=0.6"},
		{spec: "explode=0.1"},
		{spec: "throttle=0.1,seed=x"},
		{spec: "throttle=0.1,ops=Scan"},
		{spec: "throttle=0.1,delay=soon"},
		{spec: "server-error=0.05,reset=0.05,tx-conflict=0.05,short-poll-miss=0.9,queue-deleted=0.01", ok: true, seed: 1,
			rates: map[awsfault.Fault]float64{awsfault.ServerError: 0.05, awsfault.Reset: 0.05, awsfault.TxConflict: 0.05}},
		{spec: "reset=0.1,short-poll-miss=2"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := awsfault.ParsePlan(tc.spec)
			if !tc.ok {
				if err == nil || !galleyerr.Is(galleyerr.Invalid, err) {
					t.Fatalf("ParsePlan(%q) = %v, want an Invalid error", tc.spec, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Seed != tc.seed || len(f.Ops) != tc.ops || f.Delay != tc.delay || len(f.Rates) != len(tc.rates) {
				t.Fatalf("plan %+v", f)
			}
			for k, p := range tc.rates {
				if f.Rates[k] != p {
					t.Errorf("rate of %v = %v, want %v", k, f.Rates[k], p)
				}
			}
			if f.Injector() == nil {
				t.Fatal("no injector")
			}
		})
	}
}

// The plan's injectors limit faults to its operations, the decorators'
// above the SDK and the Transport's on the wire, and count them by kind and
// operation; the requests that reached the service are counted by service.
func TestPlanCounts(t *testing.T) {
	f, err := awsfault.ParsePlan("timeout=0.4,throttle=0.4,ops=ReceiveMessage,seed=3")
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("a", "s", ""),
		HTTPClient:  &http.Client{Transport: f.Transport(nil)}})
	c := &awsfault.SQS{Client: client, Faults: f.Injector()}
	failed := 0
	for range 40 {
		_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(srv.URL + "/q")})
		var timeout *awsfault.TimeoutError
		switch {
		case err == nil:
		case errors.As(err, &timeout) || isThrottle(err):
			failed++
		default:
			t.Fatalf("a receive: %v", err)
		}
	}
	got := f.Counts()
	if got.Total() != failed || got.Injected["timeout"] == 0 || got.Injected["throttle"] == 0 ||
		got.ByOperation["ReceiveMessage"]["timeout"]+got.ByOperation["ReceiveMessage"]["throttle"] != failed {
		t.Fatalf("counts %+v, %d failed", got, failed)
	}
	if got.Calls["SQS"] != int(reached.Load()) || reached.Load() != int64(40-failed) {
		t.Fatalf("calls %v, %d reached the service, %d failed", got.Calls, reached.Load(), failed)
	}
}

func isThrottle(err error) bool {
	var api interface{ ErrorCode() string }
	return errors.As(err, &api) && api.ErrorCode() == "RequestThrottled"
}
