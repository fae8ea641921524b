package awsfault

import (
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Plan is a plan of faults injected into the DynamoDB store's and the SQS
// doorbell's clients, for fault runs under load (galley-dev serve
// --inject-aws-faults). It is a testing aid: a server running under it
// answers slowly and often uncertainly, by design.
//
// Faults act at two layers. Above the SDK (the decorators DynamoDB and
// SQS, given Injector): timeout, lost-response, delayed, condition-failed.
// Below it, on the wire (Transport), where the SDK's own retryer sees
// them: throttle, server-error and reset (both after the request was
// applied, so the SDK resends an applied write), tx-conflict. The SQS
// client also goes through HarshSQS (SQSTransport), with AWS's behaviours
// on: QueueDeletedRecently for 60 s, expired receipt handles of
// visibility-0 receives, and short polls that miss at short-poll-miss
// (default 0.5); queue-deleted deletes queues under their senders.
type Plan struct {
	// Spec is the plan as given, e.g.
	// "throttle=0.02,server-error=0.02,reset=0.01,tx-conflict=0.01,timeout=0.01,lost-response=0.02,seed=7".
	Spec  string
	Seed  uint64
	Rates map[Fault]float64
	// Ops limits the faults to these operations (ops=ReceiveMessage+SendMessage);
	// empty means every operation of both clients.
	Ops []string
	// Delay is how late a delayed call really runs (delay=200ms; default 50ms).
	Delay time.Duration
	// ShortPollMiss is how often a short poll answers empty
	// (short-poll-miss=0.5, the default; 0 turns it off).
	ShortPollMiss float64
	// QueueDeleted is how often a queue is deleted just before a
	// SendMessage to it (queue-deleted=0.01; default 0), as a sweep
	// elsewhere would: the ring meets QueueDeletedRecently for a minute.
	QueueDeleted float64

	inj   *Injector // the decorators'
	wire  *Injector // the Transport's
	harsh *HarshSQS // the SQS client's, once SQSTransport made it
}

// Operations the decorators count, by service: the ones a fault plan may
// name and the ones Counts reports.
var (
	dynamoOps = []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "TransactWriteItems",
		"DescribeTable", "CreateTable", "DeleteTable", "DescribeTimeToLive", "UpdateTimeToLive"}
	sqsOps = []string{"CreateQueue", "GetQueueUrl", "DeleteQueue", "ListQueues", "ListQueueTags", "TagQueue",
		"SendMessage", "ReceiveMessage", "DeleteMessageBatch"}
	faultKinds = []Fault{Throttle, Timeout, LostResponse, Delayed, ConditionFailed,
		ServerError, Reset, TxConflict}
	// wireKinds act below the SDK.
	wireKinds = []Fault{Throttle, ServerError, Reset, TxConflict}
)

// ParsePlan reads a fault plan: comma-separated name=value pairs, one
// rate (0 to 1, summing to at most 1) per fault kind (throttle, timeout,
// lost-response, delayed, condition-failed, server-error, reset,
// tx-conflict), seed=N, ops=Op1+Op2, delay=duration, short-poll-miss=p and
// queue-deleted=p.
// The plan's injectors are ready to use.
func ParsePlan(spec string) (*Plan, error) {
	bad := func(format string, args ...any) error {
		return galleyerr.Errorf(galleyerr.Invalid, "aws fault plan: "+format, args...)
	}
	f := &Plan{Spec: spec, Seed: 1, Rates: map[Fault]float64{}, ShortPollMiss: 0.5}
	sum := 0.0
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, bad("%q is not name=value", part)
		}
		name, val = strings.TrimSpace(name), strings.TrimSpace(val)
		switch name {
		case "seed":
			n, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, bad("seed %q is not a number", val)
			}
			f.Seed = n
			continue
		case "delay":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 {
				return nil, bad("delay %q is not a duration", val)
			}
			f.Delay = d
			continue
		case "short-poll-miss", "queue-deleted":
			p, err := strconv.ParseFloat(val, 64)
			if err != nil || p < 0 || p > 1 {
				return nil, bad("%s %q is not between 0 and 1", name, val)
			}
			if name == "queue-deleted" {
				f.QueueDeleted = p
			} else {
				f.ShortPollMiss = p
			}
			continue
		case "ops":
			for o := range strings.SplitSeq(val, "+") {
				if !slices.Contains(dynamoOps, o) && !slices.Contains(sqsOps, o) {
					return nil, bad("no DynamoDB or SQS operation %q", o)
				}
				f.Ops = append(f.Ops, o)
			}
			continue
		}
		kind, known := None, false
		for _, k := range faultKinds {
			if k.String() == name {
				kind, known = k, true
			}
		}
		if !known {
			return nil, bad("unknown fault %q (throttle, timeout, lost-response, delayed, condition-failed, server-error, reset, tx-conflict, seed, ops, delay, short-poll-miss, queue-deleted)", name)
		}
		p, err := strconv.ParseFloat(val, 64)
		if err != nil || p < 0 || p > 1 {
			return nil, bad("rate of %s %q is not between 0 and 1", name, val)
		}
		sum += p - f.Rates[kind]
		f.Rates[kind] = p
	}
	if sum > 1+1e-9 {
		return nil, bad("the rates add up to %g, more than 1", sum)
	}
	if sum == 0 {
		return nil, bad("%q injects nothing", spec)
	}
	above, below := map[Fault]float64{}, map[Fault]float64{}
	for k, p := range f.Rates {
		if slices.Contains(wireKinds, k) {
			below[k] = p
		} else {
			above[k] = p
		}
	}
	f.inj, f.wire = New(), New()
	f.inj.SetRates(f.Seed, above, f.Ops...)
	f.wire.SetRates(f.Seed+1, below, f.Ops...)
	if f.Delay > 0 {
		f.inj.SetDelay(f.Delay)
	}
	return f, nil
}

