// Command load drives a galley endpoint on this machine as many kitchn
// coordinators would, and reports throughput, latency per route and the
// await wake-up time; it checks every invariant of the design on the
// recorded history and exits 1 on a violation. It calls loopback endpoints
// only, and stops by itself (--duration, --max-requests).
//
//	go run ./scripts/load --mode mixed --houses 4 --workers 8 --readers 4 --duration 30s --data .galley
//	go run ./scripts/load --mode reads --readers 16 --duration 40s
//	go run ./scripts/load --mode writes --clients 8 --duration 20s
//	go run ./scripts/load --mode takeover --galley bin/galley --data /tmp/tk --kills 10 --duration 150s
//
// The takeover mode starts galley serve itself and kills it with SIGKILL
// under load (with --galley bin/galley-dev and --inject-aws-faults in
// --serve-args, its DynamoDB and SQS calls fail too), then reports how every key it sent ended; it exits
// 1 on a key still unknown two leases after the last fault or an applied
// effect its worker never saw (docs/RELIABILITY.md).
//
// Against the aws-local stack, --server-pid (the galley process) and --pids
// (DynamoDB Local, fauxqs) report CPU by process class, and --probe-store
// dynamodb measures DynamoDB Local alone.
//
// docs/BENCHMARKS-load.md and docs/BENCHMARKS-aws-local-load.md record
// what it measured and how.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/scripts/load/drive"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		mode      = fs.String("mode", "mixed", "mixed (coordinators, scripted workers, readers), reads (read throughput against a bare net/http baseline), writes (durable writes: the store alone, then effects) or takeover (effects cut by SIGKILLs of a server it starts, and AWS faults, then every key looked up)")
		bareIn    = fs.Bool("bare-in-process", false, "run the reads baseline inside the load generator instead of as a process of its own (reads)")
		endpoint  = fs.String("endpoint", "http://127.0.0.1:8080", "galley endpoint: http on a loopback address only")
		tokenFile = fs.String("token-file", ".galley/private/token", "file holding the bearer token")
		house     = fs.String("house", "local", "the house the endpoint serves")
		backend   = fs.String("backend", "galley", "the backend namespace the endpoint serves")
		cred      = fs.String("credential", "galley-token", "the credential name effects carry")
		duration  = fs.Duration("duration", 30*time.Second, "how long the main phase runs")
		maxReqs   = fs.Int64("max-requests", 200000, "stop the main phase after this many calls (mixed)")
		houses    = fs.Int("houses", 4, "simulated coordinators, one run each (mixed)")
		workers   = fs.Int("workers", 8, "scripted workers live at once across the coordinators (mixed)")
		readers   = fs.Int("readers", 4, "clients calling read routes without pause (mixed); concurrent clients (reads)")
		clients   = fs.Int("clients", 8, "concurrent writers (writes)")
		rounds    = fs.Int("rounds", 3, "alternating bare/galley rounds (reads)")
		newConn   = fs.Bool("new-conn", false, "a new connection per call, as kitchn's client does (reads)")
		netHTTP   = fs.Bool("net-http", false, "kept-alive calls through net/http's client instead of a lean connection per client (reads)")
		serverPID = fs.Int("server-pid", 0, "the galley process (the server, or the aws-local gateway), to report its process tree's CPU by class per phase")
		pids      = fs.String("pids", "", "more process trees to report by class with the server's, comma-separated (the stand-ins: DynamoDB Local, fauxqs)")
		probe     = fs.String("probe-store", "bolt", "the store the write run's probe measures alone: bolt (the local server's) or dynamodb (the aws-local stack's, at AWS_ENDPOINT_URL_DYNAMODB) (writes)")
		data      = fs.String("data", "", "the server's data directory on this machine: harness logs time each question (await wake-up)")
		probeDir  = fs.String("probe-dir", "", "directory for the store probe's file (writes; default the system temporary directory)")
		settle    = fs.Duration("settle", 90*time.Second, "bound of the end phase that settles workers and drains mailboxes (mixed)")
		awaitWait = fs.Duration("await-wait", 2*time.Second, "waitMs of each await (mixed)")
		seed      = fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the coordinators' choices (mixed)")
		jsonOut   = fs.String("json", "", "write the figures as JSON to this file")
		histOut   = fs.String("history", "", "write the recorded history as JSON to this file (mixed)")
		verbose   = fs.Bool("v", false, "log progress to stderr")
		galleyBin = fs.String("galley", "bin/galley", "the galley binary the run starts, kills and restarts, galley-worker beside it; bin/galley-dev for --inject-aws-faults or --stack aws-local in --serve-args (takeover)")
		listen    = fs.String("listen", "127.0.0.1:18399", "loopback address the started server listens on, the same across restarts (takeover)")
		serveArgs = fs.String("serve-args", "--house local --default-agent script", "more flags of galley serve, space-separated, e.g. --store dynamodb --doorbell sqs --inject-aws-faults PLAN (takeover)")
		kills     = fs.Int("kills", 4, "SIGKILLs of the server at random points of the main phase, each followed by a restart on the same data (takeover)")
		killsIn   = fs.Duration("kill-window", 0, "the kills fall in this first part of the main phase (default all of it), so that the last incarnation under AWS faults, whose counts alone are reported, runs for the rest (takeover)")
		messages  = fs.Int("messages", 2, "messages sent to each worker (takeover)")
		lease     = fs.Duration("lease", 30*time.Second, "the server's effect claim lease (galley serve keeps pkg/service's 30 s): every key must be definite two leases after the last fault (takeover)")
		patience  = fs.Duration("patience", 250*time.Millisecond, "how long the main phase retries an effect before leaving it uncertain (takeover)")
		untilApp  = fs.Duration("until-applied", 0, "go on with the main phase past --duration, up to this long in all, until a launch, a reply and a message were applied (takeover; 0: end at --duration)")
		questionW = fs.Duration("question-wait", 5*time.Second, "how long a coordinator waits for its worker's question before it launches the next (takeover)")
		keysOut   = fs.String("keys", "", "write how every key ended as JSON to this file (takeover)")
	)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *mode == "bare-serve" {
		// The reads baseline as a process of its own (started by --mode
		// reads): its spec, with the token, comes on stdin.
		return serveBare(os.Stdin, stdout, stderr)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "load: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *mode == "takeover" {
		*endpoint = "http://" + *listen
	}
	if err := history.CheckLoopback(*endpoint); err != nil {
		fmt.Fprintf(stderr, "load: %s: refusing an endpoint off this machine\n", *endpoint)
		return 2
	}
	if *duration <= 0 || *duration > time.Hour {
		fmt.Fprintln(stderr, "load: --duration must be between 0 and 1h")
		return 2
	}
	procs, err := parsePIDs(*pids)
	if err != nil {
		fmt.Fprintf(stderr, "load: --pids: %v\n", err)
		return 2
	}
	token, err := "", error(nil)
	if *mode != "takeover" { // the started server makes its own
		token, err = readToken(*tokenFile)
	}
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 2
	}
	var log io.Writer = io.Discard
	if *verbose {
		log = stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	target := drive.Target{Endpoint: *endpoint, Token: token, House: *house, Backend: *backend, Credential: *cred}
	fmt.Fprintf(stdout, "machine: %d CPUs (GOMAXPROCS %d), load average %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), loadavg())

	var result any
	code := 0
	switch *mode {
	case "mixed":
		res, err := drive.RunMixed(ctx, drive.MixedConfig{Target: target, Duration: *duration, MaxRequests: *maxReqs,
			Settle: *settle, Coordinators: *houses, Workers: *workers, Readers: *readers, AwaitWait: *awaitWait,
			Data: *data, Seed: *seed, ServerPID: *serverPID, Procs: procs, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
		printMixed(stdout, res)
		if *histOut != "" {
			if err := writeJSON(*histOut, res.Ops); err != nil {
				fmt.Fprintf(stderr, "load: %v\n", err)
			}
		}
		if !res.Report.OK() || len(res.Errors) > 0 {
			code = 1
		}
		res.Ops = nil
		result = res
	case "reads":
		var bare []string
		if !*bareIn {
			exe, err := os.Executable()
			if err != nil {
				fmt.Fprintf(stderr, "load: %v\n", err)
				return 1
			}
			bare = []string{exe, "--mode", "bare-serve"}
		}
		res, err := drive.RunReads(ctx, drive.ReadsConfig{Target: target, Clients: *readers, Duration: *duration,
			Rounds: *rounds, NewConn: *newConn, NetHTTP: *netHTTP, ServerPID: *serverPID, Procs: procs, BareCommand: bare, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
		printReads(stdout, res)
		result = res
	case "writes":
		res, err := drive.RunWrites(ctx, drive.WritesConfig{Target: target, Clients: *clients, Duration: *duration,
			ProbeDir: *probeDir, ProbeStore: *probe, Workers: 4, ServerPID: *serverPID, Procs: procs, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
		printWrites(stdout, res)
		if !res.Report.OK() {
			code = 1
		}
		result = res
	case "takeover":
		if *data == "" {
			fmt.Fprintln(stderr, "load: --mode takeover needs --data, the started server's data directory (its harness logs show what workers received)")
			return 2
		}
		srv := &drive.GalleyServer{Bin: *galleyBin, Listen: *listen, Data: *data, Args: strings.Fields(*serveArgs)}
		res, err := drive.RunTakeover(ctx, drive.TakeoverConfig{Target: target, Server: srv, Duration: *duration, UntilApplied: *untilApp, KillWindow: *killsIn, Kills: *kills,
			Coordinators: *houses, Messages: *messages, Lease: *lease, Patience: *patience, QuestionWait: *questionW, Seed: *seed, Log: log})
		if err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
		printTakeover(stdout, res)
		if *keysOut != "" {
			if err := writeJSON(*keysOut, res.Keys); err != nil {
				fmt.Fprintf(stderr, "load: %v\n", err)
			}
		}
		if *histOut != "" {
			if err := writeJSON(*histOut, res.Ops); err != nil {
				fmt.Fprintf(stderr, "load: %v\n", err)
			}
		}
		if !res.OK() {
			code = 1
		}
		res.Keys = nil
		result = res
	default:
		fmt.Fprintf(stderr, "load: --mode must be mixed, reads, writes or takeover\n")
		return 2
	}
	fmt.Fprintf(stdout, "load average after: %s\n", loadavg())
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, result); err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
	}
	return code
}

func parsePIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a process id", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// readToken reads the bearer token; it is never printed.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if fi.Size() > 16<<10 {
		return "", errors.New("token file is larger than 16 KiB")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func printMixed(w io.Writer, r *drive.Mixed) {
	c := r.Config
	main := r.MainEnd.Sub(r.Start)
	fmt.Fprintf(w, "mixed: %d coordinators, %d workers live, %d readers; main phase %s, whole run %s; %d launches\n",
		c.Coordinators, c.Workers, c.Readers, main.Round(time.Millisecond), r.End.Sub(r.Start).Round(time.Millisecond), r.Launches)
	drive.PrintRoutes(w, r.Routes)
	fmt.Fprintf(w, "await wake-up (question posted -> await answered): %s\n", r.Wake)
	if c.Data == "" {
		fmt.Fprintln(w, "  (no --data: the harness logs that time questions were not read)")
	}
	fmt.Fprintf(w, "message -> next question through a worker (upper bound of the wake-up): %s\n", r.Chain)
	fmt.Fprintf(w, "launch answered -> agent started (harness log): %s\n", r.StartUp)
	if r.CPU.Seconds > 0 {
		calls := 0
		if n := len(r.Routes); n > 0 {
			calls = r.Routes[n-1].Calls
		}
		fmt.Fprintf(w, "CPU in the main phase by process class (machine %.2f cores busy; per call of the coordinators and readers):\n", r.MachineCores)
		drive.PrintProcs(w, r.CPU, calls, r.SelfCPU)
	}
	fmt.Fprintf(w, "invariants: %s", r.Report)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "ERROR %s\n", e)
	}
}

func printTakeover(w io.Writer, r *drive.Takeover) {
	c := r.Config
	fmt.Fprintf(w, "takeover: %d coordinators, %d messages a worker, main phase %s (asked %s), %d kills; whole run %s; %d calls\n",
		c.Coordinators, c.Messages, r.MainPhase, c.Duration, r.Kills, r.End.Sub(r.Start).Round(time.Millisecond), r.Calls)
	for _, f := range r.AWSFaults {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if c := r.FaultCounts; c != nil {
		fmt.Fprintf(w, "  resends after applied DynamoDB writes %d; SQS: queues deleted under a sender %d, creations refused as deleted recently %d, short polls missed %d, deletes with an expired handle %d\n",
			drive.ResendsAfterAppliedWrites(*c), c.SQS.Deleted, c.SQS.DeletedRecently, c.SQS.Misses, c.SQS.ExpiredHandles)
	}
	keys := 0
	for _, n := range r.Counts {
		keys += n
	}
	fmt.Fprintf(w, "keys: %d sent, %d left uncertain by the main phase; the last fault -> all definite in at most %s (bound: two leases, %s)\n",
		keys, r.Uncertain, r.MaxConverge.Round(time.Millisecond), 2*c.Lease)
	names := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "  %-28s %d\n", k, r.Counts[k])
	}
	byEffect := map[string]map[string]int{}
	for _, k := range r.Keys {
		if byEffect[k.Effect] == nil {
			byEffect[k.Effect] = map[string]int{}
		}
		s := k.Status
		if k.Reason != "" {
			s += " " + k.Reason
		}
		switch {
		case k.Uncertain:
			s += " (uncertain, converged)"
		case k.Answer != "" && !strings.HasPrefix(k.Answer, k.Status):
			s += " (answered " + k.Answer + ")"
		}
		byEffect[k.Effect][s]++
	}
	for _, e := range []string{"launch", "reply", "message", "cancel", "release"} {
		if byEffect[e] != nil {
			fmt.Fprintf(w, "  %-8s %v\n", e, byEffect[e])
		}
	}
	fmt.Fprintf(w, "workers starting at the end: %d, of which without a live compute: %d\n", r.StartingAtEnd, r.StartingWithoutTask)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "invariants: %s", r.Report)
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAIL %s\n", f)
	}
}

