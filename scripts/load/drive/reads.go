package drive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// ReadsConfig is a read-throughput run: Clients concurrent clients call
// descriptor, observe, inventory and next in turn, against galley and, in
// the same run, against a bare net/http server doing the same JSON work,
// alternating in Rounds so that both see the same machine.
type ReadsConfig struct {
	Target
	Clients  int
	Duration time.Duration // the whole run, both servers
	Rounds   int
	// NewConn opens a connection per call, as kitchn's client does;
	// otherwise connections are kept alive.
	NewConn bool
	// NetHTTP drives kept-alive connections through net/http's client
	// instead of one lean connection per client (connClient), which
	// leaves more of the shared CPU to the servers.
	NetHTTP bool
	// ServerPID, when set, is the galley process on this machine, whose
	// CPU time each phase reports; Procs are more process trees (the
	// stand-ins), reported with the server's trees by process class.
	ServerPID int
	Procs     []int
	// BareCommand starts the bare server as a process of its own, as
	// galley is (see ServeBare); empty runs it inside this process.
	BareCommand []string
	Log         io.Writer `json:"-"`
}

// ReadPhase is one server's figures in one round.
type ReadPhase struct {
	Server string // "bare" or "galley"
	Round  int
	Calls  int
	Errors int
	PerSec float64
	Latency
	// ClientCores, ServerCores and MachineCores are the CPU the load
	// generator, the server (galley, or the bare server when it runs as a
	// process of its own) and the whole machine used, in cores.
	ClientCores, ServerCores, MachineCores float64
	// CPU is the galley process trees' CPU by class (ServerPID, Procs).
	CPU ProcCPU
}

// Reads is the result of a read-throughput run.
type Reads struct {
	Config ReadsConfig
	Phases []ReadPhase
	// Ratio is galley's throughput over the bare server's, per round; the
	// median of them is the figure to quote.
	Ratios      []float64
	MedianRatio float64
	// Galley and Bare pool every round's latencies; GalleyPerSec and
	// BarePerSec are the medians over rounds.
	Galley, Bare             Latency
	GalleyPerSec, BarePerSec float64
	PerRoute                 map[string]Latency // galley, pooled
	InventoryRows            int
}

type readCall struct {
	name  string
	route contract.Route
	body  []byte
}

