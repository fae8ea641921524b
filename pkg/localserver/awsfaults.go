package localserver

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// AWSFaults is a plan of faults injected into the DynamoDB store's and the
// SQS doorbell's clients, for fault runs under load (galley serve
// --inject-aws-faults). It is a testing aid: a server running under it
// answers slowly and often uncertainly, by design.
type AWSFaults struct {
	// Spec is the plan as given, e.g.
	// "throttle=0.02,timeout=0.01,lost-response=0.02,delayed=0.01,condition-failed=0.01,seed=7".
	Spec  string
	Seed  uint64
	Rates map[awsfault.Fault]float64
	// Ops limits the faults to these operations (ops=ReceiveMessage+SendMessage);
	// empty means every operation of both clients.
	Ops []string
	// Delay is how late a delayed call really runs (delay=200ms; default 50ms).
	Delay time.Duration

	inj *awsfault.Injector
}

// Operations the decorators count, by service: the ones a fault plan may
// name and the ones Counts reports.
var (
	dynamoOps = []string{"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "TransactWriteItems",
		"DescribeTable", "CreateTable", "DeleteTable", "DescribeTimeToLive", "UpdateTimeToLive"}
	sqsOps = []string{"CreateQueue", "GetQueueUrl", "DeleteQueue", "ListQueues", "ListQueueTags", "TagQueue",
		"SendMessage", "ReceiveMessage", "DeleteMessageBatch"}
	faultKinds = []awsfault.Fault{awsfault.Throttle, awsfault.Timeout, awsfault.LostResponse, awsfault.Delayed, awsfault.ConditionFailed}
)

// ParseAWSFaults reads a fault plan: comma-separated name=value pairs, one
// rate (0 to 1, summing to at most 1) per fault kind (throttle, timeout,
// lost-response, delayed, condition-failed), seed=N, ops=Op1+Op2 and
// delay=duration. The plan's injector is ready to use.
func ParseAWSFaults(spec string) (*AWSFaults, error) {
	bad := func(format string, args ...any) error {
		return galleyerr.Errorf(galleyerr.Invalid, "aws fault plan: "+format, args...)
	}
	f := &AWSFaults{Spec: spec, Seed: 1, Rates: map[awsfault.Fault]float64{}}
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
		case "ops":
			for o := range strings.SplitSeq(val, "+") {
				if !slices.Contains(dynamoOps, o) && !slices.Contains(sqsOps, o) {
					return nil, bad("no DynamoDB or SQS operation %q", o)
				}
				f.Ops = append(f.Ops, o)
			}
			continue
		}
		kind, known := awsfault.None, false
		for _, k := range faultKinds {
			if k.String() == name {
				kind, known = k, true
			}
		}
		if !known {
			return nil, bad("unknown fault %q (throttle, timeout, lost-response, delayed, condition-failed, seed, ops, delay)", name)
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
	f.inj = awsfault.New()
	f.inj.SetRates(f.Seed, f.Rates, f.Ops...)
	if f.Delay > 0 {
		f.inj.SetDelay(f.Delay)
	}
	return f, nil
}

// Injector is the plan's injector, shared by both clients.
func (f *AWSFaults) Injector() *awsfault.Injector { return f.inj }

// FaultCounts is what a plan injected so far and how many calls reached
// DynamoDB and SQS.
type FaultCounts struct {
	// Injected counts each fault kind, by its name (throttle, ...).
	Injected map[string]int `json:"injected"`
	// ByOperation counts each operation's faults: "UpdateItem" →
	// "lost-response" → n.
	ByOperation map[string]map[string]int `json:"byOperation"`
	// Calls counts the calls that reached DynamoDB and SQS (a lost
	// response's and a delayed call's included).
	Calls map[string]int `json:"calls"`
}

// Total is the number of faults injected.
func (c FaultCounts) Total() int {
	n := 0
	for _, v := range c.Injected {
		n += v
	}
	return n
}

// Counts reads the plan's counters.
func (f *AWSFaults) Counts() FaultCounts {
	c := FaultCounts{Injected: map[string]int{}, ByOperation: map[string]map[string]int{}, Calls: map[string]int{}}
	for _, kind := range faultKinds {
		c.Injected[kind.String()] = f.inj.Injected("", kind)
	}
	for _, o := range append(slices.Clone(dynamoOps), sqsOps...) {
		for _, kind := range faultKinds {
			if n := f.inj.Injected(o, kind); n > 0 {
				if c.ByOperation[o] == nil {
					c.ByOperation[o] = map[string]int{}
				}
				c.ByOperation[o][kind.String()] = n
			}
		}
	}
	for name, ops := range map[string][]string{"DynamoDB": dynamoOps, "SQS": sqsOps} {
		for _, o := range ops {
			c.Calls[name] += f.inj.Calls(o)
		}
	}
	return c
}

// logCounts writes the counters as one log line (also at shutdown).
func (f *AWSFaults) logCounts(log *slog.Logger, msg string) {
	c := f.Counts()
	log.Warn(msg, "faults", f.Spec, "total", c.Total(), "injected", c.Injected, "byOperation", c.ByOperation, "calls", c.Calls)
}

// OpenDynamoStore opens the DynamoDB store on table from the AWS SDK's
// standard variables, creating the table when missing. With faults, the
// store's client injects them; the table is made without.
func OpenDynamoStore(ctx context.Context, table string, faults *AWSFaults) (*dynamostore.Store, error) {
	if faults == nil {
		return dynamostore.Open(ctx, table)
	}
	c, err := dynamostore.NewClientFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	if err := dynamostore.New(c, table).EnsureTable(ctx); err != nil {
		return nil, err
	}
	return dynamostore.New(&awsfault.DynamoDB{Client: c, Faults: faults.inj}, table), nil
}

// OpenSQSBell opens the SQS doorbell on queues named prefix-... from the
// AWS SDK's standard variables. With faults, its client injects them.
func OpenSQSBell(ctx context.Context, prefix string, faults *AWSFaults) (*sqsbell.Bell, error) {
	if faults == nil {
		return sqsbell.Open(ctx, prefix)
	}
	c, err := sqsbell.NewClientFromEnv(ctx)
	if err != nil {
		return nil, err
	}
	return sqsbell.New(&awsfault.SQS{Client: c, Faults: faults.inj}, prefix)
}
