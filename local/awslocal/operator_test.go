package awslocal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// status makes one request with a bearer token (none when empty), as
// kitchn's client does, and answers its status and body.
func status(t testing.TB, s *awslocal.Stack, token, method, path, body string) (int, string) {
	t.Helper()
	var b []byte
	if body != "" || method != http.MethodGet {
		b = []byte(body)
	}
	a, err := client.New(s.Endpoint(), token, client.WithTimeout(0)).Call(context.Background(), contract.Route{Method: method, Path: path}, b, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	return a.Status, string(a.Body)
}

// launchScript launches a scripted worker through kitchn's effects route
// and answers its handle.
func launchScript(t testing.TB, s *awslocal.Stack, token, run, key, script string) string {
	t.Helper()
	brief, _ := json.Marshal(script)
	launch := `{"run":"` + run + `","request":{"house":"` + s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvHouse] +
		`","backend":"galley","credential":"galley-token","task":"t-1","attempt":1,"key":"` + key +
		`","effect":{"executor":"worker","effect":{"type":"launch-worker","role":"station-cook",` +
		`"workspace":{"type":"isolated"},"brief":` + string(brief) + `,"branch":"op/` + key + `"}}}}`
	code, body := status(t, s, token, contract.RouteEffects.Method, contract.PathEffects, launch)
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

// TestOperatorAPIAWSLocal is the operator API as the stack deploys it:
// the operator function behind the gateway's /operator/ routes, with the
// operator token from its own secret. A scripted worker's events (the
// worker API's posts and state changes, the effects function's launch,
// the reconciler's task start and stop) reach a follower by long poll in
// order, without gap or duplicate; a cursor resumed later replays exactly
// what it missed; a cursor older than the retained events gets one reset
// event; kitchn's token opens no operator route and the operator token no
// kitchn route; a console session's cookie is refused after its logout;
// the console is served and says to long poll; and the galley commands
// work against the stack.
func TestOperatorAPIAWSLocal(t *testing.T) {
	s, token := startStack(t)
	opToken := operatorToken(t, s)
	if opToken == token {
		t.Fatal("the operator token is kitchn's token")
	}

	// Each token opens its own routes only.
	for _, c := range []struct {
		token, method, path, body string
		want                      int
	}{
		{token, "GET", operator.PathWorkers, "", http.StatusUnauthorized},
		{token, "GET", operator.PathSession, "", http.StatusUnauthorized},
		{token, "POST", operator.PathWorkers + "/w-x/cancel", "", http.StatusUnauthorized},
		{"", "GET", operator.PathWorkers, "", http.StatusUnauthorized},
		{opToken, "GET", operator.PathWorkers, "", http.StatusOK},
		{opToken, contract.RouteNext.Method, contract.PathNext, `{"run":"r","coordinator":"c-1"}`, http.StatusUnauthorized},
		{opToken, contract.RouteInventory.Method, contract.PathInventory, "", http.StatusUnauthorized},
		{opToken, contract.RouteLookup.Method, contract.PathLookup, `{}`, http.StatusUnauthorized},
		{token, contract.RouteDescriptor.Method, contract.PathDescriptor, "", http.StatusOK},
	} {
		if got, body := status(t, s, c.token, c.method, c.path, c.body); got != c.want {
			who := "kitchn's token"
			if c.token == opToken {
				who = "the operator token"
			} else if c.token == "" {
				who = "no token"
			}
			t.Errorf("%s %s with %s: %d %s, want %d", c.method, c.path, who, got, body, c.want)
		}
	}
	// The console's session through the gateway and the function: the
	// login's cookie opens the API until its logout, and after it the old
	// cookie, replayed, is refused (the session is gone from the table,
	// whichever instance answers).
	cookie := consoleLogin(t, s, opToken)
	if code, body := cookieCall(t, s, "GET", operator.PathWorkers, cookie); code != http.StatusOK {
		t.Fatalf("a read with the session cookie: %d %s", code, body)
	}
	if code, body := cookieCall(t, s, "POST", operator.PathLogout, cookie, operator.CSRFHeader, "1"); code != http.StatusOK {
		t.Fatalf("logout: %d %s", code, body)
	}
	if code, _ := cookieCall(t, s, "GET", operator.PathWorkers, cookie); code != http.StatusUnauthorized {
		t.Errorf("after logout the old session cookie opened the API: %d, want 401", code)
	}

	// The console, served by the stack: /operator redirects to it, and
	// its session says to follow by long poll (no stream through Lambda).
	if code, _ := status(t, s, "", "GET", "/operator", ""); code != http.StatusFound {
		t.Errorf("GET /operator: %d, want a redirect to the console", code)
	}
	if code, body := status(t, s, "", "GET", operator.PathConsole, ""); code != http.StatusOK || !strings.Contains(body, "app.js") {
		t.Errorf("GET %s: %d %.200s", operator.PathConsole, code, body)
	}
	if code, body := status(t, s, "", "GET", "/operator/app.js", ""); code != http.StatusOK || !strings.Contains(body, "events?after=") {
		t.Errorf("GET /operator/app.js: %d", code)
	}
	var sess operator.SessionAnswer
	if code, body := status(t, s, opToken, "GET", operator.PathSession, ""); code != http.StatusOK ||
		json.Unmarshal([]byte(body), &sess) != nil || sess.Live != operator.LivePoll {
		t.Errorf("session: %d %s, want live %q", code, body, operator.LivePoll)
	}
	if code, _ := status(t, s, opToken, "GET", operator.PathWorkers+"/w-x/stream", ""); code != http.StatusNotFound {
		t.Errorf("stream: %d, want 404 (long poll only)", code)
	}

	handle := launchScript(t, s, token, "run-op", "k-op-1",
		"#!galley-script\nstatus one\nsleep 300ms\nstatus two\nsleep 300ms\nstatus three\ndone succeeded ok")
	client := operator.NewClient(s.Endpoint(), opToken)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A follower from the start, until the worker's task has stopped.
	var all []store.Event
	stopped := func(e store.Event) bool {
		return e.Kind == eventlog.KindCompute && e.Fields["event"] == "task-stopped"
	}
	// A second follower takes the first three events, then goes away.
	var early []store.Event
	var cursor int64
	for len(early) < 3 {
		a, err := client.Events(ctx, handle, cursor, operator.MaxWait)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range a.Events {
			if len(early) < 3 {
				early = append(early, e)
				cursor = e.Seq
			}
		}
	}
	if err := client.Follow(ctx, handle, 0, func(e store.Event) bool {
		all = append(all, e)
		return !stopped(e)
	}); err != nil {
		t.Fatalf("follow: %v (events so far %v)", err, kinds(all))
	}
	if len(all) == 0 || !stopped(all[len(all)-1]) {
		t.Fatalf("the follow ended before the task stopped: %v", kinds(all))
	}
	for i, e := range all {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap or a duplicate in %v", i, e.Seq, seqs(all))
		}
	}
	// What each function records is there: the launch (effects), the
	// posts and the state changes (worker API), the task's start and
	// stop with its stop code (reconciler).
	var statuses []string
	var running, settled bool
	for _, e := range all {
		switch {
		case e.Kind == eventlog.KindMailbox && e.Fields["kind"] == protocol.MsgStatus:
			statuses = append(statuses, e.Text)
		case e.Kind == eventlog.KindCompute && e.Fields["event"] == "task-running":
			running = true
		case e.Kind == eventlog.KindState && e.Fields["state"] == protocol.StateSettled:
			settled = true
		}
	}
	if strings.Join(statuses, ",") != "one,two,three" {
		t.Errorf("status posts %v, want one, two, three in order", statuses)
	}
	last := all[len(all)-1]
	if !running || !settled || last.Fields["stopCode"] == "" || last.Fields["code"] != "0" {
		t.Errorf("running %v settled %v stop %+v; events %v", running, settled, last, kinds(all))
	}
	// The resumed cursor replays exactly what it missed: with what it
	// read before, the whole log as a reader from 0 reads it now (which
	// the follow read a prefix of).
	readAll := func(after int64) []store.Event {
		var out []store.Event
		for {
			a, err := client.Events(ctx, handle, after, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Events) == 0 {
				return out
			}
			out = append(out, a.Events...)
			after = a.Next
		}
	}
	resumed := append(append([]store.Event(nil), early...), readAll(cursor)...)
	full := readAll(0)
	if !sameEvents(resumed, full) || len(full) < len(all) || !sameEvents(full[:len(all)], all) {
		t.Errorf("resumed\n %v\nfull\n %v\nfollowed\n %v", seqs(resumed), seqs(full), seqs(all))
	}
	cursor = full[len(full)-1].Seq
	// A long poll at the end holds, then answers nothing and the same
	// cursor.
	a, err := client.Events(ctx, handle, cursor, time.Second)
	if err != nil || len(a.Events) != 0 || a.Next != cursor {
		t.Errorf("poll past the end: %+v %v", a, err)
	}

	// A stale cursor: a log past its bound (written as the functions
	// write it) answers one reset event, then the retained events.
	stale := "w-stale-" + suffix()
	st := functionStore(t, s, lambdaapp.WorkerAPI)
	for i := range store.MaxEvents + 3 {
		if _, err := st.AppendEvent(ctx, stale, store.Event{At: time.Now(), Kind: eventlog.KindHarness, Text: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	a, err = client.Events(ctx, stale, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Events) < 2 || a.Events[0].Kind != eventlog.KindReset || a.Events[0].Seq != 3 || a.Events[1].Seq != 4 ||
		a.Events[0].Fields["from"] != "1" || a.Events[0].Fields["to"] != "3" {
		t.Fatalf("stale cursor: %v", seqs(a.Events))
	}
	for _, e := range a.Events[1:] {
		if e.Kind == eventlog.KindReset {
			t.Fatalf("a second reset at %d", e.Seq)
		}
	}

	// The galley commands against the stack, with the operator token's
	// file; kitchn's token file is refused.
	galley := filepath.Join(filepath.Dir(binaries(t).Harness), "galley")
	out, err := exec.Command(galley, "workers", "--endpoint", s.Endpoint(), "--token-file", s.OperatorTokenFile(), "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"handle":"`+handle+`"`) {
		t.Errorf("galley workers: %v\n%s", err, out)
	}
	out, err = exec.Command(galley, "events", handle, "--endpoint", s.Endpoint(), "--token-file", s.OperatorTokenFile(), "--json").CombinedOutput()
	if err != nil || strings.Count(string(out), "\n") < len(all) || !strings.Contains(string(out), `"text":"three"`) {
		t.Errorf("galley events: %v, %d lines for %d events\n%s", err, strings.Count(string(out), "\n"), len(all), out)
	}
	if out, err := exec.Command(galley, "workers", "--endpoint", s.Endpoint(), "--token-file", s.TokenFile()).CombinedOutput(); err == nil {
		t.Errorf("galley workers with kitchn's token file succeeded:\n%s", out)
	}
}

// consoleLogin logs in with the operator token as the console does and
// answers the session cookie as a Cookie header's value.
func consoleLogin(t testing.TB, s *awslocal.Stack, opToken string) string {
	t.Helper()
	req, _ := http.NewRequest("POST", s.Endpoint()+operator.PathLogin, strings.NewReader(`{"token":"`+opToken+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(operator.CSRFHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, c := range resp.Cookies() {
		if c.Name == "galley_operator" && resp.StatusCode == http.StatusOK {
			return c.Name + "=" + c.Value
		}
	}
	t.Fatalf("login: %d %s, no session cookie", resp.StatusCode, b)
	return ""
}

// cookieCall makes one request with the session cookie and the headers
// given, and answers its status and body.
func cookieCall(t testing.TB, s *awslocal.Stack, method, path, cookie string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, s.Endpoint()+path, nil)
	req.Header.Set("Cookie", cookie)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// functionStore is the stack's table as fn's role reaches it.
func functionStore(t *testing.T, s *awslocal.Stack, fn lambdaapp.Function) *dynamostore.Store {
	t.Helper()
	c := s.FunctionCredentials(fn)
	db := dynamodb.New(dynamodb.Options{Region: s.Region(), HTTPClient: caClient(t, s),
		Credentials:      credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken),
		BaseEndpoint:     aws.String(s.GateURL(iamgate.DynamoDB)),
		RetryMaxAttempts: 5, DisableValidateResponseChecksum: true})
	return dynamostore.New(db, s.FunctionEnv(fn)[lambdaapp.EnvTable])
}

func seqs(es []store.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%d:%s", e.Seq, e.Kind)
	}
	return out
}

func kinds(es []store.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprintf("%d:%s/%s/%s", e.Seq, e.Kind, e.Fields["kind"]+e.Fields["event"]+e.Fields["state"], e.Text)
	}
	return out
}

func sameEvents(a, b []store.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, _ := json.Marshal(a[i])
		y, _ := json.Marshal(b[i])
		if string(x) != string(y) {
			return false
		}
	}
	return true
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
	s, token := startStack(b)
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