// RunReads runs the read-throughput comparison.
func RunReads(ctx context.Context, cfg ReadsConfig) (*Reads, error) {
	if err := history.CheckLoopback(cfg.Endpoint); err != nil {
		return nil, err
	}
	cfg.Clients = max(cfg.Clients, 1)
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	// One idle worker to observe, launched through the protocol.
	c, err := newCaller(cfg.Target, history.NewRecorder(), cfg.Log)
	if err != nil {
		return nil, err
	}
	run := fmt.Sprintf("load-reads-%d", time.Now().UnixNano())
	b := "reads: an idle worker to observe"
	launch := c.effect(run, "load-reads", run+"-launch", protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "commis",
		Workspace: &protocol.Workspace{Type: "isolated"}, Brief: &b})
	out, err := c.apply(ctx, "reads", launch, time.Minute)
	if err != nil || !out.applied {
		return nil, fmt.Errorf("reads: launch the worker to observe: %v %s", err, out.reason)
	}
	handle := out.receipt.Created[0].Handle
	defer func() {
		cancel := c.effect(run, "load-reads", run+"-cancel", protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(c.worker(handle))})
		_, _ = c.apply(context.WithoutCancel(ctx), "reads", cancel, time.Minute)
	}()
	calls := []readCall{
		{"descriptor", contract.RouteDescriptor, nil},
		{"observe", contract.RouteObserve, mustJSON(protocol.WorkerCall{Worker: c.worker(handle)})},
		{"inventory", contract.RouteInventory, nil},
		{"next", contract.RouteNext, mustJSON(protocol.MailboxCall{Run: run + "-empty", Coordinator: "reader"})},
	}
	hc := newHTTPClient(cfg.Clients, cfg.NewConn)
	// galley's own answers, which the bare server answers too.
	answers := map[string][]byte{}
	kc := kitchnClient(hc, cfg.Endpoint, cfg.Token)
	for _, rc := range calls {
		a, err := kc.Call(ctx, rc.route, rc.body, "", 0)
		if err != nil || a.Status != http.StatusOK {
			return nil, fmt.Errorf("reads: %s answered %d %v", rc.name, a.Status, err)
		}
		answers[rc.route.Path] = a.Body
	}
	var inv protocol.Inventory
	_ = json.Unmarshal(answers[contract.PathInventory], &inv)

	bareURL, barePID, stopBare, err := cfg.bare(answers)
	if err != nil {
		return nil, err
	}
	defer stopBare()
	res := &Reads{Config: cfg, PerRoute: map[string]Latency{}, InventoryRows: len(inv.Resources)}
	phase := cfg.Duration / time.Duration(2*cfg.Rounds)
	var galleyAll, bareAll []time.Duration
	routes := map[string][]time.Duration{}
	var galleyRates, bareRates []float64
	for r := range cfg.Rounds {
		for _, srv := range []struct{ name, base string }{{"bare", bareURL}, {"galley", cfg.Endpoint}} {
			pid := cfg.ServerPID
			if srv.name == "bare" {
				pid = barePID
			}
			roots := procRoots(cfg.ServerPID, cfg.Procs)
			c0, s0, m0, t0, snap0 := selfCPU(), procCPU(pid), machineCPU(), time.Now(), snapProcs(roots)
			p, lat, per := hammer(ctx, cfg.caller(hc, srv.base), calls, cfg.Clients, phase)
			secs := time.Since(t0).Seconds()
			p.ClientCores, p.ServerCores, p.MachineCores = (selfCPU()-c0)/secs, (procCPU(pid)-s0)/secs, (machineCPU()-m0)/secs
			p.CPU = snapProcs(roots).since(snap0)
			p.Server, p.Round = srv.name, r
			res.Phases = append(res.Phases, p)
			fmt.Fprintf(cfg.Log, "round %d %-6s %8.0f calls/s %s errors=%d cores client %.2f server %.2f\n", r, srv.name, p.PerSec, p.Latency, p.Errors, p.ClientCores, p.ServerCores)
			if srv.name == "galley" {
				galleyAll = append(galleyAll, lat...)
				galleyRates = append(galleyRates, p.PerSec)
				for k, v := range per {
					routes[k] = append(routes[k], v...)
				}
			} else {
				bareAll = append(bareAll, lat...)
				bareRates = append(bareRates, p.PerSec)
			}
			hc.CloseIdleConnections()
		}
		if n := len(res.Phases); res.Phases[n-2].PerSec > 0 {
			res.Ratios = append(res.Ratios, res.Phases[n-1].PerSec/res.Phases[n-2].PerSec)
		}
		if ctx.Err() != nil {
			break
		}
	}
	res.MedianRatio = median(res.Ratios)
	res.GalleyPerSec, res.BarePerSec = median(galleyRates), median(bareRates)
	res.Galley, res.Bare = latencyOf(galleyAll), latencyOf(bareAll)
	for k, v := range routes {
		res.PerRoute[k] = latencyOf(v)
	}
	return res, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func newHTTPClient(clients int, newConn bool) *http.Client {
	return &http.Client{
		Transport: &http.Transport{MaxIdleConns: clients * 2, MaxIdleConnsPerHost: clients * 2, DisableKeepAlives: newConn,
			IdleConnTimeout: 30 * time.Second},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       10 * time.Second,
	}
}

// kitchnClient calls base as kitchn does, through hc's transport and
// within its deadline.
func kitchnClient(hc *http.Client, base, token string) *client.Client {
	return client.New(base, token, client.WithTransport(hc.Transport), client.WithTimeout(hc.Timeout))
}

// readFunc makes one call and answers its status.
type readFunc func(rc readCall) (int, error)

