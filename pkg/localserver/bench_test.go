package localserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/sqsbell"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// The benchmarks run the real local server (bolt store with fsync, git
// repository, local-process runtime, loopback TCP). Workers are
// /bin/true: launch latency then includes a real process start but no
// agent. Each reports p50 and p99 per call beside ns/op.

type bench struct {
	srv    *localserver.Server
	token  string
	client *http.Client
}

// backend names the store and doorbell a benchmark runs on.
type backend string

const (
	embedded  backend = "bolt"         // bbolt and the in-process doorbell
	awsStores backend = "dynamodb-sqs" // DynamoDB Local and fauxqs
)

// backends are those this run can measure: the AWS stand-ins only when
// their endpoints are set (make bench starts them).
func backends() []backend {
	if os.Getenv("AWS_ENDPOINT_URL_DYNAMODB") != "" && os.Getenv("AWS_ENDPOINT_URL_SQS") != "" {
		return []backend{embedded, awsStores}
	}
	return []backend{embedded}
}

func newBench(b *testing.B, be ...backend) *bench {
	return newBenchWith(b, localserver.Options{}, "true", be...)
}

// idleWorker writes a worker "harness" that stays up until the benchmark
// process ends, so its worker stays unsettled (a harness that ends
// settles its worker, and a settled worker posts nothing).
func idleWorker(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "idle-worker")
	script := fmt.Sprintf("#!/bin/sh\nwhile kill -0 %d 2>/dev/null; do sleep 1; done\n", os.Getpid())
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		b.Fatal(err)
	}
	return p
}

func newBenchWith(b *testing.B, opts localserver.Options, worker string, be ...backend) *bench {
	b.Helper()
	data := b.TempDir()
	if len(be) > 0 && be[0] == awsStores {
		ctx := context.Background()
		suffix := fmt.Sprintf("bench-%d-%d", os.Getpid(), runID.Add(1))
		st, err := dynamostore.Open(ctx, "galley-"+suffix)
		if err != nil {
			b.Fatal(err)
		}
		bell, err := sqsbell.Open(ctx, "galley-"+suffix)
		if err != nil {
			b.Fatal(err)
		}
		opts.Store, opts.Doorbell = st, bell
	}
	workerBin := worker
	if worker == "true" {
		p, err := execPath("true")
		if err != nil {
			b.Skip("no true binary")
		}
		workerBin = p
	}
	opts.Listen, opts.House, opts.Data, opts.WorkerBin = "127.0.0.1:0", "bench", data, workerBin
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := localserver.Start(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	tok, err := os.ReadFile(filepath.Join(data, "private", "token"))
	if err != nil {
		b.Fatal(err)
	}
	return &bench{srv: srv, token: strings.TrimSpace(string(tok)),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

func execPath(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

func (bn *bench) call(b *testing.B, method, path, body string) []byte {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, bn.srv.Endpoint+path, rd)
	req.Header.Set("Authorization", "Bearer "+bn.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := bn.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, out)
	}
	return out
}

// runID makes keys unique across -count runs, which reuse one server:
// a repeated key would measure the replay of a stored receipt instead.
var runID atomic.Int64

func envelope(key, effect string) string {
	return fmt.Sprintf(`{"run":"run-b","request":{"house":"bench","backend":"galley","credential":"galley-token","task":"t","attempt":1,"key":%q,"effect":{"executor":"worker","effect":%s}}}`, key, effect)
}

const launchEffect = `{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"idle"}`

// latencies records per-call durations and reports percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	b.ReportMetric(float64(l[len(l)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(l[len(l)*99/100].Microseconds())/1000, "p99-ms")
}

func timed(b *testing.B, f func(i int)) {
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		f(i)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	lat.report(b)
}

func BenchmarkRoute(b *testing.B) {
	for _, be := range backends() {
		// Workers stay up: a harness that ends settles its worker, which
		// then posts nothing.
		b.Run(string(be), func(b *testing.B) { benchRoutes(b, newBenchWith(b, localserver.Options{}, idleWorker(b), be)) })
	}
}

func benchRoutes(b *testing.B, bn *bench) {
	out := bn.call(b, "POST", "/v1/effects", envelope("k-seed", launchEffect))
	var ans struct {
		Receipt struct{ Created []struct{ Handle string } }
	}
	_ = json.Unmarshal(out, &ans)
	worker := ans.Receipt.Created[0].Handle
	observe := fmt.Sprintf(`{"worker":{"kind":"worker","backend":"galley","handle":%q}}`, worker)

	b.Run("descriptor", func(b *testing.B) { timed(b, func(int) { bn.call(b, "GET", "/v1/descriptor", "") }) })
	b.Run("observe", func(b *testing.B) { timed(b, func(int) { bn.call(b, "POST", "/v1/workers/observe", observe) }) })
	b.Run("inventory", func(b *testing.B) { timed(b, func(int) { bn.call(b, "GET", "/v1/inventory", "") }) })
	b.Run("lookup-applied", func(b *testing.B) {
		timed(b, func(int) { bn.call(b, "POST", "/v1/effects/lookup", envelope("k-seed", launchEffect)) })
	})
	b.Run("lookup-absent", func(b *testing.B) {
		timed(b, func(i int) {
			bn.call(b, "POST", "/v1/effects/lookup", envelope(fmt.Sprintf("k-absent-%d", i), launchEffect))
		})
	})
	b.Run("next-empty", func(b *testing.B) {
		timed(b, func(int) { bn.call(b, "POST", "/v1/deliveries/next", `{"run":"run-empty","coordinator":"c1"}`) })
	})
	b.Run("next-acknowledge", func(b *testing.B) {
		ctx := context.Background()
		posters := bn.launchWorkers(b, (b.N+postsPerWorker-1)/postsPerWorker)
		for i := 0; i < b.N; i++ {
			if _, err := bn.srv.Service.WorkerPost(ctx, posters[i/postsPerWorker], workerapi.PostRequest{Kind: "status", Body: "x"}); err != nil {
				b.Fatal(err)
			}
		}
		timed(b, func(int) {
			out := bn.call(b, "POST", "/v1/deliveries/next", `{"run":"run-b","coordinator":"c1"}`)
			var d struct{ Delivery struct{ ID string } }
			_ = json.Unmarshal(out, &d)
			if d.Delivery.ID != "" {
				bn.call(b, "POST", "/v1/deliveries/acknowledge", `{"run":"run-b","coordinator":"c1","delivery":"`+d.Delivery.ID+`"}`)
			}
		})
	})
	b.Run("message", func(b *testing.B) {
		run := runID.Add(1)
		timed(b, func(i int) {
			bn.call(b, "POST", "/v1/effects", envelope(fmt.Sprintf("k-msg-%d-%d", run, i),
				`{"type":"message-worker","worker":{"kind":"worker","backend":"galley","handle":"`+worker+`"},"body":"hi"}`))
		})
	})
	b.Run("launch", func(b *testing.B) {
		run := runID.Add(1)
		timed(b, func(i int) {
			bn.call(b, "POST", "/v1/effects", envelope(fmt.Sprintf("k-launch-%d-%d", run, i), launchEffect))
		})
	})
	b.Run("launch-replay", func(b *testing.B) {
		timed(b, func(int) { bn.call(b, "POST", "/v1/effects", envelope("k-seed", launchEffect)) })
	})
}

// BenchmarkReadThroughput drives the four read routes with 8 and with 16
// concurrent clients, against galley and, in the same run, against a bare
// net/http handler doing the same JSON work (decode the body, encode an
// answer of the same size). ratio-vs-bare is galley's throughput over the
// baseline's.
func BenchmarkReadThroughput(b *testing.B) {
	for _, clients := range []int{8, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchReadThroughput(b, clients) })
	}
}

