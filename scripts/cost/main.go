// Command cost measures what a galley house costs on AWS by counting what
// it really does: it starts aws-local from the synthesized template (the
// functions under the Lambda emulator, DynamoDB Local, fauxqs, the ECS
// stand-in running real harness processes), drives a scenario through it,
// reads the stack's Usage (local/awslocal) before and after each phase, and
// prints the counts and their price at prices.go's table as Markdown that
// docs/cost.md takes as it is.
//
//	make build-aws-local synth-local
//	go run ./scripts/cost --workers 4 --idle 3m --launches 4 > /tmp/cost.md
//
// The scenario: M launches (--launches), each worker asking the
// coordinator one question answered by a reply; N of them (--workers)
// then stay idle for D (--idle) while one coordinator awaits its mailbox
// all along; then each idle worker is released by a message and finishes.
// The idle window is scaled to per worker-hour and per waiting
// coordinator-hour; launch, question and release are one-off costs per
// worker. DynamoDB Local and fauxqs are those of AWS_ENDPOINT_URL_DYNAMODB
// and AWS_ENDPOINT_URL_SQS when both are set, else scripts/standins.sh's.
// Progress goes to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		workers  = fs.Int("workers", 4, "N: workers that stay idle through the window")
		idle     = fs.Duration("idle", 3*time.Minute, "D: how long the idle window lasts")
		launches = fs.Int("launches", 0, "M: workers launched, each asking one question (default N; those beyond N finish after their reply)")
		tpl      = fs.String("template", "cdk.out/galley-local.template.json", "the synthesized stack template")
		bin      = fs.String("bin", "bin", "the folder of aws-local's binaries (make build-aws-local)")
		data     = fs.String("data", "", "the stack's data folder (default a temporary one, removed after)")
		settle   = fs.Duration("settle", 5*time.Second, "wait after the last reply before the idle window starts (the workers' turns end)")
		park     = fs.Bool("park", false, "print only the parked worker-hour against a working one, computed from the prices, the last measured control plane and the assumptions (park.go), without starting the stack")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *park {
		parkReport(stdout, defaultTask, defaultPark, fmt.Sprintf("$%s a worker-hour and $%s a launch, measured (docs/cost.md, Since DPoP)",
			usd(measuredIdleWorkerHour), usd(measuredLaunchQuestion)))
		return 0
	}
	if *launches == 0 {
		*launches = *workers
	}
	if *workers < 1 || *launches < *workers || *idle < 30*time.Second || *idle > 2*time.Hour {
		fmt.Fprintln(stderr, "cost: want --workers ≥ 1, --launches ≥ --workers, and --idle between 30s and 2h")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := measure(ctx, config{workers: *workers, launches: *launches, idle: *idle, template: *tpl, bin: *bin,
		data: *data, settle: *settle, log: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "cost: %v\n", err)
		return 1
	}
	res.command = "go run ./scripts/cost " + strings.Join(args, " ")
	report(stdout, res)
	return 0
}

type config struct {
	workers, launches int
	idle, settle      time.Duration
	template, bin     string
	data              string
	log               io.Writer
}

// result is what one run measured.
type result struct {
	cfg                     config
	command                 string
	started                 time.Time
	launch, window, release awslocal.Usage // each phase's difference
	windowLen               time.Duration
	vcpu, memGB, storageGB  float64 // the worker task's size, from the template
}

