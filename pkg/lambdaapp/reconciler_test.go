package lambdaapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/doorbell/sqsbell/sqsbelltest"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
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
// as lambda.Start would: a Lambda context and the function's deadline.
func invokeEvent(t *testing.T, app *lambdaapp.App, ev string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-reconcile-1"})
	return lambdaapp.Invocation(app.NewReconciler().HandleEvent)(ctx, json.RawMessage(ev))
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
		env[lambdaapp.EnvQueueIdleHours] = "3"
		env[lambdaapp.EnvQueuePrefix] = prefix
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

// On a doorbell without queues (localbell) the scheduled event is logged
// and dropped: no error, so EventBridge does not retry it.
func TestReconcilerWithoutQueuesDropsSchedule(t *testing.T) {
	app, logs := reconcilerApp(t, localbell.New(), nil)
	if app.Config.QueueIdle != lambdaapp.DefaultQueueIdle {
		t.Errorf("idle age %v, want the default %v", app.Config.QueueIdle, lambdaapp.DefaultQueueIdle)
	}
	if err := invokeEvent(t, app, scheduledEvent); err != nil {
		t.Fatalf("scheduled event: %v", err)
	}
	if !strings.Contains(logs.String(), "no doorbell to sweep") {
		t.Errorf("log %s", logs.String())
	}
}
