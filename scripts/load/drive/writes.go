package drive

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// WritesConfig is a durable-write run, in three parts of a quarter,
// a quarter and half of Duration: the store alone (one writer, then
// Clients writers: the embedded store on a file in ProbeDir, or DynamoDB
// at AWS_ENDPOINT_URL_DYNAMODB in a table of its own); lookups of keys never
// sent, each of which galley answers only once its absence promise is
// durable (one store write); and message-worker effects, each durable
// before it is answered (three store writes) and each waking the worker's
// harness.
type WritesConfig struct {
	Target
	Clients  int
	Duration time.Duration // the whole run
	// ProbeDir holds the probe's store file; put it on the server's disk.
	ProbeDir string
	// ProbeStore is the store the probe writes to: "bolt" (default, the
	// local server's) or "dynamodb" (the aws-local stack's: the stand-in
	// at AWS_ENDPOINT_URL_DYNAMODB, which must be on this machine, in a
	// throwaway table deleted at the end).
	ProbeStore string
	// Workers receive the messages, spread over them.
	Workers int
	// ServerPID, when set, is the galley process, whose CPU each phase
	// reports; Procs are more process trees (the stand-ins), reported with
	// the server's by process class.
	ServerPID int
	Procs     []int
	Log       io.Writer `json:"-"`
}

// WritePhase is one write phase over HTTP.
type WritePhase struct {
	Name   string
	PerSec float64 // calls answered 200 per second
	Errors int
	Latency
	// StoreWrites is how many durable store writes each call makes.
	StoreWrites int
	// Cores are what galley (ServerPID), this process and the whole
	// machine used during the phase.
	ServerCores, ClientCores, MachineCores float64
	// CPU is the galley process trees' CPU by class (ServerPID, Procs).
	CPU ProcCPU
}

// Writes is the result of a durable-write run.
type Writes struct {
	Config WritesConfig
	// StoreSerial and StoreConcurrent are the probe's writes per second:
	// each one conditional put, committed and fsynced.
	StoreSerial, StoreConcurrent float64
	StoreLatency                 Latency
	Phases                       []WritePhase
	Report                       history.Report
}

// Store transactions galley commits per call.
const (
	StoreWritesPerLookup  = 1 // the absence promise
	StoreWritesPerMessage = 3 // the claim, the inbox item, the completion
)

// RunWrites runs the durable-write measurement.
func RunWrites(ctx context.Context, cfg WritesConfig) (*Writes, error) {
	cfg.Clients = max(cfg.Clients, 1)
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.ProbeDir == "" {
		cfg.ProbeDir = os.TempDir()
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	rec := history.NewRecorder()
	c, err := newCaller(cfg.Target, rec, cfg.Log)
	if err != nil {
		return nil, err
	}
	res := &Writes{Config: cfg}
	quarter := cfg.Duration / 4
	st, closeProbe, err := openProbe(ctx, cfg)
	if err != nil {
		return nil, err
	}
	probeStore(ctx, st, cfg.Clients, quarter, res)
	closeProbe()
	fmt.Fprintf(cfg.Log, "store probe: %.0f writes/s serial, %.0f writes/s with %d writers (%s)\n",
		res.StoreSerial, res.StoreConcurrent, cfg.Clients, res.StoreLatency)

	run := fmt.Sprintf("load-writes-%d", time.Now().UnixNano())
	var handles []string
	for i := range cfg.Workers {
		b := "writes: an idle worker that receives messages"
		call := c.effect(run, "load-writes", fmt.Sprintf("%s-launch-%d", run, i), protocol.WorkerEffect{Type: protocol.OpLaunch,
			Role: "commis", Workspace: &protocol.Workspace{Type: "isolated"}, Brief: &b})
		out, err := c.apply(ctx, "writes", call, time.Minute)
		if err != nil || !out.applied {
			return nil, fmt.Errorf("writes: launch: %v %s", err, out.reason)
		}
		handles = append(handles, out.receipt.Created[0].Handle)
	}
	defer func() {
		for i, h := range handles {
			call := c.effect(run, "load-writes", fmt.Sprintf("%s-cancel-%d", run, i), protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(c.worker(h))})
			_, _ = c.apply(context.WithoutCancel(ctx), "writes", call, time.Minute)
		}
	}()
	lookup := func(client string, i, k int) (history.Route, protocol.EffectCall) {
		body := "never sent"
		return history.Lookup, c.effect(run, "load-writes", fmt.Sprintf("%s-absent-%s-%d", run, client, k),
			protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(c.worker(handles[0])), Body: &body})
	}
	message := func(client string, i, k int) (history.Route, protocol.EffectCall) {
		body := fmt.Sprintf("message %d from %s", k, client)
		return history.Effect, c.effect(run, "load-writes", fmt.Sprintf("%s-%s-%d", run, client, k),
			protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(c.worker(handles[(i+k)%len(handles)])), Body: &body})
	}
	res.Phases = append(res.Phases,
		writePhase(ctx, c, cfg, "lookup-absent", StoreWritesPerLookup, quarter, lookup),
		writePhase(ctx, c, cfg, "message-worker", StoreWritesPerMessage, 2*quarter, message))
	res.Report = history.Check(rec.Ops(), history.Options{})
	return res, nil
}