func benchReadThroughput(b *testing.B, clients int) {
	bn := newBench(b)
	out := bn.call(b, "POST", "/v1/effects", envelope("k-seed", launchEffect))
	var ans struct {
		Receipt struct{ Created []struct{ Handle string } }
	}
	_ = json.Unmarshal(out, &ans)
	observe := fmt.Sprintf(`{"worker":{"kind":"worker","backend":"galley","handle":%q}}`, ans.Receipt.Created[0].Handle)
	desc := bn.call(b, "GET", "/v1/descriptor", "")
	bare := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v map[string]any
		if r.Method == "POST" {
			_ = json.NewDecoder(r.Body).Decode(&v)
		}
		var d map[string]any
		_ = json.Unmarshal(desc, &d)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	}))
	defer bare.Close()
	calls := []struct{ method, path, body string }{
		{"GET", "/v1/descriptor", ""}, {"POST", "/v1/workers/observe", observe},
		{"GET", "/v1/inventory", ""}, {"POST", "/v1/deliveries/next", `{"run":"run-empty","coordinator":"c1"}`},
	}
	// drive sends n calls from the clients to base and returns the rate
	// and the latencies.
	drive := func(b *testing.B, base string, n int) (float64, latencies) {
		var lat latencies
		var mu sync.Mutex
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				local := latencies{}
				for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
					c := calls[i%len(calls)]
					var rd io.Reader
					if c.body != "" {
						rd = bytes.NewReader([]byte(c.body))
					}
					req, _ := http.NewRequest(c.method, base+c.path, rd)
					req.Header.Set("Authorization", "Bearer "+bn.token)
					t0 := time.Now()
					resp, err := bn.client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds(), lat
	}
	// Each iteration of this benchmark measures the baseline and galley
	// back to back, so every ratio pairs galley with the baseline of its
	// own moment on a shared machine.
	b.ResetTimer()
	bareRPS, _ := drive(b, bare.URL, b.N)
	galleyRPS, lat := drive(b, bn.srv.Endpoint, b.N)
	b.StopTimer()
	b.ReportMetric(bareRPS, "bare-req/s")
	b.ReportMetric(galleyRPS, "req/s")
	b.ReportMetric(galleyRPS/bareRPS, "ratio-vs-bare")
	lat.report(b)
}

