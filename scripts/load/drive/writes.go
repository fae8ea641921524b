package drive

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
)

// WritesConfig is a durable-write run: first the embedded store alone
// (one writer, then Clients writers, on a file in ProbeDir), then
// message-worker effects over HTTP from Clients clients, each of which the
// server makes durable before it answers.
type WritesConfig struct {
	Target
	Clients  int
	Duration time.Duration // the whole run
	// ProbeDir holds the probe's store file; put it on the server's disk.
	ProbeDir string
	// Workers receive the messages, spread so no inbox grows long.
	Workers int
	Log     io.Writer `json:"-"`
}

// Writes is the result of a durable-write run.
type Writes struct {
	Config WritesConfig
	// StoreSerial and StoreConcurrent are the probe's writes per second:
	// each one conditional put, committed and fsynced.
	StoreSerial, StoreConcurrent float64
	StoreLatency                 Latency
	// Effects is message-worker effects answered applied per second, with
	// their latency.
	Effects        float64
	EffectsLatency Latency
	Errors         int
	Report         history.Report
}

// StoreWritesPerMessage is how many store transactions galley commits for
// one message-worker effect: the claim, the inbox item, the completion.
const StoreWritesPerMessage = 3

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
	if err := probeStore(ctx, cfg.ProbeDir, cfg.Clients, quarter, res); err != nil {
		return nil, err
	}
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
	hctx, cancel := context.WithTimeout(ctx, 2*quarter)
	defer cancel()
	var wg sync.WaitGroup
	var n atomic.Int64
	start := time.Now()
	first := rec.Len()
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("writer-%d", i)
			for k := 0; hctx.Err() == nil; k++ {
				body := fmt.Sprintf("message %d from %s", k, client)
				call := c.effect(run, "load-writes", fmt.Sprintf("%s-%s-%d", run, client, k),
					protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(c.worker(handles[(i+k)%len(handles)])), Body: &body})
				// The call itself is not cut short at the end: a call
				// without an answer would be an error of the driver's own.
				op, err := c.do(ctx, client, history.Effect, mustJSON(call), call.Request.Key, 0)
				if err == nil && op.Status == 200 {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	ops := rec.Ops()
	var lat []time.Duration
	for _, op := range ops[first:] {
		if op.Status != 200 {
			res.Errors++
			continue
		}
		lat = append(lat, time.Duration(op.Return-op.Call))
	}
	res.Effects = float64(n.Load()) / secs
	res.EffectsLatency = latencyOf(lat)
	res.Report = history.Check(ops, history.Options{})
	return res, nil
}

// probeStore measures the embedded store's durable writes: conditional
// creates of new effect records, serially and from writers at once.
func probeStore(ctx context.Context, dir string, writers int, d time.Duration, res *Writes) error {
	path := filepath.Join(dir, fmt.Sprintf("galley-load-probe-%d.db", time.Now().UnixNano()))
	st, err := boltstore.Open(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer st.Close()
	var lat []time.Duration
	var mu sync.Mutex
	measure := func(writers int, d time.Duration) float64 {
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
					e := store.Effect{Key: fmt.Sprintf("probe-%d-%d-%d", writers, w, i), Fingerprint: "sha256:probe",
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
	res.StoreSerial = measure(1, d/2)
	lat = nil
	res.StoreConcurrent = measure(writers, d/2)
	res.StoreLatency = latencyOf(lat)
	return nil
}