// writePhase runs Clients clients making the calls next gives for d.
func writePhase(ctx context.Context, c *caller, cfg WritesConfig, name string, writes int, d time.Duration,
	next func(client string, i, k int) (history.Route, protocol.EffectCall)) WritePhase {
	hctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	first := c.rec.Len()
	roots := procRoots(cfg.ServerPID, cfg.Procs)
	c0, s0, m0, t0, snap0 := selfCPU(), procCPU(cfg.ServerPID), machineCPU(), time.Now(), snapProcs(roots)
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("writer-%d", i)
			for k := 0; hctx.Err() == nil; k++ {
				route, call := next(client, i, k)
				key := ""
				if route == history.Effect {
					key = call.Request.Key
				}
				// The call itself is not cut short at the end: a call
				// without an answer would be an error of the driver's own.
				_, _ = c.do(ctx, client, route, mustJSON(call), key, 0)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	p := WritePhase{Name: name, StoreWrites: writes, ClientCores: (selfCPU() - c0) / secs,
		ServerCores: (procCPU(cfg.ServerPID) - s0) / secs, MachineCores: (machineCPU() - m0) / secs,
		CPU: snapProcs(roots).since(snap0)}
	var lat []time.Duration
	for _, op := range c.rec.Ops()[first:] {
		if op.Status != 200 {
			p.Errors++
			continue
		}
		lat = append(lat, time.Duration(op.Return-op.Call))
	}
	p.PerSec = float64(len(lat)) / secs
	p.Latency = latencyOf(lat)
	fmt.Fprintf(cfg.Log, "%s: %.0f/s %s\n", name, p.PerSec, p.Latency)
	return p
}

// machineCPU is the CPU time every core spent busy, in seconds, from
// /proc/stat.
func machineCPU() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	busy := 0.0
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks
}

// effectPutter is the one store call the probe makes.
type effectPutter interface {
	PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error)
}

// openProbe opens the probe's store, and what removes it.
func openProbe(ctx context.Context, cfg WritesConfig) (effectPutter, func(), error) {
	switch cfg.ProbeStore {
	case "", "bolt":
		path := filepath.Join(cfg.ProbeDir, fmt.Sprintf("galley-load-probe-%d.db", time.Now().UnixNano()))
		st, err := boltstore.Open(path)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close(); os.Remove(path) }, nil
	case "dynamodb":
		ep := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB")
		if err := history.CheckLoopback(ep); err != nil {
			return nil, nil, fmt.Errorf("the dynamodb probe writes to a stand-in on this machine only: AWS_ENDPOINT_URL_DYNAMODB=%q", ep)
		}
		c, err := dynamostore.NewClientFromEnv(ctx)
		if err != nil {
			return nil, nil, err
		}
		table := fmt.Sprintf("galley-load-probe-%d", time.Now().UnixNano())
		st := dynamostore.New(c, table)
		if err := st.EnsureTable(ctx); err != nil {
			return nil, nil, err
		}
		return st, func() {
			_, _ = c.DeleteTable(context.WithoutCancel(ctx), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		}, nil
	}
	return nil, nil, fmt.Errorf("probe store %q: bolt or dynamodb", cfg.ProbeStore)
}

// probeStore measures the store's durable writes: conditional creates of
// new effect records, serially and from writers at once.
func probeStore(ctx context.Context, st effectPutter, writers int, d time.Duration, res *Writes) {
	var lat []time.Duration
	var mu sync.Mutex
	// Each measure writes keys of its own: a key the serial measure
	// created would make the next one's conditional create fail.
	measure := func(phase string, writers int, d time.Duration) float64 {
		pctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var n atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var local []time.Duration
				for i := 0; pctx.Err() == nil; i++ {
					e := store.Effect{Key: fmt.Sprintf("probe-%s-%d-%d", phase, w, i), Fingerprint: "sha256:probe",
						Operation: protocol.OpMessage, State: store.EffectInFlight, Lease: "probe"}
					t0 := time.Now()
					if _, err := st.PutEffect(context.Background(), e, store.NoVersion); err == nil {
						n.Add(1)
						local = append(local, time.Since(t0))
					}
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return float64(n.Load()) / time.Since(start).Seconds()
	}
	res.StoreSerial = measure("serial", 1, d/2)
	lat = nil
	res.StoreConcurrent = measure("concurrent", writers, d/2)
	res.StoreLatency = latencyOf(lat)
}