// BenchmarkAwaitWake measures the time from a worker posting a question to
// a waiting deliveries/await returning it, over loopback HTTP.
func BenchmarkAwaitWake(b *testing.B) {
	for _, be := range backends() {
		b.Run(string(be), func(b *testing.B) { benchAwaitWake(b, newBenchWith(b, localserver.Options{}, idleWorker(b), be)) })
	}
}

func benchAwaitWake(b *testing.B, bn *bench) {
	// A worker's post budget allows a burst of 20: each worker posts 15.
	workers := bn.launchWorkers(b, (b.N+postsPerWorker-1)/postsPerWorker)
	ctx := context.Background()
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		type res struct {
			body []byte
			at   time.Time
		}
		done := make(chan res, 1)
		go func() {
			body := bn.call(b, "POST", "/v1/deliveries/await", `{"run":"run-b","coordinator":"c1","waitMs":10000}`)
			done <- res{body, time.Now()}
		}()
		time.Sleep(5 * time.Millisecond) // let the await start waiting
		posted := time.Now()
		if _, err := bn.srv.Service.WorkerPost(ctx, workers[i/postsPerWorker], workerapi.PostRequest{Kind: "question", Body: "q?"}); err != nil {
			b.Fatal(err)
		}
		r := <-done
		lat = append(lat, r.at.Sub(posted))
		var d struct{ Delivery struct{ ID string } }
		_ = json.Unmarshal(r.body, &d)
		if d.Delivery.ID == "" {
			b.Fatalf("await returned no delivery: %s", r.body)
		}
		bn.call(b, "POST", "/v1/deliveries/acknowledge", `{"run":"run-b","coordinator":"c1","delivery":"`+d.Delivery.ID+`"}`)
	}
	b.StopTimer()
	lat.report(b)
}

// launchWorkers launches n workers (untimed) and answers their handles.
func (bn *bench) launchWorkers(b *testing.B, n int) []string {
	var hs []string
	for range n {
		out := bn.call(b, "POST", "/v1/effects", envelope(fmt.Sprintf("k-w-%d", runID.Add(1)), launchEffect))
		var ans struct {
			Receipt struct {
				Created []struct{ Kind, Handle string }
			}
		}
		_ = json.Unmarshal(out, &ans)
		for _, c := range ans.Receipt.Created {
			if c.Kind == "worker" {
				hs = append(hs, c.Handle)
			}
		}
	}
	return hs
}

// postsPerWorker stays within a worker's post budget and its unread
// status rows (service.DefaultPostBudget, store.MaxPendingNoise).
const postsPerWorker = 15

// BenchmarkWorkerPost measures the worker's post path (a status row) with
// the event log and without it: what appending events costs the worker.
func BenchmarkWorkerPost(b *testing.B) {
	for _, c := range []struct {
		name string
		off  bool
	}{{"events", false}, {"no-events", true}} {
		b.Run(c.name, func(b *testing.B) {
			bn := newBenchWith(b, localserver.Options{NoEventLog: c.off}, idleWorker(b))
			hs := bn.launchWorkers(b, (b.N+postsPerWorker-1)/postsPerWorker)
			ctx := context.Background()
			timed(b, func(i int) {
				if _, err := bn.srv.Service.WorkerPost(ctx, hs[i/postsPerWorker], workerapi.PostRequest{Kind: "status", Body: "working on it"}); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkEventFollow measures the time from a worker's post to its
// event reaching a follower's long poll on the operator API (over
// loopback HTTP, woken by the event topic's doorbell).
func BenchmarkEventFollow(b *testing.B) {
	bn := newBenchWith(b, localserver.Options{}, idleWorker(b))
	hs := bn.launchWorkers(b, (b.N+postsPerWorker-1)/postsPerWorker)
	tok, err := os.ReadFile(bn.srv.OperatorTokenFile())
	if err != nil {
		b.Fatal(err)
	}
	oc := operator.NewClient(bn.srv.Endpoint, strings.TrimSpace(string(tok)))
	ctx := context.Background()
	cursors := map[string]int64{}
	for _, h := range hs {
		// Start after what the launch recorded.
		for {
			a, err := oc.Events(ctx, h, cursors[h], time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if len(a.Events) == 0 {
				break
			}
			cursors[h] = a.Next
		}
	}
	lat := make(latencies, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		h := hs[i/postsPerWorker]
		type res struct {
			a   operator.EventsAnswer
			err error
			at  time.Time
		}
		done := make(chan res, 1)
		go func() {
			a, err := oc.Events(ctx, h, cursors[h], 10*time.Second)
			done <- res{a, err, time.Now()}
		}()
		time.Sleep(5 * time.Millisecond) // let the poll start waiting
		posted := time.Now()
		if _, err := bn.srv.Service.WorkerPost(ctx, h, workerapi.PostRequest{Kind: "status", Body: "follow me"}); err != nil {
			b.Fatal(err)
		}
		r := <-done
		if r.err != nil || len(r.a.Events) == 0 || r.a.Events[0].Fields["kind"] != "status" {
			b.Fatalf("the follower got %+v, %v", r.a, r.err)
		}
		lat = append(lat, r.at.Sub(posted))
		cursors[h] = r.a.Next
	}
	b.StopTimer()
	lat.report(b)
}