func printReads(w io.Writer, r *drive.Reads) {
	c := r.Config
	conn := "kept alive, one lean connection per client"
	switch {
	case c.NewConn:
		conn = "one per call"
	case c.NetHTTP:
		conn = "kept alive, through net/http's client"
	}
	fmt.Fprintf(w, "reads: %d clients, connections %s, %d rounds over %s; inventory of %d rows\n", c.Clients, conn, c.Rounds, c.Duration, r.InventoryRows)
	for _, p := range r.Phases {
		fmt.Fprintf(w, "  round %d %-6s %9.0f calls/s  %s  errors %d  cores: load %.2f server %.2f machine %.2f\n", p.Round, p.Server, p.PerSec, p.Latency, p.Errors, p.ClientCores, p.ServerCores, p.MachineCores)
	}
	fmt.Fprintf(w, "galley %0.f calls/s, bare %0.f calls/s (medians over rounds); ratio per round %v, median %.2f\n",
		r.GalleyPerSec, r.BarePerSec, fmtRatios(r.Ratios), r.MedianRatio)
	fmt.Fprintf(w, "galley latency %s\nbare latency   %s\n", r.Galley, r.Bare)
	for _, k := range []string{"descriptor", "observe", "inventory", "next"} {
		fmt.Fprintf(w, "  galley %-10s %s\n", k, r.PerRoute[k])
	}
	// The galley rounds' CPU by process class, pooled.
	var pooled drive.ProcCPU
	calls, self := 0, 0.0
	for _, p := range r.Phases {
		if p.Server != "galley" || p.CPU.Seconds <= 0 {
			continue
		}
		if pooled.CPU == nil {
			pooled.CPU = map[string]float64{}
		}
		pooled.Seconds += p.CPU.Seconds
		for k, v := range p.CPU.CPU {
			pooled.CPU[k] += v
		}
		pooled.Count, pooled.Instances = p.CPU.Count, p.CPU.Instances
		calls += p.Calls
		self += p.ClientCores * p.CPU.Seconds
	}
	if pooled.Seconds > 0 {
		fmt.Fprintln(w, "galley rounds, CPU by process class:")
		drive.PrintProcs(w, pooled, calls, self)
	}
}

