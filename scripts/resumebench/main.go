// Command resumebench times a worker's launch and its resume from parking
// (docs/parking.md) through the HTTP worker protocol, as kitchn sees them:
// launch sent → the worker observed past `starting` (its agent's first
// evidence made it ready), and reply sent to a parked worker → the
// scripted agent's status row "reply: …" in the coordinator's mailbox
// (the resumed agent has the reply). It reports p50 and p95 over
// --workers workers, launched one after the other.
//
//	make build
//	go run ./scripts/resumebench --serve local --park-after 2s --workers 20
//	go run ./scripts/resumebench --serve local --park-after 0 --workers 20    # the same reply to a worker that waits, not parked
//	make build-aws-local synth-local
//	GALLEY_WORKER_IMAGE=$(scripts/worker-image.sh --print-ref) scripts/standins.sh run -- \
//	  go run ./scripts/resumebench --serve aws-local --park-after 0 --workers 10
//	go run ./scripts/resumebench --endpoint http://127.0.0.1:8080 --token-file .galley/private/token \
//	  --operator-token-file .galley/private/operator-token --house local --backend galley
//
// With --serve it starts `galley serve` (local: bin/galley with
// --park-after and the scripted agent; aws-local: bin/galley-dev serve
// --stack aws-local from the template, the worker tasks containers of
// the image GALLEY_WORKER_IMAGE names) on a fresh data directory
// and stops it at the end; with --endpoint it drives a server already
// running. Each worker runs the script "ask, then done": it asks its
// coordinator, waits in the ask long enough to park (the server's park
// after), is replied to once the operator API lists it parked, and ends.
// Parking is seen through the operator API (GET /operator/v1/workers,
// with the operator token); without parking (park after 0, or a server
// that does not park), --wait-before-reply sets how long the worker
// waits in its ask before the reply, and the figure is the reply to a
// waiting worker. docs/BENCHMARKS.md ("Launch and resume") records what
// it measured.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	serve, bin, template, listen, data string
	endpoint, tokenFile, opTokenFile   string
	house, backend, credential         string
	parkAfter, waitBeforeReply         time.Duration
	workers                            int
	timeout                            time.Duration
	label                              string
	log                                io.Writer
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("resumebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{log: stderr}
	fs.StringVar(&c.serve, "serve", "", "start a server of this shape: local (bin/galley serve) or aws-local (bin/galley-dev serve --stack aws-local); empty: drive --endpoint")
	fs.StringVar(&c.bin, "bin", "bin", "the folder of galley, galley-worker and galley-dev (with --serve)")
	fs.StringVar(&c.template, "template", "cdk.out/galley-local.template.json", "aws-local's template (--serve aws-local; make synth-local)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:48090", "the address the started server listens on (--serve)")
	fs.StringVar(&c.data, "data", "", "the started server's data folder (default a new temporary one, removed at the end)")
	fs.DurationVar(&c.parkAfter, "park-after", 2*time.Second, "the started local server's --park-after (0: never park; --serve local)")
	fs.StringVar(&c.endpoint, "endpoint", "", "a running galley's endpoint (without --serve)")
	fs.StringVar(&c.tokenFile, "token-file", "", "its bearer token's file (without --serve)")
	fs.StringVar(&c.opTokenFile, "operator-token-file", "", "its operator token's file, to see a worker parked (without --serve; none: no parking is awaited)")
	fs.StringVar(&c.house, "house", "local", "the house it serves (without --serve)")
	fs.StringVar(&c.backend, "backend", "galley", "the backend namespace it serves (without --serve)")
	fs.StringVar(&c.credential, "credential", contract.DefaultCredential, "the credential name effects carry")
	fs.DurationVar(&c.waitBeforeReply, "wait-before-reply", 3*time.Second, "how long a worker that does not park waits in its ask before the reply")
	fs.IntVar(&c.workers, "workers", 10, "workers launched, one after the other")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "the longest wait for any one step of a worker")
	fs.StringVar(&c.label, "label", "", "what this run measures, printed with the figures")
	jsonOut := fs.String("json", "", "write every worker's times as JSON to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.workers < 1 || (c.serve == "") == (c.endpoint == "") || (c.endpoint != "" && c.tokenFile == "") {
		fmt.Fprintln(stderr, "resumebench: want --workers ≥ 1 and either --serve local|aws-local or --endpoint with --token-file")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := bench(ctx, c)
	if res != nil {
		report(stdout, c, res)
	}
	if err != nil {
		fmt.Fprintln(stderr, "resumebench:", err)
		return 1
	}
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fmt.Fprintln(stderr, "resumebench:", err)
			return 1
		}
	}
	return 0
}

