package awslocal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// TestAlarmsHaveEmittedMetrics proves that every alarm of the template
// watches a metric that something really emits: the galley namespace's
// gauges are captured from the reconciler's output (embedded metric format)
// on its housekeeping schedule, with the alarm's exact dimensions; a metric
// filter's metric comes from a log group the API writes its access log to;
// an AWS namespace's metric names a resource of the template that the
// service emits it for (AWS/Lambda: a function; AWS/SQS: a queue;
// AWS/ApiGateway: the API). A metric of a resource the stack does not
// have — a Container Insights metric of a service the cluster does not
// run — fails it.
func TestAlarmsHaveEmittedMetrics(t *testing.T) {
	t.Parallel()
	s, token := startStack(t)
	// A live worker, so the gauges count something.
	k := newKitchn(t, s, token, "run-gauges")
	if st, _ := k.effect("k-gauges", `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"idle"}`); st != "applied" {
		t.Fatalf("launch: %s", st)
	}
	if err := s.FireSchedules(context.Background(), time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	emitted := map[string]float64{}
	for _, m := range s.Metrics() {
		emitted[metricKey(m.Namespace, m.Name, m.Dimensions)] = m.Value
	}
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	if v, ok := emitted[metricKey("galley", "LiveWorkers", map[string]string{"House": house})]; !ok || v < 1 {
		t.Errorf("LiveWorkers with a live worker: %v (emitted %v)", v, emitted)
	}

	functions := map[string]bool{}
	for id := range s.Resources("AWS::Lambda::Function") {
		functions[s.PhysicalID(id)] = true
	}
	queues := map[string]bool{}
	for id := range s.Resources("AWS::SQS::Queue") {
		name, _ := s.Attribute(id, "QueueName")
		queues[name.(string)] = true
	}
	apis := map[string]bool{}
	for id := range s.Resources("AWS::ApiGatewayV2::Api") {
		apis[s.PhysicalID(id)] = true
	}
	accessLogs := map[string]bool{}
	for _, p := range s.Resources("AWS::ApiGatewayV2::Stage") {
		if als, ok := p["AccessLogSettings"].(map[string]any); ok {
			accessLogs[fmt.Sprint(als["DestinationArn"])] = true
		}
	}
	filtered := map[string]bool{} // metrics that metric filters on the access log make
	for _, p := range s.Resources("AWS::Logs::MetricFilter") {
		group := fmt.Sprint(p["LogGroupName"])
		written := false
		for arn := range accessLogs {
			written = written || strings.Contains(arn, ":log-group:"+group+":")
		}
		for _, mt := range p["MetricTransformations"].([]any) {
			m := mt.(map[string]any)
			if written {
				filtered[fmt.Sprint(m["MetricNamespace"])+"/"+fmt.Sprint(m["MetricName"])] = true
			}
		}
	}
	alarms := s.Resources("AWS::CloudWatch::Alarm")
	if len(alarms) == 0 {
		t.Fatal("the template has no alarms")
	}
	for id, p := range alarms {
		ns, name := fmt.Sprint(p["Namespace"]), fmt.Sprint(p["MetricName"])
		dims := map[string]string{}
		for _, d := range asList(p["Dimensions"]) {
			m := d.(map[string]any)
			dims[fmt.Sprint(m["Name"])] = fmt.Sprint(m["Value"])
		}
		switch {
		case filtered[ns+"/"+name]:
		case ns == "galley":
			if _, ok := emitted[metricKey(ns, name, dims)]; !ok {
				t.Errorf("alarm %s watches %s/%s %v, which nothing emitted (emitted: %v)", id, ns, name, dims, emitted)
			}
		case ns == "AWS/Lambda" && len(dims) == 1 && functions[dims["FunctionName"]]:
		case ns == "AWS/SQS" && len(dims) == 1 && queues[dims["QueueName"]]:
		case ns == "AWS/ApiGateway" && len(dims) == 1 && apis[dims["ApiId"]]:
		default:
			t.Errorf("alarm %s watches %s/%s %v: no resource of the template emits it", id, ns, name, dims)
		}
	}
}

func metricKey(ns, name string, dims map[string]string) string {
	b, _ := json.Marshal(dims)
	return ns + "/" + name + string(b)
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// TestReconcilerFailuresKept: when the reconciler cannot handle a task
// state change (here its role lost its table rights), Lambda retries the
// asynchronous invocation as the template's EventInvokeConfig says and
// then puts it in the on-failure destination queue, which an alarm
// watches; the event is not lost.
func TestReconcilerFailuresKept(t *testing.T) {
	t.Parallel()
	tpl := mutatedTemplate(t, func(res map[string]any) error {
		fn, err := functionByPath(res, "Reconciler")
		if err != nil {
			return err
		}
		role := fn["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0]
		for _, p := range resourcesOf(res, "AWS::IAM::Policy") {
			for _, r := range p["Roles"].([]any) {
				if r.(map[string]any)["Ref"] != role {
					continue
				}
				doc := p["PolicyDocument"].(map[string]any)
				var keep []any
				for _, st := range doc["Statement"].([]any) {
					if !strings.Contains(fmt.Sprint(st.(map[string]any)["Action"]), "dynamodb:") {
						keep = append(keep, st)
					}
				}
				doc["Statement"] = keep
				return nil
			}
		}
		return fmt.Errorf("no policy for the reconciler's role")
	})
	s, token := startStack(t, func(c *awslocal.Config) { c.Template = tpl; c.WorkerBin = "/bin/false" })
	var failures string
	for id := range s.Resources("AWS::SQS::Queue") {
		if strings.HasPrefix(id, "ReconcilerFailures") {
			failures = s.PhysicalID(id)
		}
	}
	if failures == "" {
		t.Fatal("the template has no ReconcilerFailures queue")
	}
	k := newKitchn(t, s, token, "run-fail")
	if st, _ := k.effect("k-fail", `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"x"}`); st != "applied" {
		t.Fatalf("launch: %s", st)
	}
	client := sqs.New(sqs.Options{Region: "us-east-1", BaseEndpoint: aws.String(os.Getenv("AWS_ENDPOINT_URL_SQS")),
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(failures), WaitTimeSeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			var rec struct {
				RequestContext struct {
					Condition              string
					ApproximateInvokeCount int
				}
				RequestPayload struct {
					Detail struct{ LastStatus string }
				}
			}
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.RequestContext.Condition != "RetriesExhausted" || rec.RequestContext.ApproximateInvokeCount < 2 {
				t.Errorf("on-failure record: %+v", rec.RequestContext)
			}
			t.Logf("kept after %d invocations: a %s event", rec.RequestContext.ApproximateInvokeCount, rec.RequestPayload.Detail.LastStatus)
			return
		}
	}
	t.Fatal("no failed event reached the on-failure queue")
}

// TestStageThrottleAWSLocal: the gateway throttles as the template's
// stage says (its default route settings, each route its own bucket): a
// burst beyond the limit on one route gets API Gateway's 429 before any
// function runs, and another route keeps its budget.
func TestStageThrottleAWSLocal(t *testing.T) {
	// Shared, but not parallel: its burst would throttle the others.
	s, token := sharedStack(t)
	var burst float64
	for _, p := range s.Resources("AWS::ApiGatewayV2::Stage") {
		burst, _ = p["DefaultRouteSettings"].(map[string]any)["ThrottlingBurstLimit"].(float64)
	}
	if burst < 1 {
		t.Fatal("the template's stage sets no burst limit")
	}
	n := int(burst) * 3
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for len(codes) < cap(codes) {
				req, _ := http.NewRequest("GET", s.Endpoint()+contract.PathDescriptor, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				resp.Body.Close()
				select {
				case codes <- resp.StatusCode:
				default:
					return
				}
			}
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[http.StatusTooManyRequests] == 0 || count[http.StatusUnauthorized] == 0 {
		t.Fatalf("%d calls beyond a burst of %v: %v (want some 401 from the function and some 429 from the gateway)", n, burst, count)
	}
	var inv map[string]any
	kitchnCall(t, s, token, contract.RouteInventory, "", &inv)
	t.Logf("answers: %v", count)
}

// TestAuthBeforeRoutingAWSLocal: through the stack deployed from its
// template, an unknown /v1/ path is authenticated before it is routed
// (the template's catch-all route): no token or a wrong one answers 401,
// the right one 404.
func TestAuthBeforeRoutingAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := sharedStack(t)
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"wrong-" + token, http.StatusUnauthorized}, {token, http.StatusNotFound}} {
		req, _ := http.NewRequest("POST", s.Endpoint()+"/v1/no/such/route", strings.NewReader(`{}`))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("unknown /v1/ path (token given: %v): %d, want %d", c.token != "", resp.StatusCode, c.want)
		}
	}
}

