package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell/sqsbelltest"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

var _ reconcile.Sweeper = (*sqsbell.Bell)(nil)

// scheduled is the event EventBridge sends for a schedule rule.
func scheduled(id string) []byte {
	b, _ := json.Marshal(map[string]any{
		"version": "0", "id": id, "detail-type": "Scheduled Event", "source": "aws.events",
		"account": "000000000000", "time": "2023-11-14T22:00:00Z", "region": "us-east-1",
		"resources": []string{"arn:aws:events:us-east-1:000000000000:rule/galley-main-sweep"}, "detail": map[string]any{},
	})
	return b
}

// A scheduled event sweeps the doorbell's idle queues, keeps the ones in
// use and logs the count; the same reconciler still settles a worker from
// a task state change.
func TestScheduledEventSweepsIdleQueues(t *testing.T) {
	c := sqsbelltest.Client(t)
	clk := servicetest.NewManualClock(time.Now())
	bell, _ := sqsbelltest.NewBell(t, c, "galleyrec", clk.Now)
	listen := func(topic string) { sqsbelltest.Touch(t, bell, topic) }
	listen("mailbox/old-run") // last listen now, idle 25 hours by the sweep
	clk.Advance(25 * time.Hour)
	listen("mailbox/new-run")

	var logs bytes.Buffer
	e := newEnv(t, memstore.New(), reconcile.WithSweeper(bell, 24*time.Hour),
		reconcile.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // as the function's deadline
	defer cancel()
	if err := e.rec.HandleEvent(ctx, scheduled("ev-sweep-1")); err != nil {
		t.Fatalf("HandleEvent(scheduled): %v", err)
	}
	exists := func(topic string) bool {
		_, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(bell.QueueName(topic))})
		return err == nil
	}
	if exists("mailbox/old-run") {
		t.Error("the idle queue survived the sweep")
	}
	if !exists("mailbox/new-run") {
		t.Error("the sweep deleted a queue in use")
	}
	if !strings.Contains(logs.String(), `"msg":"doorbell sweep","event":"ev-sweep-1","idle":"24h0m0s","queues":1`) {
		t.Errorf("log lacks the sweep's count: %s", logs.String())
	}

	// Task state changes are untouched by the sweeper.
	e.deliver(e.event("STOPPED", 4, nil))
	if o := e.observe(); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
		t.Fatalf("after the stop: %+v", o)
	}
	if rows := e.doneRows(); len(rows) != 1 {
		t.Errorf("worker-done rows: %d", len(rows))
	}
}

// fakeSweeper records its calls and answers as told.
type fakeSweeper struct {
	n   int
	err error

	calls    int
	idle     time.Duration
	deadline bool
}

func (f *fakeSweeper) Sweep(ctx context.Context, idle time.Duration) (int, error) {
	f.calls++
	f.idle = idle
	_, f.deadline = ctx.Deadline()
	return f.n, f.err
}

func TestScheduledEventDispatch(t *testing.T) {
	failed := galleyerr.E(galleyerr.Unavailable, errors.New("AccessDenied: sqs:ListQueues"))
	tests := []struct {
		name      string
		sweeper   *fakeSweeper // nil: no sweeper
		event     []byte
		wantSweep bool
		wantErr   bool
		wantLog   string
	}{
		{name: "sweeps", sweeper: &fakeSweeper{n: 3}, event: scheduled("ev-1"), wantSweep: true,
			wantLog: `"msg":"doorbell sweep","event":"ev-1","idle":"5h0m0s","queues":3`},
		{name: "a failed sweep is an error, with what it deleted", sweeper: &fakeSweeper{n: 2, err: failed},
			event: scheduled("ev-2"), wantSweep: true, wantErr: true,
			wantLog: `"msg":"doorbell sweep failed","event":"ev-2","idle":"5h0m0s","queues":2,"err":`},
		{name: "no sweeper", event: scheduled("ev-3"),
			wantLog: `"msg":"scheduled event dropped: this reconciler has no doorbell to sweep","event":"ev-3"`},
		{name: "another aws.events event", sweeper: &fakeSweeper{},
			event:   []byte(`{"version":"0","id":"x","detail-type":"AWS API Call via CloudTrail","source":"aws.events","detail":{}}`),
			wantLog: `"msg":"event dropped"`},
		{name: "a Scheduled Event from another source", sweeper: &fakeSweeper{},
			event:   []byte(`{"version":"0","id":"x","detail-type":"Scheduled Event","source":"custom.app","detail":{}}`),
			wantLog: `"msg":"event dropped"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			opts := []reconcile.Option{reconcile.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil)))}
			if tt.sweeper != nil {
				opts = append(opts, reconcile.WithSweeper(tt.sweeper, 5*time.Hour))
			}
			r := reconcile.New(nil, memstore.New(), opts...)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := r.HandleEvent(ctx, tt.event)
			if (err != nil) != tt.wantErr {
				t.Fatalf("HandleEvent = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Errorf("error %v lost its kind", err)
			}
			swept := tt.sweeper != nil && tt.sweeper.calls > 0
			if swept != tt.wantSweep {
				t.Fatalf("swept %v, want %v", swept, tt.wantSweep)
			}
			if swept && (tt.sweeper.calls != 1 || tt.sweeper.idle != 5*time.Hour || !tt.sweeper.deadline) {
				t.Errorf("sweep calls %d idle %v deadline %v, want one call of 5h within the invocation's deadline",
					tt.sweeper.calls, tt.sweeper.idle, tt.sweeper.deadline)
			}
			if !strings.Contains(logs.String(), tt.wantLog) {
				t.Errorf("log %s lacks %s", logs.String(), tt.wantLog)
			}
		})
	}
}