func progress(c config, format string, a ...any) {
	fmt.Fprintf(c.log, "cost: %s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func measure(ctx context.Context, c config) (_ *result, err error) {
	dir := c.data
	if dir == "" {
		d, mkErr := os.MkdirTemp("", "galley-cost-")
		if mkErr != nil {
			return nil, mkErr
		}
		// Kept when the run fails: the stack's log says why.
		defer func() {
			if err == nil {
				os.RemoveAll(d)
			} else {
				progress(c, "the stack's data and log are kept in %s", d)
			}
		}()
		dir = d
	}
	logf, err := os.Create(filepath.Join(dir, "stack.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	binDir, err := filepath.Abs(c.bin)
	if err != nil {
		return nil, err
	}
	progress(c, "starting aws-local from %s (log: %s)", c.template, logf.Name())
	s, err := awslocal.Start(ctx, awslocal.Config{
		Options: localserver.Options{Listen: "127.0.0.1:0", Data: dir, Logger: slog.New(slog.NewJSONHandler(logf, nil))},
		Bin:     awslocal.BinariesIn(binDir), Template: c.template, FunctionOutput: logf, WorkerGrace: 3 * time.Second,
		StandinsScript: filepath.Join("scripts", "standins.sh"),
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	tok, err := os.ReadFile(s.TokenFile())
	if err != nil {
		return nil, err
	}
	r := &result{cfg: c, started: time.Now()}
	r.vcpu, r.memGB, r.storageGB = workerSize(s)
	k := &kitchn{kc: client.New(s.Endpoint(), strings.TrimSpace(string(tok)), client.WithTimeout(60*time.Second)),
		house: s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse], run: "run-cost",
		done: map[string]bool{}, why: map[string]string{}}
	coordCtx, stopCoord := context.WithCancel(ctx)
	defer stopCoord()
	coordErr := make(chan error, 1)
	go func() { coordErr <- k.coordinate(coordCtx) }()

	// Launch and question.
	u0 := s.Usage()
	var handles []string
	for i := range c.launches {
		script := []string{"#!standin", `tool ask_coordinator {"subject":"colour","body":"red or blue?"}`}
		if i < c.workers {
			script = append(script, "---") // idle until a message comes
		}
		script = append(script, `tool finish {"outcome":"succeeded","body":"done"}`)
		h, err := k.launch(ctx, fmt.Sprintf("cost/%d", i), strings.Join(script, "\n"))
		if err != nil {
			return nil, err
		}
		handles = append(handles, h)
	}
	progress(c, "launched %d workers; waiting for their questions and the replies", c.launches)
	if err := k.waitFor(ctx, coordErr, 5*time.Minute, func() bool {
		return k.replied() >= c.launches && k.finished(handles[c.workers:]) == c.launches-c.workers
	}); err != nil {
		return nil, err
	}
	time.Sleep(c.settle)
	u1 := s.Usage()
	r.launch = u1.Sub(u0)

	// The idle window: N workers, one coordinator awaiting.
	s.ResetPeaks()
	progress(c, "idle window: %d workers, one coordinator awaiting, for %s", c.workers, c.idle)
	end := time.Now().Add(c.idle)
	tick := time.NewTicker(30 * time.Second)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case err := <-coordErr:
			tick.Stop()
			return nil, fmt.Errorf("coordinator: %w", err)
		case <-time.After(time.Until(end)):
		case <-tick.C:
			if n := k.finished(handles[:c.workers]); n > 0 {
				return nil, fmt.Errorf("%d idle workers ended during the window: %v", n, k.ended())
			}
			d := s.Usage().Sub(u1)
			progress(c, "%s left; so far %d AWS requests, %d worker-API invocations (in flight now %d, at most %d)",
				time.Until(end).Round(time.Second), sum(d.Requests), d.Functions[lambdaapp.WorkerAPI].Invocations,
				d.Functions[lambdaapp.WorkerAPI].InFlight, d.Functions[lambdaapp.WorkerAPI].MaxInFlight)
		}
	}
	tick.Stop()
	u2 := s.Usage()
	r.window, r.windowLen = u2.Sub(u1), u2.At.Sub(u1.At)

	// Release: a message wakes each idle worker, which finishes.
	for _, h := range handles[:c.workers] {
		if err := k.message(ctx, h); err != nil {
			return nil, err
		}
	}
	progress(c, "released %d workers; waiting for them to finish and their tasks to stop", c.workers)
	if err := k.waitFor(ctx, coordErr, 5*time.Minute, func() bool {
		u := s.Usage()
		return k.finished(handles) == c.launches && u.Tasks.Running == 0 &&
			u.Functions[lambdaapp.Reconciler].InFlight == 0
	}); err != nil {
		return nil, err
	}
	time.Sleep(c.settle) // the last state changes' reconciler invocations
	r.release = s.Usage().Sub(u2)
	stopCoord()
	progress(c, "done")
	return r, nil
}

// workerSize reads the worker task definition's CPU, memory and own
// storage (Fargate's 20 GB when it sets none).
func workerSize(s *awslocal.Stack) (vcpu, gb, storage float64) {
	for _, p := range s.Resources("AWS::ECS::TaskDefinition") {
		cpu, _ := strconv.ParseFloat(fmt.Sprint(p["Cpu"]), 64)
		mem, _ := strconv.ParseFloat(fmt.Sprint(p["Memory"]), 64)
		if cpu > 0 && mem > 0 {
			storage = fargateFreeStorageGB
			if es, ok := p["EphemeralStorage"].(map[string]any); ok {
				if n, err := strconv.ParseFloat(fmt.Sprint(es["SizeInGiB"]), 64); err == nil && n > 0 {
					storage = n
				}
			}
			return cpu / 1024, mem / 1024, storage
		}
	}
	return 1, 4, fargateFreeStorageGB
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// kitchn is the one coordinator: it launches, replies, messages, and
// awaits its mailbox all along.
type kitchn struct {
	kc         *client.Client
	house, run string

	mu      sync.Mutex
	replies int
	done    map[string]bool   // handles whose worker-done arrived
	why     map[string]string // their outcome and body
	seq     int
}

// effect applies one effect and answers its receipt; an outcome other than
// applied is an error.
func (k *kitchn) effect(ctx context.Context, e protocol.WorkerEffect) (protocol.Receipt, error) {
	k.mu.Lock()
	k.seq++
	key := fmt.Sprintf("k-cost-%d", k.seq)
	k.mu.Unlock()
	raw, err := json.Marshal(e)
	if err != nil {
		return protocol.Receipt{}, err
	}
	o, err := k.kc.Apply(ctx, protocol.EffectCall{Run: k.run, Request: protocol.EffectRequest{
		House: k.house, Backend: contract.DefaultBackend, Credential: contract.DefaultCredential, Task: "cost", Attempt: 1, Key: key,
		Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: raw}}})
	if err == nil && o.Status != protocol.StatusApplied {
		err = fmt.Errorf("effect %s: %s %s", e.Type, o.Status, o.Reason)
	}
	if err != nil {
		return protocol.Receipt{}, err
	}
	return *o.Receipt, nil
}

func (k *kitchn) worker(h string) *protocol.Resource {
	return &protocol.Resource{Kind: protocol.KindWorker, Backend: contract.DefaultBackend, Handle: h}
}

func (k *kitchn) launch(ctx context.Context, branch, brief string) (string, error) {
	rc, err := k.effect(ctx, protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "station-cook",
		Workspace: &protocol.Workspace{Type: "isolated"}, Brief: &brief, Branch: &branch,
		Agent: &protocol.AgentSelection{Agent: protocol.AgentClaude}})
	if err != nil {
		return "", err
	}
	if len(rc.Created) == 0 {
		return "", errors.New("launch: no worker created")
	}
	return rc.Created[0].Handle, nil
}

func (k *kitchn) message(ctx context.Context, h string) error {
	body := "thanks, you may finish"
	_, err := k.effect(ctx, protocol.WorkerEffect{Type: protocol.OpMessage, Worker: k.worker(h), Body: &body})
	return err
}

// coordinate awaits the mailbox until ctx ends, acknowledging each
// delivery, replying to each question and noting each worker-done.
func (k *kitchn) coordinate(ctx context.Context) error {
	for ctx.Err() == nil {
		a, err := k.kc.Await(ctx, k.run, "c1", contract.AwaitCap)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if a.Delivery == nil {
			continue
		}
		if _, err := k.kc.Acknowledge(ctx, k.run, "c1", a.Delivery.ID); err != nil {
			return err
		}
		for _, m := range a.Delivery.Messages {
			switch {
			case m.Kind == protocol.MsgQuestion && m.Worker != nil:
				question, body := m.ID, "blue"
				if _, err := k.effect(ctx, protocol.WorkerEffect{Type: protocol.OpReply, Worker: k.worker(m.Worker.Handle),
					Question: &question, Body: &body}); err != nil {
					return err
				}
				k.mu.Lock()
				k.replies++
				k.mu.Unlock()
			case m.Kind == protocol.MsgWorkerDone && m.Worker != nil:
				k.mu.Lock()
				k.done[m.Worker.Handle] = true
				k.why[m.Worker.Handle] = m.Outcome + ": " + m.Body
				k.mu.Unlock()
			}
		}
	}
	return nil
}

func (k *kitchn) replied() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.replies
}

func (k *kitchn) finished(handles []string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, h := range handles {
		if k.done[h] {
			n++
		}
	}
	return n
}

func (k *kitchn) ended() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.why)
}

func (k *kitchn) waitFor(ctx context.Context, coordErr <-chan error, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-coordErr:
			return fmt.Errorf("coordinator: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", limit)
		}
	}
	return nil
}

// machine describes this machine for the report.
func machine() string {
	model := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s/%s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