// Injector is the plan's injector above the SDK, shared by both clients.
func (f *Plan) Injector() *Injector { return f.inj }

// Transport is the plan's wire layer on base (nil: the default transport),
// shared by both clients.
func (f *Plan) Transport(base http.RoundTripper) http.RoundTripper {
	return &Transport{Base: base, Faults: f.wire}
}

// PlanCounts is what a plan injected so far and how many calls reached
// DynamoDB and SQS.
type PlanCounts struct {
	// Injected counts each fault kind, by its name (throttle, ...).
	Injected map[string]int `json:"injected"`
	// ByOperation counts each operation's faults: "UpdateItem" →
	// "lost-response" → n.
	ByOperation map[string]map[string]int `json:"byOperation"`
	// Calls counts the requests that reached DynamoDB and SQS (a lost
	// response's, a delayed call's and the SDK's resends included).
	Calls map[string]int `json:"calls"`
	// SQS is what HarshSQS did: creations refused as deleted recently,
	// short polls that missed, deletes with expired receipt handles.
	SQS HarshCounts `json:"sqs"`
}

// Total is the number of faults injected.
func (c PlanCounts) Total() int {
	n := 0
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// Counts reads the plan's counters.
func (f *Plan) Counts() PlanCounts {
	c := PlanCounts{Injected: map[string]int{}, ByOperation: map[string]map[string]int{}, Calls: map[string]int{}}
	for _, kind := range faultKinds {
		c.Injected[kind.String()] = f.inj.Injected("", kind) + f.wire.Injected("", kind)
	}
	for _, o := range append(slices.Clone(dynamoOps), sqsOps...) {
		for _, kind := range faultKinds {
			if n := f.inj.Injected(o, kind) + f.wire.Injected(o, kind); n > 0 {
				if c.ByOperation[o] == nil {
					c.ByOperation[o] = map[string]int{}
				}
				c.ByOperation[o][kind.String()] = n
			}
		}
	}
	for name, ops := range map[string][]string{"DynamoDB": dynamoOps, "SQS": sqsOps} {
		for _, o := range ops {
			c.Calls[name] += f.wire.Calls(o)
		}
	}
	if f.harsh != nil {
		c.SQS = f.harsh.Counts()
	}
	return c
}

// LogCounts writes the counters as one log line, the message msg.
func (f *Plan) LogCounts(log *slog.Logger, msg string) {
	c := f.Counts()
	log.Warn(msg, "faults", f.Spec, "total", c.Total(), "injected", c.Injected, "byOperation", c.ByOperation, "calls", c.Calls, "sqs", c.SQS)
}

// SQSTransport is the plan's wire layer over a HarshSQS (AWS's behaviours,
// the plan's short-poll-miss and queue-deleted rates) on base (nil: the
// default transport), for the SQS client. Counts reports the HarshSQS's
// counters from then on.
func (f *Plan) SQSTransport(base http.RoundTripper) http.RoundTripper {
	f.harsh = NewHarshSQS(base, f.Seed)
	f.harsh.MissRate = f.ShortPollMiss
	f.harsh.DeleteRate = f.QueueDeleted
	return f.Transport(f.harsh)
}