func fmtRatios(rs []float64) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%.2f", r))
	}
	return "[" + strings.Join(s, " ") + "]"
}

func printWrites(w io.Writer, r *drive.Writes) {
	fmt.Fprintf(w, "store alone: %.0f durable writes/s serially, %.0f with %d writers; %s\n", r.StoreSerial, r.StoreConcurrent, r.Config.Clients, r.StoreLatency)
	for _, p := range r.Phases {
		fmt.Fprintf(w, "%s from %d clients: %.0f/s, %d store writes each (%.0f writes/s, %.0f%% of the store alone with as many writers); %s; errors %d; cores: galley %.2f load %.2f machine %.2f\n",
			p.Name, r.Config.Clients, p.PerSec, p.StoreWrites, p.PerSec*float64(p.StoreWrites),
			100*p.PerSec*float64(p.StoreWrites)/max(r.StoreConcurrent, 1), p.Latency, p.Errors, p.ServerCores, p.ClientCores, p.MachineCores)
	}
	for _, p := range r.Phases {
		if p.CPU.Seconds > 0 {
			fmt.Fprintf(w, "%s, CPU by process class:\n", p.Name)
			drive.PrintProcs(w, p.CPU, int(p.PerSec*p.CPU.Seconds+0.5), p.ClientCores*p.CPU.Seconds)
		}
	}
	fmt.Fprintf(w, "invariants: %s", r.Report)
}

// serveBare runs the reads baseline until killed.
func serveBare(in io.Reader, stdout, stderr io.Writer) int {
	var spec drive.BareSpec
	if err := json.NewDecoder(in).Decode(&spec); err != nil {
		fmt.Fprintf(stderr, "load: bare-serve: %v\n", err)
		return 2
	}
	ln, err := drive.ServeBare(spec)
	if err != nil {
		fmt.Fprintf(stderr, "load: bare-serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	select {}
}