// caller returns what gives each client its way to call base: a lean
// connection of its own when connections are kept alive (unless NetHTTP),
// else net/http's client, shared.
func (cfg ReadsConfig) caller(hc *http.Client, base string) func() (readFunc, func()) {
	if cfg.NewConn || cfg.NetHTTP {
		kc := kitchnClient(hc, base, cfg.Token)
		return func() (readFunc, func()) {
			return func(rc readCall) (int, error) {
				a, err := kc.Call(context.Background(), rc.route, rc.body, "", 0)
				return a.Status, err
			}, func() {}
		}
	}
	return func() (readFunc, func()) {
		c, err := newConnClient(base)
		if err != nil {
			return func(readCall) (int, error) { return 0, err }, func() {}
		}
		return func(rc readCall) (int, error) {
			st, _, err := c.do(rc.route.Method, rc.route.Path, cfg.Token, rc.body)
			return st, err
		}, c.close
	}
}

// hammer runs clients, each calling calls in turn through its own
// readFunc, for d.
func hammer(ctx context.Context, newClient func() (readFunc, func()), calls []readCall, clients int, d time.Duration) (ReadPhase, []time.Duration, map[string][]time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var all []time.Duration
	per := map[string][]time.Duration{}
	errs := 0
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call, done := newClient()
			defer done()
			local := map[string][]time.Duration{}
			e := 0
			for n := i; ctx.Err() == nil; n++ {
				rc := calls[n%len(calls)]
				t0 := time.Now()
				st, err := call(rc)
				if err != nil || st != http.StatusOK {
					e++
					continue
				}
				local[rc.name] = append(local[rc.name], time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			errs += e
			for k, v := range local {
				per[k] = append(per[k], v...)
				all = append(all, v...)
			}
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	return ReadPhase{Calls: len(all), Errors: errs, PerSec: float64(len(all)) / secs, Latency: latencyOf(all)}, all, per
}

// BareSpec is what a bare server answers: the token it accepts and
// galley's answers by path.
type BareSpec struct {
	Token   string            `json:"token"`
	Answers map[string][]byte `json:"answers"`
}

// bare starts the baseline: in this process, or as a process of its own
// that reads its BareSpec on stdin (the token never on a command line)
// and prints "listening <addr>".
func (cfg ReadsConfig) bare(answers map[string][]byte) (url string, pid int, stop func(), err error) {
	spec := BareSpec{Token: cfg.Token, Answers: answers}
	if len(cfg.BareCommand) == 0 {
		ln, err := ServeBare(spec)
		if err != nil {
			return "", 0, nil, err
		}
		return "http://" + ln.Addr().String(), 0, func() { ln.Close() }, nil
	}
	cmd := exec.Command(cfg.BareCommand[0], cfg.BareCommand[1:]...)
	cmd.Stdin = bytes.NewReader(mustJSON(spec))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		stop()
		return "", 0, nil, fmt.Errorf("bare server: %q %v", line, err)
	}
	return "http://" + addr, cmd.Process.Pid, stop, nil
}

// ServeBare serves the same routes with the same JSON work galley's
// handlers do, and no store: check the bearer token, read and strictly
// decode the body, and encode the answer (galley's own, captured once)
// from its value; the descriptor, which galley caches, from bytes.
func ServeBare(spec BareSpec) (net.Listener, error) {
	token, answers := spec.Token, spec.Answers
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var obs protocol.Observation
	var inv protocol.Inventory
	var next protocol.MailboxAnswer
	_ = json.Unmarshal(answers[contract.PathObserve], &obs)
	_ = json.Unmarshal(answers[contract.PathInventory], &inv)
	_ = json.Unmarshal(answers[contract.PathNext], &next)
	auth := func(r *http.Request) bool {
		return subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1
	}
	write := func(w http.ResponseWriter, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}
	strict := func(r *http.Request, v any) bool {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return false
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		return d.Decode(v) == nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc(contract.RouteDescriptor.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		if !auth(r) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answers[contract.PathDescriptor])
	})
	mux.HandleFunc(contract.RouteObserve.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var call protocol.WorkerCall
		if !auth(r) || !strict(r, &call) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		write(w, obs)
	})
	mux.HandleFunc(contract.RouteInventory.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		if !auth(r) {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		write(w, inv)
	})
	mux.HandleFunc(contract.RouteNext.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var call protocol.MailboxCall
		if !auth(r) || !strict(r, &call) {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		write(w, next)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}

// selfCPU is this process's CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// procCPU is another process's CPU time in seconds, from /proc (0 when
// unknown).
func procCPU(pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100
