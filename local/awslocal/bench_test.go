package awslocal_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// The benchmarks measure each function under the Lambda emulator through
// the local gateway (the reconciler is invoked directly, as EventBridge
// does), with DynamoDB Local and fauxqs behind: the cold start is the first
// request on a fresh instance (the function's process starting, its init
// building the AWS clients and the service, and the request), warm the
// requests after it. Each request touches the store once or twice.
//
//	scripts/standins.sh run -- go test -run '^$' -bench . -benchtime 20x ./local/awslocal/

type probe struct {
	method, path, body string
}

// descriptor is a request that touches nothing behind the function: the
// cost of the gateway and the emulator alone.
var descriptor = probe{contract.RouteDescriptor.Method, contract.PathDescriptor, ""}

var probes = map[lambdaapp.Function]probe{
	lambdaapp.Effects: {contract.RouteLookup.Method, contract.PathLookup, `{"run":"bench","request":{"house":"local","backend":"galley",` +
		`"credential":"galley-token","task":"t","attempt":1,"key":"KEY","effect":{"executor":"worker","effect":` +
		`{"type":"cancel-worker","worker":{"kind":"worker","backend":"galley","handle":"w-none"}}}}}`},
	lambdaapp.Reads:     {contract.RouteObserve.Method, contract.PathObserve, `{"worker":{"kind":"worker","backend":"galley","handle":"w-KEY"}}`},
	lambdaapp.Mailbox:   {contract.RouteNext.Method, contract.PathNext, `{"run":"bench-KEY","coordinator":"c-1"}`},
	lambdaapp.WorkerAPI: {"POST", contract.PathWorkerCredential, `{"handle":"w-KEY","code":"gb1.AAAA","claim":"bench"}`},
	lambdaapp.Reconciler: {body: `{"version":"0","id":"KEY","detail-type":"ECS Task State Change","source":"aws.ecs",` +
		`"region":"us-east-1","time":"2026-01-01T00:00:00Z","detail":{"taskArn":"arn:aws:ecs:us-east-1:000000000000:task/galley/KEY",` +
		`"startedBy":"galley/w-KEY","lastStatus":"STOPPED","desiredStatus":"STOPPED","version":3}}`},
	// One worker's events (none here), with the operator token.
	lambdaapp.Operator: {"GET", "/operator/v1/workers/w-KEY/events", ""},
}

// stack is the package's shared stack: the benchmarks start instances and
// workers of their own, one benchmark at a time, so one deployment serves
// them all (TestMain ends it).
func stack(b *testing.B) (*awslocal.Stack, string) { return sharedStack(b) }

// instance starts a fresh instance of fn and returns a function making one
// probe request to it, through a gateway when fn serves routes.
func instance(b *testing.B, s *awslocal.Stack, token string, fn lambdaapp.Function, pr probe, out io.Writer) (func(), func()) {
	p, err := s.NewInstance(context.Background(), fn, out)
	if err != nil {
		b.Fatal(err)
	}
	if fn == lambdaapp.Operator {
		token = operatorToken(b, s)
	}
	n := 0
	body := func() string {
		n++
		return strings.ReplaceAll(pr.body, "KEY", "k"+suffix()+strconv.Itoa(n))
	}
	if fn == lambdaapp.Reconciler {
		return func() {
			if _, err := p.Invoke(context.Background(), []byte(body())); err != nil {
				b.Fatal(err)
			}
		}, func() { p.Close() }
	}
	g, err := gateway.New([]gateway.Route{{Method: pr.method, Path: pr.path, Function: "fn"}},
		map[string]gateway.Invoker{"fn": p})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(g)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return func() {
			req, _ := http.NewRequest(pr.method, srv.URL+pr.path, strings.NewReader(body()))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				b.Fatalf("%s: %d", fn, resp.StatusCode)
			}
		}, func() {
			srv.Close()
			p.Close()
		}
}

var initRE = regexp.MustCompile(`INIT REPORT\(durationMs: ([0-9.]+)\)`)

// BenchmarkColdStart is the first request on a fresh instance; init-ms is
// the emulator's own measure of the function's init (its process start to
// its first poll for work).
func BenchmarkColdStart(b *testing.B) {
	s, token := stack(b)
	for _, fn := range lambdaapp.Functions {
		b.Run(string(fn), func(b *testing.B) {
			var lat, inits []float64
			for range b.N {
				b.StopTimer()
				var out bytes.Buffer
				do, stop := instance(b, s, token, fn, probes[fn], &syncWriter{w: &out})
				b.StartTimer()
				start := time.Now()
				do()
				lat = append(lat, ms(time.Since(start)))
				b.StopTimer()
				stop()
				if m := initRE.FindStringSubmatch(out.String()); m != nil {
					v, _ := strconv.ParseFloat(m[1], 64)
					inits = append(inits, v)
				}
				b.StartTimer()
			}
			report(b, lat)
			if len(inits) > 0 {
				b.ReportMetric(pct(inits, 50), "init-ms")
			}
		})
	}
}

// BenchmarkWarm is each request after the first on one instance;
// reads-descriptor touches no store, so it is the hop alone.
func BenchmarkWarm(b *testing.B) {
	s, token := stack(b)
	type bench struct {
		name string
		fn   lambdaapp.Function
		pr   probe
	}
	var all []bench
	for _, fn := range lambdaapp.Functions {
		all = append(all, bench{string(fn), fn, probes[fn]})
	}
	all = append(all, bench{"reads-descriptor", lambdaapp.Reads, descriptor})
	for _, bn := range all {
		b.Run(bn.name, func(b *testing.B) {
			do, stop := instance(b, s, token, bn.fn, bn.pr, io.Discard)
			defer stop()
			do()
			lat := make([]float64, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				do()
				lat = append(lat, ms(time.Since(start)))
			}
			report(b, lat)
		})
	}
}

func report(b *testing.B, lat []float64) {
	b.ReportMetric(pct(lat, 50), "p50-ms")
	b.ReportMetric(pct(lat, 99), "p99-ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func pct(xs []float64, p int) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// operatorToken reads the stack's operator token (its file, written from
// the generated secret).
func operatorToken(t testing.TB, s *awslocal.Stack) string {
	t.Helper()
	b, err := os.ReadFile(s.OperatorTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		t.Fatal("the operator token file is empty")
	}
	return tok
}