// TestWorkerImageMatchesDockerfile: the local worker image sets the same
// environment variables as the real images (worker/Dockerfile's ENV in the
// runtime stage and the family stages built on it), each pointing at this
// machine's programs; a variable added to the Dockerfile and not here
// fails it.
func TestWorkerImageMatchesDockerfile(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "worker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The ENV instructions of the stages the images are made of (the
	// runtime stage and those built on it), continuation lines joined.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages := strings.Split(text, "\nFROM ")
	want := map[string]bool{}
	var image []string
	for _, st := range stages[1:] {
		// "<base> AS <name>": the runtime stage, or one built on it.
		from := strings.Fields(strings.SplitN(st, "\n", 2)[0])
		if from[0] == "runtime" || from[len(from)-1] == "runtime" {
			image = append(image, st)
		}
	}
	if len(image) < 3 {
		t.Fatalf("worker/Dockerfile: %d stages named runtime or built on it, want the runtime stage and one per family", len(image))
	}
	for _, line := range strings.Split(strings.Join(image, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "ENV "); ok {
			for _, kv := range strings.Fields(rest) {
				if k, _, ok := strings.Cut(kv, "="); ok {
					want[k] = true
				}
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no ENV in the Dockerfile's image stages")
	}
	img := awslocal.WorkerImage(awslocal.BinariesIn("/bin"), t.TempDir())
	for k := range want {
		if _, ok := img.Env[k]; !ok {
			t.Errorf("the Dockerfile sets %s; the local worker image does not", k)
		}
	}
	for k := range img.Env {
		if !want[k] {
			t.Errorf("the local worker image sets %s; the Dockerfile does not", k)
		}
	}
}
