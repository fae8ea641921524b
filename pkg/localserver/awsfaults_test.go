package localserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/galleyerr"
)

func TestParseAWSFaults(t *testing.T) {
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
	} {
		t.Run(tc.spec, func(t *testing.T) {
			f, err := ParseAWSFaults(tc.spec)
			if !tc.ok {
				if err == nil || !galleyerr.Is(galleyerr.Invalid, err) {
					t.Fatalf("ParseAWSFaults(%q) = %v, want an Invalid error", tc.spec, err)
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

// nopSQS answers every receive with nothing.
type nopSQS struct{ awsfault.SQSAPI }

func (nopSQS) ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return &sqs.ReceiveMessageOutput{}, nil
}

// The plan's injector limits faults to its operations and counts them by
// kind and operation; calls that reached the client are counted by
// service.
func TestAWSFaultsCounts(t *testing.T) {
	f, err := ParseAWSFaults("timeout=0.5,throttle=0.5,ops=ReceiveMessage,seed=3")
	if err != nil {
		t.Fatal(err)
	}
	c := &awsfault.SQS{Client: nopSQS{}, Faults: f.Injector()}
	for range 40 {
		_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{})
		var timeout *awsfault.TimeoutError
		if err == nil || !errors.As(err, &timeout) && !isThrottle(err) {
			t.Fatalf("a receive under a plan that fails every one: %v", err)
		}
	}
	got := f.Counts()
	if got.Total() != 40 || got.Injected["timeout"] == 0 || got.Injected["throttle"] == 0 ||
		got.ByOperation["ReceiveMessage"]["timeout"]+got.ByOperation["ReceiveMessage"]["throttle"] != 40 || got.Calls["SQS"] != 0 {
		t.Fatalf("counts %+v", got)
	}
}

func isThrottle(err error) bool {
	var api interface{ ErrorCode() string }
	return errors.As(err, &api) && api.ErrorCode() == "RequestThrottled"
}