// target is a galley to drive.
type target struct {
	endpoint, token, opToken, house, backend string
}

// result is one run's figures.
type result struct {
	Label   string   `json:"label"`
	Machine string   `json:"machine"`
	Shape   string   `json:"shape"`
	Samples []sample `json:"samples"`
}

// sample is one worker's times, in seconds.
type sample struct {
	Handle string  `json:"handle"`
	Ready  float64 `json:"ready"`  // launch sent → observed past starting
	Asked  float64 `json:"asked"`  // launch sent → its question in the mailbox
	Parked float64 `json:"parked"` // its question → the operator lists it parked (0: not awaited)
	Reply  float64 `json:"reply"`  // reply sent → "reply: …" in the mailbox
	Done   float64 `json:"done"`   // reply sent → its worker-done in the mailbox
}

func progress(c config, format string, a ...any) {
	fmt.Fprintf(c.log, "resumebench: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func bench(ctx context.Context, c config) (*result, error) {
	res := &result{Label: c.label, Machine: machine(), Shape: c.serve}
	var t target
	if c.serve != "" {
		srv, err := startServer(ctx, c)
		if err != nil {
			return nil, err
		}
		defer srv.stop()
		t = srv.target
	} else {
		res.Shape = c.endpoint
		t = target{endpoint: c.endpoint, house: c.house, backend: c.backend}
		tok, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, err
		}
		t.token = strings.TrimSpace(string(tok))
		if c.opTokenFile != "" {
			op, err := os.ReadFile(c.opTokenFile)
			if err != nil {
				return nil, err
			}
			t.opToken = strings.TrimSpace(string(op))
		}
	}
	d := &driver{c: c, t: t, kc: client.New(t.endpoint, t.token, client.WithBackend(t.backend), client.WithTimeout(time.Minute))}
	if t.opToken != "" && c.parkAfter > 0 {
		d.op = operator.NewClient(t.endpoint, t.opToken)
	}
	for i := range c.workers {
		s, err := d.one(ctx, i)
		if err != nil {
			return res, fmt.Errorf("worker %d: %w", i+1, err)
		}
		res.Samples = append(res.Samples, s)
		progress(c, "worker %d of %d: ready %.2fs, parked %.2fs after its question, reply in the agent %.2fs after the reply",
			i+1, c.workers, s.Ready, s.Parked, s.Reply)
	}
	return res, nil
}

// driver drives one worker at a time, as its coordinator.
type driver struct {
	c  config
	t  target
	kc *client.Client
	op *operator.Client // nil: parking is not awaited
}

const brief = "#!galley-script\nask Which API? :: v1 or v2?\ndone succeeded resumebench"

func (d *driver) effect(ctx context.Context, run, key string, e protocol.WorkerEffect) (protocol.Receipt, error) {
	raw, err := json.Marshal(e)
	if err != nil {
		return protocol.Receipt{}, err
	}
	call := protocol.EffectCall{Run: run, Request: protocol.EffectRequest{House: d.t.house, Backend: d.t.backend,
		Credential: d.c.credential, Task: "resumebench", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: raw}}}
	for attempt := 0; ; attempt++ {
		o, err := d.kc.Apply(ctx, call)
		switch {
		case err == nil && o.Status == protocol.StatusApplied:
			return *o.Receipt, nil
		case attempt < 20 && (err != nil || o.Reason == protocol.ReasonRateLimited):
			// The same key: an idempotent resend.
			select {
			case <-ctx.Done():
				return protocol.Receipt{}, ctx.Err()
			case <-time.After(time.Second):
			}
		case err != nil:
			return protocol.Receipt{}, err
		default:
			return protocol.Receipt{}, fmt.Errorf("%s: %s %s", e.Type, o.Status, o.Reason)
		}
	}
}

