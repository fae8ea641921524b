package awslocal

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/metrics"
)

// asyncRetryDelays are the waits before Lambda's retries of an
// asynchronous invocation. AWS waits about one and then two minutes; the
// local stack waits seconds, so a test sees the whole sequence.
var asyncRetryDelays = []time.Duration{time.Second, 2 * time.Second}

// deliverEvent is EventBridge for the ECS stand-in's task state changes:
// every rule whose pattern matches sends the event to its targets, each an
// asynchronous invocation (accepted at once; the function's failures are
// Lambda's to retry and, at last, to send to the on-failure destination).
func (s *Stack) deliverEvent(ctx context.Context, ev []byte) error {
	if s.model == nil {
		return errors.New("the stack is not deployed yet")
	}
	for _, r := range s.model.rules {
		if r.Pattern == nil {
			continue
		}
		ok, err := matchPattern(r.Pattern, ev)
		if err != nil {
			return fmt.Errorf("rule %s: %w", r.ID, err)
		}
		if !ok {
			continue
		}
		for _, fn := range r.Targets {
			s.invokeAsync(fn, ev)
		}
	}
	return nil
}

// asyncConfig is a function's EventInvokeConfig: how many retries, and
// where a failed event goes.
func (s *Stack) asyncConfig(fn string) (retries int, onFailure string) {
	retries = 2
	f := s.model.functions[fn]
	for _, id := range s.deploy.t.OfType("AWS::Lambda::EventInvokeConfig") {
		p := s.deploy.props[id]
		if name := str(p, "FunctionName"); name != f.Name && name != f.Arn {
			continue
		}
		if n, ok := p["MaximumRetryAttempts"].(float64); ok {
			retries = int(n)
		}
		onFailure = str(asMap(asMap(asMap(p["DestinationConfig"])["OnFailure"])), "Destination")
	}
	return retries, onFailure
}

// invokeAsync runs one asynchronous invocation in the background.
func (s *Stack) invokeAsync(fn string, payload []byte) {
	retries, onFailure := s.asyncConfig(fn)
	go func() {
		var err error
		var resp []byte
		attempts := 0
		for attempts = 1; attempts <= retries+1; attempts++ {
			ctx, cancel := context.WithTimeout(context.Background(), s.model.functions[fn].Timeout+5*time.Second)
			resp, err = s.invoke(ctx, fn, payload)
			cancel()
			if err == nil {
				return
			}
			if attempts <= len(asyncRetryDelays) && attempts <= retries {
				select {
				case <-time.After(asyncRetryDelays[attempts-1]):
				case <-s.stopped:
					return
				}
			}
		}
		s.cfg.Logger.Warn("asynchronous invocation failed", "function", fn, "attempts", attempts-1, "err", err)
		if onFailure != "" {
			if derr := s.sendFailure(fn, onFailure, payload, resp, err, attempts-1); derr != nil {
				s.cfg.Logger.Error("on-failure destination", "function", fn, "err", derr)
			}
		}
	}()
}

// sendFailure writes Lambda's on-failure record to a queue destination.
func (s *Stack) sendFailure(fn, dest string, payload, resp []byte, invokeErr error, attempts int) error {
	var url string
	for _, id := range s.deploy.t.OfType("AWS::SQS::Queue") {
		if s.deploy.attrs[id]["Arn"] == dest {
			url = s.deploy.phys[id]
		}
	}
	if url == "" {
		return fmt.Errorf("destination %s is no queue of the template", dest)
	}
	rec := map[string]any{
		"version": "1.0", "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"requestContext": map[string]any{"requestId": randomHex(16), "functionArn": s.model.functions[fn].Arn + ":$LATEST",
			"condition": "RetriesExhausted", "approximateInvokeCount": attempts},
		"requestPayload":  json.RawMessage(payload),
		"responseContext": map[string]any{"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
		"responsePayload": map[string]any{"errorMessage": fmt.Sprint(invokeErr)},
	}
	b, _ := json.Marshal(rec)
	_, err := s.deploy.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(b))})
	return err
}

var rateExpr = regexp.MustCompile(`^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$`)

// startSchedules runs the template's schedule rules at their rates.
func (s *Stack) startSchedules() error {
	for _, r := range s.model.rules {
		if r.Schedule == "" {
			continue
		}
		m := rateExpr.FindStringSubmatch(r.Schedule)
		if m == nil {
			return fmt.Errorf("rule %s: schedule %q: the local stack runs rate(...) schedules only", r.ID, r.Schedule)
		}
		n, _ := strconv.Atoi(m[1])
		unit := map[string]time.Duration{"minute": time.Minute, "minutes": time.Minute, "hour": time.Hour,
			"hours": time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour}[m[2]]
		go func(r rule, every time.Duration) {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case now := <-t.C:
					for _, fn := range r.Targets {
						s.invokeAsync(fn, s.scheduledEvent(r, now))
					}
				case <-s.stopped:
					return
				}
			}
		}(r, time.Duration(n)*unit)
	}
	return nil
}

// scheduledEvent is the event EventBridge sends for a schedule rule.
func (s *Stack) scheduledEvent(r rule, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": randomHex(16), "detail-type": "Scheduled Event", "source": "aws.events",
		"account": localAccount, "time": at.UTC().Format(time.RFC3339), "region": localRegion,
		"resources": []string{s.deploy.attrs[r.ID]["Arn"].(string)}, "detail": map[string]any{},
	})
	return b
}

// FireSchedules sends every schedule rule's event for time at to its
// targets now, synchronously (tests; the stack's own tickers run them at
// their rates). It returns the first invocation error.
func (s *Stack) FireSchedules(ctx context.Context, at time.Time) error {
	var first error
	for _, r := range s.model.rules {
		if r.Schedule == "" {
			continue
		}
		for _, fn := range r.Targets {
			if _, err := s.invoke(ctx, fn, s.scheduledEvent(r, at)); err != nil && first == nil {
				first = fmt.Errorf("rule %s → %s: %w", r.ID, fn, err)
			}
		}
	}
	return first
}

// Metric is one data point a function emitted, with the function's name.
type Metric struct {
	Function string
	metrics.Datum
}

// metricSink reads the functions' output for embedded metric format lines,
// as CloudWatch Logs extracts them, and counts the AWS requests the gates
// authorized (one per request, however many authorizations it needed).
type metricSink struct {
	mu    sync.Mutex
	data  []Metric
	calls map[string]int // "service:Operation" → authorized requests
	usage usageCounter   // the rest of what the gates count (usage.go)
}

func newMetricSink() *metricSink {
	return &metricSink{calls: map[string]int{},
		usage: usageCounter{capacity: map[string]TableCapacity{}, byRole: map[string]RoleUsage{}}}
}

func (m *metricSink) all() []Metric {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Metric(nil), m.data...)
}

// capture returns a writer that passes fn's output to out and keeps the
// metric data of its EMF lines.
func (m *metricSink) capture(fn string, out io.Writer) io.Writer {
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if data, ok := metrics.Parse(line); ok {
				m.mu.Lock()
				for _, d := range data {
					m.data = append(m.data, Metric{Function: fn, Datum: d})
				}
				m.mu.Unlock()
			}
			_, _ = out.Write(append(line, '\n'))
		}
		_, _ = io.Copy(out, pr)
	}()
	return pw
}

func x509Pool(caPEM []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no certificate in the CA PEM")
	}
	return pool, nil
}
