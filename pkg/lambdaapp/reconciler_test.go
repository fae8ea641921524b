package lambdaapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell/sqsbelltest"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/metrics"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// scheduledEvent is what an EventBridge schedule rule sends.
const scheduledEvent = `{"version":"0","id":"ev-sweep","detail-type":"Scheduled Event","source":"aws.events",` +
	`"account":"000000000000","time":"2023-11-14T22:00:00Z","region":"us-east-1",` +
	`"resources":["arn:aws:events:us-east-1:000000000000:rule/sweep"],"detail":{}}`

// reconcilerApp is the reconciler function's App on doorbell d, its
// environment changed by mod, with its log.
func reconcilerApp(t *testing.T, d service.Doorbell, mod func(map[string]string)) (*lambdaapp.App, *bytes.Buffer) {
	t.Helper()
	env := baseEnv()
	workerSecretFromFile(t, env)
	if mod != nil {
		mod(env)
	}
	cfg, err := lambdaapp.ConfigFromEnv(lambdaapp.Reconciler, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	te := servicetest.New(t, nil)
	app, err := lambdaapp.New(context.Background(), cfg, lambdaapp.Deps{
		Store: memstore.New(), Doorbell: d, Runtime: servicetest.NewRuntime(), GitHost: te.Git,
		Log: lambdaapp.NewLogger(&logs, lambdaapp.Reconciler, "info"), Secrets: noSecrets{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	return app, &logs
}

// invokeEvent runs one EventBridge event through the reconciler's handler
// as lambda.Start would: a Lambda context and the function's deadline. The
// reconciler is the function's, with opts after its own (the metrics go
// nowhere unless opts say where).
func invokeEvent(t *testing.T, app *lambdaapp.App, ev string, opts ...reconcile.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-reconcile-1"})
	opts = append([]reconcile.Option{reconcile.WithMetrics(io.Discard)}, opts...)
	return lambdaapp.Invocation(app.NewReconciler(opts...).HandleEvent)(ctx, json.RawMessage(ev))
}

// housekeepingTick is the 5-minute schedule's event at the RFC 3339 time at.
func housekeepingTick(at string) string {
	return strings.Replace(scheduledEvent, `"time":"2023-11-14T22:00:00Z"`, `"time":"`+at+`"`, 1)
}

// The reconciler function on the SQS doorbell: the scheduled event deletes
// the queues idle for longer than GALLEY_QUEUE_IDLE_HOURS and logs how
// many; a task state change still settles its worker.
func TestReconcilerSweepsOnScheduleAndStillSettles(t *testing.T) {
	c := sqsbelltest.Client(t)
	clk := servicetest.NewManualClock(time.Now())
	bell, prefix := sqsbelltest.NewBell(t, c, "galleyapp", clk.Now)
	listen := func(topic string) { sqsbelltest.Touch(t, bell, topic) }
	listen("mailbox/old-run")
	clk.Advance(4 * time.Hour)
	listen("mailbox/new-run")

	app, logs := reconcilerApp(t, bell, func(env map[string]string) {
		env[contract.EnvQueueIdleHours] = "3"
		env[contract.EnvQueuePrefix] = prefix
	})
	if err := invokeEvent(t, app, scheduledEvent); err != nil {
		t.Fatalf("scheduled event: %v", err)
	}
	exists := func(topic string) bool {
		_, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String(bell.QueueName(topic))})
		return err == nil
	}
	if exists("mailbox/old-run") {
		t.Error("the queue idle for 4 h survived a sweep of 3 h")
	}
	if !exists("mailbox/new-run") {
		t.Error("the sweep deleted a queue in use")
	}
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"msg":"doorbell sweep"`) {
			json.Unmarshal([]byte(l), &line)
		}
	}
	if line["queues"] != 1.0 || line["idle"] != "3h0m0s" || line["requestId"] != "req-reconcile-1" || line["function"] != "reconciler" {
		t.Errorf("sweep log line %v, in %s", line, logs.String())
	}

	// A worker whose task stopped without a report settles failed.
	raw, err := app.Service.Apply(context.Background(), protocol.EffectCall{Run: "run-1", Request: protocol.EffectRequest{
		House: "h", Backend: "galley", Credential: "galley-token", Task: "t", Attempt: 1, Key: "k-launch",
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(
			`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"b"}`)},
	}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var receipt protocol.Receipt
	if err := json.Unmarshal(raw, &receipt); err != nil || len(receipt.Created) == 0 || receipt.Created[0].Kind != protocol.KindWorker {
		t.Fatalf("launch receipt %s: %v", raw, err)
	}
	handle := receipt.Created[0].Handle
	stopped, _ := json.Marshal(map[string]any{
		"version": "0", "id": "ev-stop", "detail-type": "ECS Task State Change", "source": "aws.ecs",
		"time": "2023-11-14T22:13:20Z", "region": "us-east-1",
		"detail": map[string]any{
			"taskArn":    "arn:aws:ecs:us-east-1:000000000000:task/galley/" + strings.Repeat("b", 32),
			"clusterArn": "arn:aws:ecs:us-east-1:000000000000:cluster/galley", "startedBy": ecsrt.StartedBy(handle),
			"lastStatus": "STOPPED", "desiredStatus": "STOPPED", "version": 3, "stopCode": "EssentialContainerExited",
			"containers": []map[string]any{{"name": "worker", "lastStatus": "STOPPED", "exitCode": 1}},
		},
	})
	if err := invokeEvent(t, app, string(stopped)); err != nil {
		t.Fatalf("task state change: %v", err)
	}
	o, err := app.Service.Observe(context.Background(), protocol.Resource{Kind: "worker", Backend: "galley", Handle: handle})
	if err != nil {
		t.Fatal(err)
	}
	if o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
		t.Errorf("after the stop: %+v", o)
	}
}

// On a doorbell without queues (localbell) the sweeping tick sweeps
// nothing and is no error (so it is not retried); its gauges are emitted.
func TestReconcilerWithoutQueuesDropsSchedule(t *testing.T) {
	app, logs := reconcilerApp(t, localbell.New(), nil)
	if app.Config.QueueIdle != lambdaapp.DefaultQueueIdle {
		t.Errorf("idle age %v, want the default %v", app.Config.QueueIdle, lambdaapp.DefaultQueueIdle)
	}
	if err := invokeEvent(t, app, scheduledEvent); err != nil {
		t.Fatalf("scheduled event: %v", err)
	}
	if !strings.Contains(logs.String(), `"msg":"worker gauges","function":"reconciler","event":"ev-sweep","live":0,"stuck":0`) ||
		strings.Contains(logs.String(), "doorbell sweep") {
		t.Errorf("log %s", logs.String())
	}
}

// The reconciler function's stdout on every housekeeping tick: an
// embedded metric format line of its own among the JSON log lines, giving
// the house's worker gauges as CloudWatch extracts them; the log says the
// counts with the request id. Only the tick in the hour's first five
// minutes sweeps, and with localbell there is nothing to sweep.
func TestReconcilerEmitsGaugesOnEveryTick(t *testing.T) {
	app, _ := reconcilerApp(t, localbell.New(), nil)
	if _, err := app.Service.Apply(context.Background(), protocol.EffectCall{Run: "run-1", Request: protocol.EffectRequest{
		House: "h", Backend: "galley", Credential: "galley-token", Task: "t", Attempt: 1, Key: "k-launch",
		Effect: protocol.EffectTarget{Executor: "worker", Effect: json.RawMessage(
			`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"b"}`)},
	}}, time.Now()); err != nil {
		t.Fatal(err)
	}

	// One stream, as the function's stdout: its log and its metrics.
	var stdout bytes.Buffer
	shared := []reconcile.Option{reconcile.WithMetrics(&stdout),
		reconcile.WithLogger(lambdaapp.NewLogger(&stdout, lambdaapp.Reconciler, "info"))}
	for _, at := range []string{"2023-11-14T22:00:00Z", "2023-11-14T22:05:00Z"} {
		if err := invokeEvent(t, app, housekeepingTick(at), shared...); err != nil {
			t.Fatalf("tick at %s: %v", at, err)
		}
	}
	var emf, logged int
	for _, line := range strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n") {
		var obj map[string]any
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("stdout line is not one JSON object: %q", line)
		}
		ds, ok := metrics.Parse([]byte(line))
		if !ok {
			if obj["msg"] == "worker gauges" {
				logged++
				if obj["live"] != 1.0 || obj["stuck"] != 0.0 || obj["requestId"] != "req-reconcile-1" {
					t.Errorf("gauges log line %s", line)
				}
			}
			continue
		}
		emf++
		got := map[string]float64{}
		for _, d := range ds {
			if d.Namespace != "galley" || d.Dimensions["House"] != "h" || len(d.Dimensions) != 1 || d.Unit != "Count" {
				t.Errorf("data point %+v", d)
			}
			got[d.Name] = d.Value
		}
		if len(got) != 2 || got["LiveWorkers"] != 1 || got["StuckWorkers"] != 0 {
			t.Errorf("gauges %v, want LiveWorkers 1 and StuckWorkers 0", got)
		}
	}
	if emf != 2 || logged != 2 {
		t.Errorf("%d EMF lines and %d gauge log lines, want 2 of each: %s", emf, logged, stdout.String())
	}
}
