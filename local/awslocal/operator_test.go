package awslocal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// status makes one request with a bearer token and answers its status and
// body.
func status(t testing.TB, s *awslocal.Stack, token, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.Endpoint()+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// launchScript launches a scripted worker through kitchn's effects route
// and answers its handle.
func launchScript(t testing.TB, s *awslocal.Stack, token, run, key, script string) string {
	t.Helper()
	brief, _ := json.Marshal(script)
	launch := `{"run":"` + run + `","request":{"house":"` + s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse] +
		`","backend":"galley","credential":"galley-token","task":"t-1","attempt":1,"key":"` + key +
		`","effect":{"executor":"worker","effect":{"type":"launch-worker","role":"station-cook",` +
		`"workspace":{"type":"isolated"},"brief":` + string(brief) + `,"branch":"op/` + key + `"}}}}`
	code, body := status(t, s, token, "POST", "/v1/effects", launch)
	var applied struct {
		Status  string
		Receipt protocol.Receipt
	}
	if err := json.Unmarshal([]byte(body), &applied); code != http.StatusOK || err != nil || applied.Status != "applied" ||
		len(applied.Receipt.Created) == 0 {
		t.Fatalf("launch: %d %s", code, body)
	}
	return applied.Receipt.Created[0].Handle
}

// TestOperatorAPIAWSLocal runs the operator scenario (shapetest.Operator)
// as the stack deploys it: the operator function behind the gateway's
// /operator/ routes, with the operator token from its own secret, the
// console told to long poll. A scripted worker's events (the worker API's
// posts and state changes, the effects function's launch, the
// reconciler's task start and stop) reach a follower by long poll in
// order, without gap or duplicate; a cursor resumed later replays exactly
// what it missed; a cursor older than the retained events gets one reset
// event (the log written as the functions write it); kitchn's token opens
// no operator route and the operator token no kitchn route; a console
// session's cookie is refused after its logout; and the galley commands
// work against the stack.
func TestOperatorAPIAWSLocal(t *testing.T) {
	t.Parallel()
	shapetest.Operator(t, shapetest.Operated{
		Live:    operator.LivePoll,
		Compute: shapetest.Compute{Running: "task-running", Stopped: "task-stopped", StopFields: []string{"stopCode"}, Code: "0"},
		Start: func(t *testing.T) shapetest.OperatorHouse {
			s, token := startStack(t)
			return newStackHouse(t, s, token, "run-op").withEvents(t)
		},
	})
}

// functionStore is the stack's table as fn's role reaches it.
func functionStore(t *testing.T, s *awslocal.Stack, fn lambdaapp.Function) *dynamostore.Store {
	t.Helper()
	c := s.FunctionCredentials(fn)
	db := dynamodb.New(dynamodb.Options{Region: s.Region(), HTTPClient: caClient(t, s),
		Credentials:      credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		BaseEndpoint:     aws.String(s.GateURL(iamgate.DynamoDB)),
		RetryMaxAttempts: 5, DisableValidateResponseChecksum: true})
	return dynamostore.New(db, s.FunctionEnv(fn)[contract.EnvTable])
}

// BenchmarkEventFollowAWSLocal is the time from a worker's post to its
// event reaching a follower's long poll through the operator function:
// each iteration launches followWorkers scripted workers at once, and one
// follower per worker from cursor 0 measures, for each status event, its
// arrival less the event's time (stamped by the worker API function once
// the post committed; one clock on this machine). The long poll is woken
// by the event topic's SQS ring (fauxqs behind the IAM gate). "busy":
// each worker posts 15 statuses 200 ms apart (within a worker's post
// budget, a burst of 20), so a ring is still in its queue when the next
// comes (sqsbell keeps rings KeepRings, 5 s, and a listener seeing only
// rings it woke on looks again every Recheck, 250 ms); "quiet": 4
// statuses 6 s apart, each ring into a queue with none left.
func BenchmarkEventFollowAWSLocal(b *testing.B) {
	s, token := stack(b)
	client := operator.NewClient(s.Endpoint(), operatorToken(b, s))
	for _, bc := range []struct {
		name  string
		posts int
		gap   string
	}{{"busy", 15, "200ms"}, {"quiet", 4, "6s"}} {
		b.Run(bc.name, func(b *testing.B) {
			var script strings.Builder
			script.WriteString("#!galley-script\n")
			for i := range bc.posts {
				fmt.Fprintf(&script, "status post-%d\nsleep %s\n", i, bc.gap)
			}
			script.WriteString("done succeeded ok")
			var (
				mu  sync.Mutex
				lat []float64
			)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			b.ResetTimer()
			for i := range b.N {
				var wg sync.WaitGroup
				errs := make(chan error, followWorkers)
				for w := range followWorkers {
					handle := launchScript(b, s, token, "run-follow", fmt.Sprintf("k-follow-%s-%d-%d", suffix(), i, w), script.String())
					wg.Add(1)
					go func() {
						defer wg.Done()
						seen := 0
						errs <- client.Follow(ctx, handle, 0, func(e store.Event) bool {
							if e.Kind == eventlog.KindMailbox && e.Fields["kind"] == protocol.MsgStatus {
								d := ms(time.Since(e.At))
								mu.Lock()
								lat = append(lat, d)
								mu.Unlock()
								seen++
							}
							return seen < bc.posts
						})
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			if len(lat) != b.N*followWorkers*bc.posts {
				b.Fatalf("%d status events followed, want %d", len(lat), b.N*followWorkers*bc.posts)
			}
			report(b, lat)
		})
	}
}

// followWorkers are the workers each iteration of
// BenchmarkEventFollowAWSLocal follows at once.
const followWorkers = 3