// one launches worker i and takes its times.
func (d *driver) one(ctx context.Context, i int) (sample, error) {
	var s sample
	run := fmt.Sprintf("resumebench-%d-%d", time.Now().UnixNano(), i)
	body := brief
	sent := time.Now()
	rc, err := d.effect(ctx, run, run+"-launch", protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "commis", Brief: &body,
		Workspace: &protocol.Workspace{Type: "isolated"}, Branch: ptr("resumebench/" + run)})
	if err != nil {
		return s, err
	}
	h := rc.CreatedHandle(protocol.KindWorker)
	if h == "" {
		return s, errors.New("the launch created no worker")
	}
	s.Handle = h
	w := protocol.Resource{Kind: protocol.KindWorker, Backend: d.t.backend, Handle: h}

	// Launch → ready: the first observation past starting.
	deadline := time.Now().Add(d.c.timeout)
	for {
		o, err := d.kc.Observe(ctx, w)
		if err != nil {
			return s, err
		}
		if o.State != protocol.StateStarting {
			if o.State == protocol.StateSettled {
				return s, fmt.Errorf("worker %s settled %s before it was ready", h, o.Outcome)
			}
			s.Ready = time.Since(sent).Seconds()
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("worker %s still starting after %s", h, d.c.timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return s, err
		}
	}
	mb := &mailbox{kc: d.kc, run: run}
	q, err := mb.next(ctx, d.c.timeout, func(m protocol.MailMessage) bool { return m.Kind == protocol.MsgQuestion })
	if err != nil {
		return s, fmt.Errorf("worker %s's question: %w", h, err)
	}
	asked := time.Now()
	s.Asked = asked.Sub(sent).Seconds()

	if d.op != nil {
		// Every 100 ms, and a throttled list (the operator API's limits:
		// aws-local's gateway answers a burst 429) is asked again later.
		for parked, pause := false, 100*time.Millisecond; !parked; {
			ws, err := d.op.Workers(ctx)
			var se *operator.StatusError
			switch {
			case errors.As(err, &se) && se.Status == http.StatusTooManyRequests:
				pause = min(2*pause, 2*time.Second)
			case err != nil:
				return s, err
			default:
				pause = 100 * time.Millisecond
			}
			for _, v := range ws {
				parked = parked || v.Handle == h && v.Parked
			}
			if time.Since(asked) > d.c.timeout {
				return s, fmt.Errorf("worker %s not parked %s after its question", h, d.c.timeout)
			}
			if !parked {
				if err := sleep(ctx, pause); err != nil {
					return s, err
				}
			}
		}
		s.Parked = time.Since(asked).Seconds()
	} else if err := sleep(ctx, d.c.waitBeforeReply); err != nil {
		return s, err
	}

	answer := "v2"
	replied := time.Now()
	if _, err := d.effect(ctx, run, run+"-reply", protocol.WorkerEffect{Type: protocol.OpReply, Worker: &w,
		Question: &q.ID, Body: &answer}); err != nil {
		return s, err
	}
	if _, err := mb.next(ctx, d.c.timeout, func(m protocol.MailMessage) bool {
		return m.Kind == protocol.MsgStatus && m.Body == "reply: "+answer
	}); err != nil {
		return s, fmt.Errorf("worker %s's reply in the agent: %w", h, err)
	}
	s.Reply = time.Since(replied).Seconds()
	done, err := mb.next(ctx, d.c.timeout, func(m protocol.MailMessage) bool { return m.Kind == protocol.MsgWorkerDone })
	if err != nil {
		return s, fmt.Errorf("worker %s's worker-done: %w", h, err)
	}
	if done.Outcome != protocol.OutcomeSucceeded {
		return s, fmt.Errorf("worker %s ended %s: %s", h, done.Outcome, done.Body)
	}
	s.Done = time.Since(replied).Seconds()
	return s, nil
}

// mailbox reads one run's mailbox as its coordinator, in order.
type mailbox struct {
	kc      *client.Client
	run     string
	pending []protocol.MailMessage
}

// next answers the next message that matches, skipping the others.
func (m *mailbox) next(ctx context.Context, timeout time.Duration, match func(protocol.MailMessage) bool) (protocol.MailMessage, error) {
	deadline := time.Now().Add(timeout)
	for {
		for len(m.pending) > 0 {
			msg := m.pending[0]
			m.pending = m.pending[1:]
			if match(msg) {
				return msg, nil
			}
		}
		if time.Now().After(deadline) {
			return protocol.MailMessage{}, fmt.Errorf("none within %s", timeout)
		}
		a, err := m.kc.Await(ctx, m.run, "c1", contract.AwaitCap)
		if err != nil {
			return protocol.MailMessage{}, err
		}
		if a.Delivery == nil {
			continue
		}
		m.pending = append(m.pending, a.Delivery.Messages...)
		if _, err := m.kc.Acknowledge(ctx, m.run, "c1", a.Delivery.ID); err != nil {
			return protocol.MailMessage{}, err
		}
	}
}

// server is a galley serve this process started.
type server struct {
	target
	stop func()
}

