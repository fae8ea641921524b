package drive

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
)

func decode(b []byte, v any) error { return json.Unmarshal(b, v) }

// Latency summarizes durations.
type Latency struct {
	N                  int
	P50, P95, P99, Max time.Duration
}

func latencyOf(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Latency{N: len(s), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }

func (l Latency) String() string {
	if l.N == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d p50=%sms p95=%sms p99=%sms max=%sms", l.N, ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max))
}

// RouteStats is one route's figures over the main phase.
type RouteStats struct {
	Route  string
	Calls  int
	Errors int // answers other than 200, and calls without an answer
	PerSec float64
	Latency
}

// routeStats groups the ops called during the main phase by route (an
// effect by its operation). Latency counts answered calls only.
func routeStats(ops []history.Op, rec *history.Recorder, start, end time.Time) []RouteStats {
	from, to := rec.At(start), rec.At(end)
	secs := end.Sub(start).Seconds()
	lat := map[string][]time.Duration{}
	calls := map[string]int{}
	errs := map[string]int{}
	for _, op := range ops {
		if op.Route == history.Post || op.Call < from || op.Call > to {
			continue
		}
		name := routeName(op)
		calls[name]++
		if op.Status != 200 {
			errs[name]++
		}
		if op.Return != history.Pending {
			lat[name] = append(lat[name], time.Duration(op.Return-op.Call))
		}
	}
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []RouteStats
	total := RouteStats{Route: "all"}
	var all []time.Duration
	for _, n := range names {
		out = append(out, RouteStats{Route: n, Calls: calls[n], Errors: errs[n], PerSec: float64(calls[n]) / secs, Latency: latencyOf(lat[n])})
		total.Calls += calls[n]
		total.Errors += errs[n]
		all = append(all, lat[n]...)
	}
	total.PerSec = float64(total.Calls) / secs
	total.Latency = latencyOf(all)
	return append(out, total)
}

func routeName(op history.Op) string {
	name := string(op.Route)
	if op.Route == history.Effect {
		var c protocol.EffectCall
		var e struct{ Type string }
		if decode(op.Body, &c) == nil && decode(c.Request.Effect.Effect, &e) == nil {
			name += ":" + e.Type
		}
	}
	return name
}

// PrintRoutes writes the route table.
func PrintRoutes(w io.Writer, rs []RouteStats) {
	fmt.Fprintf(w, "%-28s %8s %7s %9s %9s %9s %9s %9s\n", "route", "calls", "errors", "calls/s", "p50 ms", "p95 ms", "p99 ms", "max ms")
	for _, r := range rs {
		fmt.Fprintf(w, "%-28s %8d %7d %9.1f %9s %9s %9s %9s\n", r.Route, r.Calls, r.Errors, r.PerSec, ms(r.P50), ms(r.P95), ms(r.P99), ms(r.Max))
	}
}

// wakeUp matches the questions the awaits returned with the instant each
// worker's harness logged posting it. Only awaits that were already
// waiting when the question was posted count. The harness logs after
// galley answered its post, and galley rings the doorbell before
// answering, so a figure can be a little short of the true wake-up; it is
// never inflated by the coordinator's own work.
func (m *mixed) wakeUp() Latency {
	if m.cfg.Data == "" {
		return Latency{}
	}
	posted := map[string]map[string]time.Time{}
	var ds []time.Duration
	for _, s := range m.wakes {
		q, ok := posted[s.handle]
		if !ok {
			q = questionTimes(m.logs[s.handle])
			posted[s.handle] = q
		}
		at, ok := q[s.question]
		if !ok {
			continue
		}
		p := m.c.rec.At(at)
		if s.awaitCall >= p || s.awaitReturn == history.Pending {
			continue
		}
		ds = append(ds, time.Duration(max(s.awaitReturn-p, 0)))
	}
	return latencyOf(ds)
}

// startUp is launch answered → the harness logged its agent started, for
// every launched worker whose harness log says so: process start-up, the
// worker API's self call, the workspace and the agent's own start.
func (m *mixed) startUp() Latency {
	if m.cfg.Data == "" {
		return Latency{}
	}
	var ds []time.Duration
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.ws {
		if w.handle == "" || w.answered.IsZero() {
			continue
		}
		at, ok := agentStarted(m.logs[w.handle])
		if ok {
			ds = append(ds, at.Sub(w.answered))
		}
	}
	return latencyOf(ds)
}

// harnessLogs finds every worker's harness log under a server's data
// directory: the local server's runtime keeps <data>/workers/<handle>/
// harness.log; the aws-local stack's ECS stand-in runs each task under
// <data>/aws-local/ecs/procs/workers/<task id>/, whose log lines name the
// worker's handle.
func harnessLogs(data string) map[string]string {
	out := map[string]string{}
	if data == "" {
		return out
	}
	local, _ := filepath.Glob(filepath.Join(data, "workers", "*", "harness.log"))
	for _, p := range local {
		out[filepath.Base(filepath.Dir(p))] = p
	}
	tasks, _ := filepath.Glob(filepath.Join(data, "aws-local", "ecs", "procs", "workers", "*", "harness.log"))
	for _, p := range tasks {
		if h := logWorker(p); h != "" {
			out[h] = p
		}
	}
	return out
}

// harnessLine is what the load generator reads of a harness log line.
type harnessLine struct {
	Time     time.Time `json:"time"`
	Msg      string    `json:"msg"`
	Question string    `json:"question"`
	Worker   string    `json:"worker"`
}

// scanHarnessLog calls fn with each line of the harness log (JSON lines) at
// path, in order, until fn answers false; a line that is not JSON comes as
// the zero line, and a file that cannot be read has none.
func scanHarnessLog(path string, fn func(harnessLine) bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line harnessLine
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			line = harnessLine{}
		}
		if !fn(line) {
			return
		}
	}
}

// logWorker is the worker handle the first lines of a harness log name.
func logWorker(path string) string {
	worker, n := "", 0
	scanHarnessLog(path, func(l harnessLine) bool {
		worker, n = l.Worker, n+1
		return worker == "" && n < 20
	})
	return worker
}

func agentStarted(path string) (at time.Time, ok bool) {
	scanHarnessLog(path, func(l harnessLine) bool {
		at, ok = l.Time, l.Msg == "agent started"
		return !ok
	})
	if !ok {
		return time.Time{}, false
	}
	return at, true
}

// questionTimes reads a harness log for the questions it posted.
func questionTimes(path string) map[string]time.Time {
	out := map[string]time.Time{}
	scanHarnessLog(path, func(l harnessLine) bool {
		if l.Msg == "question posted, awaiting the reply" && l.Question != "" {
			out[l.Question] = l.Time
		}
		return true
	})
	return out
}