func startServer(ctx context.Context, c config) (*server, error) {
	data := c.data
	cleanup := func() {}
	if data == "" {
		d, err := os.MkdirTemp("", "resumebench-")
		if err != nil {
			return nil, err
		}
		data, cleanup = d, func() { os.RemoveAll(d) }
	}
	bin, err := filepath.Abs(c.bin)
	if err != nil {
		return nil, err
	}
	program, args := "galley", []string{"serve", "--data", data, "--listen", c.listen}
	switch c.serve {
	case "local":
		args = append(args, "--default-agent", "script", "--park-after", c.parkAfter.String())
	case "aws-local":
		tpl, err := filepath.Abs(c.template)
		if err != nil {
			return nil, err
		}
		program = "galley-dev"
		args = append(args, "--stack", "aws-local", "--template", tpl)
	default:
		return nil, fmt.Errorf("unknown shape %q (local or aws-local)", c.serve)
	}
	srvCtx, stopSrv := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(srvCtx, filepath.Join(bin, program), args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = time.Minute
	cmd.Env = append(os.Environ(), "GALLEY_AWSLOCAL_BIN="+bin)
	logf, err := os.Create(filepath.Join(data, "serve.log"))
	if err != nil {
		stopSrv()
		cleanup()
		return nil, err
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		stopSrv()
		cleanup()
		return nil, err
	}
	progress(c, "starting %s %s (log: %s)", program, strings.Join(args, " "), logf.Name())
	if err := cmd.Start(); err != nil {
		stopSrv()
		cleanup()
		return nil, err
	}
	stop := func() {
		stopSrv()
		_ = cmd.Wait()
		logf.Close()
		cleanup()
	}
	t, err := readReady(stdout, logf)
	if err != nil {
		stop()
		return nil, fmt.Errorf("galley serve did not start: %w", err)
	}
	if c.serve == "aws-local" && c.parkAfter > 0 {
		// The stack's own park after is the template's (the context key
		// parkAfter), not this flag's, which only says to await parking.
		progress(c, "aws-local parks as its template says; parking is awaited through the operator API")
	}
	return &server{target: t, stop: stop}, nil
}

// readReady reads galley serve's ready lines (localserver.PrintReady): its
// endpoint, house, backend, token file and operator token file.
func readReady(stdout io.Reader, logf io.Writer) (target, error) {
	var t target
	var r localserver.Ready
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, line)
		r.ParseLine(line)
		if r.OperatorTokenFile != "" {
			t.house, t.backend, t.endpoint = r.House, r.Backend, r.Endpoint
			for _, f := range []struct {
				path string
				to   *string
			}{{r.TokenFile, &t.token}, {r.OperatorTokenFile, &t.opToken}} {
				if f.path == "" {
					continue
				}
				tok, err := os.ReadFile(f.path)
				if err != nil {
					return t, err
				}
				*f.to = strings.TrimSpace(string(tok))
			}
			go io.Copy(logf, stdout) // keep draining
			if t.endpoint == "" || t.token == "" {
				return t, errors.New("no endpoint or bearer token line")
			}
			return t, nil
		}
	}
	return t, errors.New("galley serve ended before it was ready")
}

func report(w io.Writer, c config, r *result) {
	fmt.Fprintf(w, "resumebench %s\nmachine: %s\nshape: %s, %d workers one after the other\n", r.Label, r.Machine, r.Shape, len(r.Samples))
	if len(r.Samples) == 0 {
		return
	}
	col := func(f func(sample) float64) []float64 {
		var v []float64
		for _, s := range r.Samples {
			if x := f(s); x > 0 {
				v = append(v, x)
			}
		}
		return v
	}
	reply := "reply → the reply in the agent (parked)"
	if r.Samples[0].Parked == 0 {
		reply = "reply → the reply in the agent (waiting)"
	}
	fmt.Fprintf(w, "| figure | p50 | p95 | n |\n| --- | ---: | ---: | ---: |\n")
	for _, row := range []struct {
		name string
		v    []float64
	}{
		{"launch → ready", col(func(s sample) float64 { return s.Ready })},
		{"launch → its question", col(func(s sample) float64 { return s.Asked })},
		{"question → parked", col(func(s sample) float64 { return s.Parked })},
		{reply, col(func(s sample) float64 { return s.Reply })},
		{"reply → worker-done", col(func(s sample) float64 { return s.Done })},
	} {
		if len(row.v) == 0 {
			continue
		}
		p50, p95 := quantiles(row.v)
		fmt.Fprintf(w, "| %s | %.2f s | %.2f s | %d |\n", row.name, p50, p95, len(row.v))
	}
}

// quantiles returns the p50 and p95 of v (nearest rank).
func quantiles(v []float64) (float64, float64) {
	s := slices.Clone(v)
	slices.Sort(s)
	rank := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return rank(0.50), rank(0.95)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func ptr[T any](v T) *T { return &v }

func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	la := strings.Fields(string(load))
	if len(la) > 3 {
		la = la[:3]
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s, load average %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, strings.Join(la, " "))
}
