//go:build unix

package localproc

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/safepath"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/workspace"
)

// DefaultGrace is how long Stop lets a harness end after SIGTERM before it
// kills the worker's process group.
const DefaultGrace = 5 * time.Second

// DefaultNice is the scheduling niceness workers run at. On one machine the
// workers (agents, their tools, git) and the API server share the CPU; a
// niced worker yields it to the server, which answers kitchn and wakes
// waiting coordinators, as a worker on AWS never competes with the API.
const DefaultNice = 10

// stopPoll is how often a pending stop checks whether the group has ended,
// and reapEvery how often the reaper looks when no SIGCHLD arrives.
const (
	stopPoll  = 50 * time.Millisecond
	reapEvery = time.Second
)

// Runtime starts, stops and observes workers as local processes. It is safe
// for concurrent use.
type Runtime struct {
	dir        string // absolute data directory
	harness    string // absolute path of the harness binary
	endpoint   string
	repository string
	passEnv    []string
	extraEnv   map[string]string
	log        *slog.Logger
	clock      service.Clock
	grace      time.Duration
	nice       int
	onExit     func(handle string)
	logLimit   int64  // each harness.log's budget (WithLogLimit)
	optErr     string // the first bad option, reported by New
	// enforcement is how agents are confined, chosen at New (confine).
	// network is how their network is.
	network     harness.NetworkEnforcement
	enforcement harness.Enforcement

	sigchld chan os.Signal
	done    chan struct{}
	wg      sync.WaitGroup // the reaper and pending stops

	mu      sync.Mutex
	closed  bool
	workers map[string]*worker // handles this Runtime has started or looked up
}

// worker is what the runtime knows of one harness process. pid and start
// never change; exited and stopping only ever become true.
type worker struct {
	handle   string
	pid      int
	start    string // the process's start time, against pid reuse
	child    bool   // started by this Runtime, which reaps it
	exited   bool
	stopping bool
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithDir sets the data directory (required). It holds workers/ and
// workspaces/.
func WithDir(dir string) Option { return func(r *Runtime) { r.dir = dir } }

// WithHarness sets the harness binary (required), galley-worker in
// production.
func WithHarness(path string) Option { return func(r *Runtime) { r.harness = path } }

// WithEndpoint sets the worker API's base URL the harness calls (required).
func WithEndpoint(url string) Option { return func(r *Runtime) { r.endpoint = url } }

// WithRepository sets the repository URL given to every harness.
func WithRepository(url string) Option { return func(r *Runtime) { r.repository = url } }

// WithPassEnv passes the server's variables of these names through to every
// harness, such as an agent provider's key. GALLEY_ names are refused: the
// server's own settings, its kitchn token among them, use that prefix.
func WithPassEnv(names ...string) Option {
	return func(r *Runtime) {
		for _, n := range names {
			if msg := checkEnvName(n, true); msg != "" && r.optErr == "" {
				r.optErr = msg
			}
		}
		r.passEnv = append(r.passEnv, names...)
	}
}

// WithEnv gives every harness the variable name=value: a provider key the
// server resolved by name, or a harness setting such as
// GALLEY_AGENT_BIN_DIR. Values are never logged. The variables the runtime
// sets per worker are refused.
func WithEnv(name, value string) Option {
	return func(r *Runtime) {
		if msg := checkEnvName(name, false); msg != "" && r.optErr == "" {
			r.optErr = msg
		}
		if strings.ContainsRune(value, 0) && r.optErr == "" {
			r.optErr = "environment variable " + name + " has a NUL in its value"
		}
		if r.extraEnv == nil {
			r.extraEnv = map[string]string{}
		}
		r.extraEnv[name] = value
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runtime) { r.log = l } }

// WithClock sets the clock that stamps starts and stop deadlines.
func WithClock(c service.Clock) Option { return func(r *Runtime) { r.clock = c } }

// WithOnExit is called once, in its own goroutine, when a worker's harness
// is seen to have ended, however it ended: the service settles a worker
// whose harness died without reporting (a SIGKILL, a crash).
func WithOnExit(f func(handle string)) Option { return func(r *Runtime) { r.onExit = f } }

// WithLogLimit sets each worker's log budget in bytes (default
// harness.DefaultLogLimit): the harness caps what it writes to its log
// file (contract.EnvLogLimit), and a log found past it when its harness
// ends (written around the harness, by an unconfined agent) is cut to it.
func WithLogLimit(n int64) Option { return func(r *Runtime) { r.logLimit = n } }

// WithGrace sets how long Stop waits after SIGTERM before SIGKILL.
func WithGrace(d time.Duration) Option { return func(r *Runtime) { r.grace = d } }

// WithNice sets the niceness workers run at (DefaultNice unless set; 0
// leaves them at the server's own).
func WithNice(n int) Option { return func(r *Runtime) { r.nice = n } }

// New returns a Runtime over its data directory. It finishes the stops an
// earlier server left pending, and starts a reaper for the harnesses it
// starts; Close ends the reaper and leaves the workers running.
func New(opts ...Option) (*Runtime, error) {
	const op = galleyerr.Op("localproc.new")
	r := &Runtime{
		log:      slog.New(slog.DiscardHandler),
		clock:    service.SystemClock,
		grace:    DefaultGrace,
		nice:     DefaultNice,
		logLimit: harness.DefaultLogLimit,
		sigchld:  make(chan os.Signal, 1),
		done:     make(chan struct{}),
		workers:  map[string]*worker{},
	}
	for _, o := range opts {
		o(r)
	}
	switch {
	case r.optErr != "":
		return nil, galleyerr.E(op, galleyerr.Invalid, r.optErr)
	case r.dir == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "no data directory")
	case r.harness == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "no harness binary")
	case r.endpoint == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "no worker API endpoint")
	case r.grace <= 0:
		return nil, galleyerr.E(op, galleyerr.Invalid, "the stop grace must be positive")
	case r.log == nil || r.clock == nil:
		return nil, galleyerr.E(op, galleyerr.Invalid, "nil logger or clock")
	case r.logLimit < 4096:
		return nil, galleyerr.E(op, galleyerr.Invalid, "the worker log budget must be at least 4096 bytes")
	}
	var err error
	if r.dir, err = filepath.Abs(r.dir); err != nil {
		return nil, galleyerr.E(op, err)
	}
	// The harness runs in its worker's folder, so a relative path would
	// resolve there: make it absolute now.
	if r.harness, err = exec.LookPath(r.harness); err != nil {
		return nil, galleyerr.E(op, galleyerr.Invalid, "harness binary not found", err)
	}
	if r.harness, err = filepath.Abs(r.harness); err != nil {
		return nil, galleyerr.E(op, err)
	}
	for _, d := range []string{r.workersDir(), r.WorkspacesDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, galleyerr.E(op, err)
		}
	}
	r.confine()
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	r.wg.Add(1)
	go r.reapLoop()
	r.resumeStops()
	return r, nil
}

// WorkspacesDir is the folder where workspaces live: every
// spec.WorkspacePath lies inside it, and RemoveWorkspace deletes nothing
// outside it.
func (r *Runtime) WorkspacesDir() string { return filepath.Join(r.dir, "workspaces") }

func (r *Runtime) workersDir() string        { return filepath.Join(r.dir, "workers") }
func (r *Runtime) workerDir(h string) string { return filepath.Join(r.workersDir(), h) }
func (r *Runtime) tokenFile(h string) string { return filepath.Join(r.workerDir(h), "token") }
func (r *Runtime) stopFile(h string) string  { return filepath.Join(r.workerDir(h), "stop") }
func (r *Runtime) pidFile(h string) string   { return filepath.Join(r.workerDir(h), "pid") }
func (r *Runtime) pidStartFile(h string) string {
	return filepath.Join(r.workerDir(h), "pidstart")
}

// handleRE keeps a handle one safe path element.
var handleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkHandle(op galleyerr.Op, h string) error {
	if !handleRE.MatchString(h) {
		return galleyerr.E(op, galleyerr.Invalid, "worker handle "+strconv.Quote(h)+" is not letters, digits, '.', '_' or '-'")
	}
	return nil
}

// Start starts the harness for spec once: a second Start of a handle this
// data directory has seen (running, exited, or started by an earlier
// server) does nothing, except to finish a start an earlier server claimed
// and died before spawning. It returns as soon as the process runs.
func (r *Runtime) Start(ctx context.Context, spec service.WorkerSpec) error {
	const op = galleyerr.Op("localproc.start")
	if err := checkHandle(op, spec.Handle); err != nil {
		return err
	}
	if spec.Token == "" {
		return galleyerr.E(op, galleyerr.Invalid, "no worker token")
	}
	// RemoveWorkspace deletes only inside WorkspacesDir: a worktree
	// elsewhere could never be released.
	if _, ok := inside(r.WorkspacesDir(), filepath.Clean(spec.WorkspacePath)); !filepath.IsAbs(spec.WorkspacePath) || !ok {
		return galleyerr.E(op, galleyerr.Invalid, "workspace path "+strconv.Quote(spec.WorkspacePath)+" is not inside "+r.WorkspacesDir())
	}
	if err := ctx.Err(); err != nil {
		return galleyerr.E(op, galleyerr.Unavailable, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return galleyerr.E(op, galleyerr.Unavailable, "runtime closed")
	}
	if _, ok := r.workers[spec.Handle]; ok {
		return nil
	}
	// Creating the worker's folder is the claim: it succeeds once per data
	// directory, whichever server process tries.
	wdir := r.workerDir(spec.Handle)
	if err := os.Mkdir(wdir, 0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return galleyerr.E(op, err)
		}
		if !r.startInterrupted(spec.Handle) {
			return nil
		}
		// A server died between the claim and the spawn: nothing ever ran,
		// and a launch retried against its record (still starting) would
		// wait for ever. Give the claim back, as a failed spawn does, and
		// claim again.
		r.log.Warn("finishing a start an earlier server claimed but never ran", "handle", spec.Handle)
		if err := os.RemoveAll(wdir); err != nil {
			return galleyerr.E(op, err)
		}
		if err := os.Mkdir(wdir, 0o700); err != nil {
			return galleyerr.E(op, err)
		}
	}
	w, err := r.spawn(spec)
	if err != nil {
		// Nothing runs: give the claim back so that a retry can start it.
		if rmErr := os.RemoveAll(wdir); rmErr != nil {
			r.log.Error("cannot release a failed start", "handle", spec.Handle, "err", rmErr)
		}
		return galleyerr.E(op, "cannot start the harness", err)
	}
	r.workers[spec.Handle] = w
	r.log.Info("worker started", "handle", spec.Handle, "pid", w.pid, "run", spec.Run, "task", spec.Task)
	return nil
}

// startInterrupted reports whether h's claimed folder is a start whose
// harness never ran: no pid start file (written right after the spawn), no
// pid file, no stop asked for, and no harness found by its environment (one
// spawned in the instant before its server died). It relies on one server
// at a time per data directory (the local server's store is locked to it)
// and on r.mu, so that no other start of h is under way.
func (r *Runtime) startInterrupted(h string) bool {
	for _, f := range []string{r.pidStartFile(h), r.pidFile(h), r.stopFile(h)} {
		if _, err := os.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	_, found := findLeaderByEnv(contract.EnvWorkerTokenFile + "=" + r.tokenFile(h))
	return !found
}

// meta is what meta.json records for operators.
type meta struct {
	Handle        string    `json:"handle"`
	Run           string    `json:"run,omitempty"`
	Task          string    `json:"task,omitempty"`
	Key           string    `json:"key,omitempty"`
	Branch        string    `json:"branch,omitempty"`
	Workspace     string    `json:"workspace,omitempty"`
	WorkspacePath string    `json:"workspacePath,omitempty"`
	Agent         string    `json:"agent,omitempty"`
	StartedAt     time.Time `json:"startedAt"`
}

// spawn writes the worker's files and starts its harness. On error no
// process of it runs.
func (r *Runtime) spawn(spec service.WorkerSpec) (*worker, error) {
	h := spec.Handle
	wdir := r.workerDir(h)
	if err := writeNew(r.tokenFile(h), []byte(spec.Token)); err != nil {
		return nil, err
	}
	m, err := json.MarshalIndent(meta{
		Handle: h, Run: spec.Run, Task: spec.Task, Key: spec.Key, Branch: spec.Branch,
		Workspace: spec.Workspace, WorkspacePath: spec.WorkspacePath, Agent: spec.Agent,
		StartedAt: r.clock.Now().UTC(),
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeNew(filepath.Join(wdir, "meta.json"), append(m, '\n')); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(r.logFile(h), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the harness holds its own copy

	// Not exec.CommandContext: the worker must outlive the request.
	cmd := exec.Command(r.harness)
	cmd.Env = r.harnessEnv(h, r.tokenFile(h), spec.WorkspacePath, spec.Branch)
	cmd.Dir = wdir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if r.nice != 0 {
		// The whole group: a process the harness already forked is niced
		// too, and every later one inherits the harness's niceness.
		if err := syscall.Setpriority(syscall.PRIO_PGRP, cmd.Process.Pid, r.nice); err != nil {
			r.log.Warn("could not lower the worker's priority", "handle", h, "err", err)
		}
	}
	w := &worker{handle: h, pid: cmd.Process.Pid, child: true}
	// The reaper waits by pid, so no goroutine blocks on a worker that
	// outlives Close.
	_ = cmd.Process.Release()
	// Our unreaped child: its stat is readable even if it already ended.
	if info, ok := procStat(w.pid); ok {
		w.start = info.start
	}
	// pidstart first: whoever finds pid finds its start time too.
	err = writeAtomic(r.pidStartFile(h), []byte(w.start+"\n"))
	if err == nil {
		err = writeAtomic(r.pidFile(h), []byte(strconv.Itoa(w.pid)+"\n"))
	}
	if err != nil {
		// Unrecorded, it could not be found again: take it back.
		_ = syscall.Kill(-w.pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(w.pid, &ws, 0, nil)
		return nil, err
	}
	return w, nil
}

// Liveness reports Live while the harness process runs, Exited once it has
// ended, and Unknown for a handle this data directory never started.
func (r *Runtime) Liveness(ctx context.Context, handle string) (service.Liveness, error) {
	const op = galleyerr.Op("localproc.liveness")
	if err := checkHandle(op, handle); err != nil {
		return service.LivenessUnknown, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w, err := r.lookupLocked(handle)
	switch {
	case err != nil:
		return service.LivenessUnknown, galleyerr.E(op, err)
	case w == nil:
		return service.LivenessUnknown, nil
	case r.runningLocked(w):
		return service.LivenessLive, nil
	}
	return service.LivenessExited, nil
}

// Livenesses answers Liveness for many handles under one hold of the lock,
// mostly from memory: a harness this Runtime started is its child, whose
// end the reaper learns of (SIGCHLD, or its tick) and records, so it is
// live until recorded exited; an exit once seen is final. Only a harness
// this Runtime did not start (an earlier server's) is verified with its
// /proc record each time, as nothing would tell of its end, and a handle
// not yet in memory is read from disk once. A malformed handle is Unknown.
// After Close, with no reaper, children are checked as Liveness does.
func (r *Runtime) Livenesses(ctx context.Context, handles []string) (map[string]service.Liveness, error) {
	const op = galleyerr.Op("localproc.livenesses")
	out := make(map[string]service.Liveness, len(handles))
	var first error
	failed := 0
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range handles {
		if !handleRE.MatchString(h) {
			out[h] = service.LivenessUnknown
			continue
		}
		w, err := r.lookupLocked(h)
		switch {
		case err != nil:
			// Left out of the map: unverifiable.
			if failed++; first == nil {
				first = err
			}
		case w == nil:
			out[h] = service.LivenessUnknown
		case w.exited:
			out[h] = service.LivenessExited
		case w.child && !r.closed:
			out[h] = service.LivenessLive
		case r.runningLocked(w):
			out[h] = service.LivenessLive
		default:
			out[h] = service.LivenessExited
		}
	}
	if failed > 0 {
		return out, galleyerr.E(op, strconv.Itoa(failed)+" workers unreadable", first)
	}
	return out, nil
}

// Stop sends SIGTERM to the worker's process group and returns; SIGKILL
// follows after the grace unless the group has ended. The deadline is
// recorded first, so a server that restarts meanwhile still kills it.
// Stopping a stopped, exited or unknown worker succeeds.
func (r *Runtime) Stop(ctx context.Context, handle string) error {
	const op = galleyerr.Op("localproc.stop")
	if err := checkHandle(op, handle); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return galleyerr.E(op, galleyerr.Unavailable, "runtime closed")
	}
	w, err := r.lookupLocked(handle)
	if err != nil {
		return galleyerr.E(op, err)
	}
	if w == nil || w.stopping || !r.groupAliveLocked(w) {
		return nil
	}
	deadline, err := r.stopDeadline(handle)
	if err != nil {
		return galleyerr.E(op, err)
	}
	w.stopping = true
	r.signalLocked(w, syscall.SIGTERM)
	r.log.Info("worker stopping", "handle", handle, "pid", w.pid, "deadline", deadline)
	r.wg.Add(1)
	go r.finishStop(w, deadline.Sub(r.clock.Now()))
	return nil
}

// stopRecord is the stop file's content.
type stopRecord struct {
	Requested time.Time `json:"requested"`
	Deadline  time.Time `json:"deadline"` // when SIGKILL is due
}

// stopDeadline returns the recorded SIGKILL deadline, recording one a grace
// from now if none was.
func (r *Runtime) stopDeadline(handle string) (time.Time, error) {
	if rec, ok := r.readStop(handle); ok {
		return rec.Deadline, nil
	}
	now := r.clock.Now().UTC()
	rec := stopRecord{Requested: now, Deadline: now.Add(r.grace)}
	b, err := json.Marshal(rec)
	if err != nil {
		return time.Time{}, err
	}
	return rec.Deadline, writeAtomic(r.stopFile(handle), append(b, '\n'))
}

func (r *Runtime) readStop(handle string) (stopRecord, bool) {
	var rec stopRecord
	b, err := os.ReadFile(r.stopFile(handle))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return stopRecord{}, false
	}
	return rec, true
}

// finishStop waits for w's group to end, or kills it at the deadline.
func (r *Runtime) finishStop(w *worker, wait time.Duration) {
	defer r.wg.Done()
	kill := time.NewTimer(max(wait, 0))
	defer kill.Stop()
	poll := time.NewTicker(stopPoll)
	defer poll.Stop()
	for {
		select {
		case <-poll.C:
			r.mu.Lock()
			alive := r.groupAliveLocked(w)
			r.mu.Unlock()
			if !alive {
				r.log.Info("worker stopped", "handle", w.handle)
				return
			}
		case <-kill.C:
			r.mu.Lock()
			r.signalLocked(w, syscall.SIGKILL)
			r.mu.Unlock()
			r.log.Info("worker killed after its grace", "handle", w.handle)
			return
		}
	}
}

// resumeStops takes over the stops an earlier server recorded but may not
// have finished.
func (r *Runtime) resumeStops() {
	ents, err := os.ReadDir(r.workersDir())
	if err != nil {
		r.log.Error("cannot list workers", "err", err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range ents {
		h := e.Name()
		rec, ok := r.readStop(h)
		if !ok || !handleRE.MatchString(h) {
			continue
		}
		w, err := r.lookupLocked(h)
		if err != nil || w == nil || !r.groupAliveLocked(w) {
			continue
		}
		w.stopping = true
		r.log.Info("resuming a stop", "handle", h, "deadline", rec.Deadline)
		r.wg.Add(1)
		go r.finishStop(w, rec.Deadline.Sub(r.clock.Now()))
	}
}

// WatchInherited watches, every interval until Close, the harnesses an
// earlier server of this data directory started: one that ends (or had
// ended while no server ran) is noticed as if this runtime had started it,
// so its WithOnExit callback settles a worker whose harness ended without
// a report. Only workers whose token file is still there are watched: it
// is deleted once an exit has been noticed, by this runtime or an earlier
// one. Call it once the callback can act (the server's service exists).
func (r *Runtime) WatchInherited(interval time.Duration) {
	ents, err := os.ReadDir(r.workersDir())
	if err != nil {
		r.log.Error("cannot list workers", "err", err)
		return
	}
	var watched []*worker
	r.mu.Lock()
	for _, e := range ents {
		h := e.Name()
		if !handleRE.MatchString(h) {
			continue
		}
		if _, err := os.Stat(r.tokenFile(h)); err != nil {
			continue
		}
		if w, err := r.lookupLocked(h); err == nil && w != nil && !w.child && !w.stopping {
			watched = append(watched, w)
		}
	}
	r.mu.Unlock()
	if len(watched) == 0 {
		return
	}
	r.log.Info("watching the harnesses an earlier server started", "workers", len(watched))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for len(watched) > 0 {
			r.mu.Lock()
			live := watched[:0]
			for _, w := range watched {
				if r.runningLocked(w) {
					live = append(live, w)
				}
			}
			watched = live
			r.mu.Unlock()
			select {
			case <-r.done:
				return
			case <-t.C:
			}
		}
	}()
}

// lookupLocked returns what is known of handle: from memory, else from its
// folder on disk; nil if this data directory never started it.
func (r *Runtime) lookupLocked(h string) (*worker, error) {
	if w, ok := r.workers[h]; ok {
		return w, nil
	}
	if _, err := os.Stat(r.workerDir(h)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	b, err := os.ReadFile(r.pidFile(h))
	if errors.Is(err, fs.ErrNotExist) {
		return r.findUnrecorded(h)
	}
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, galleyerr.Errorf(galleyerr.Other, "worker %s has a bad pid file", h)
	}
	start, err := os.ReadFile(r.pidStartFile(h))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	w := &worker{handle: h, pid: pid, start: strings.TrimSpace(string(start))}
	r.workers[h] = w
	return w, nil
}

// findUnrecorded handles a claimed worker without a pid file: a server died
// between starting the harness and recording it. The harness, if it runs, is
// the group leader whose environment names this worker's token file; it is
// recorded now. If none runs, the worker reads as exited, and is not
// remembered, so a later look finds a harness that appears meanwhile (a
// Start that finishes a start interrupted before its spawn).
func (r *Runtime) findUnrecorded(h string) (*worker, error) {
	pid, ok := findLeaderByEnv(contract.EnvWorkerTokenFile + "=" + r.tokenFile(h))
	if !ok {
		return &worker{handle: h, exited: true}, nil
	}
	info, _ := procStat(pid)
	w := &worker{handle: h, pid: pid, start: info.start}
	err := writeAtomic(r.pidStartFile(h), []byte(w.start+"\n"))
	if err == nil {
		err = writeAtomic(r.pidFile(h), []byte(strconv.Itoa(pid)+"\n"))
	}
	if err != nil {
		return nil, err
	}
	r.log.Warn("found an unrecorded worker", "handle", h, "pid", pid)
	r.workers[h] = w
	return w, nil
}

// runningLocked reports whether w's harness process runs, reaping it if it
// ended as a child of this process.
func (r *Runtime) runningLocked(w *worker) bool {
	if w.exited {
		return false
	}
	if w.child {
		res, ws := reap(w.pid)
		switch res {
		case reapRunning:
			return true
		case reapExited:
			r.recordExit(w, describe(ws))
		}
		r.markExited(w)
		return false
	}
	info, ok := procStat(w.pid)
	if !ok || (w.start != "" && info.start != w.start) {
		r.markExited(w)
		return false
	}
	if info.zombie {
		// Ended; if an earlier Runtime of this very process started it,
		// reap it here. The start time matched, so the pid is the worker's.
		if res, ws := reap(w.pid); res == reapExited {
			r.recordExit(w, describe(ws))
		}
		r.markExited(w)
		return false
	}
	return true
}

// markExited notes that w's harness has ended for good, and deletes its
// token file: the credential should not outlive its worker on disk.
func (r *Runtime) markExited(w *worker) {
	if !w.exited && r.onExit != nil {
		// Outside the lock: the callback may call back into the runtime.
		go r.onExit(w.handle)
	}
	w.exited = true
	if err := os.Remove(r.tokenFile(w.handle)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Error("cannot delete a worker's token file", "handle", w.handle, "err", err)
	}
	if err := cutLog(r.logFile(w.handle), r.logLimit); err != nil {
		r.log.Error("cannot cut a worker's log to its budget", "handle", w.handle, "err", err)
	}
}

// logFile is the harness's stdout and stderr.
func (r *Runtime) logFile(h string) string { return filepath.Join(r.workerDir(h), "harness.log") }

// cutLog cuts a log past limit to it, ending with harness.CutLine. The
// harness keeps its own log within the budget; only an agent that wrote
// around it (one left unconfined, which can open the harness's stderr)
// leaves more, and only until its harness ends.
func cutLog(path string, limit int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= limit {
		return err
	}
	line := harness.CutLine(limit)
	keep := limit - int64(len(line))
	if err := f.Truncate(keep); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(line), keep); err != nil {
		return err
	}
	return f.Close()
}

// recordExit notes how the harness ended, for operators.
func (r *Runtime) recordExit(w *worker, how string) {
	if err := writeAtomic(filepath.Join(r.workerDir(w.handle), "exit"), []byte(how+"\n")); err != nil {
		r.log.Error("cannot record a worker's exit", "handle", w.handle, "err", err)
	}
	r.log.Info("worker exited", "handle", w.handle, "pid", w.pid, "how", how)
}

// pidReused reports whether w's pid now names another process: then neither
// it nor the group of that number is the worker's.
func pidReused(w *worker) bool {
	info, ok := procStat(w.pid)
	return ok && w.start != "" && info.start != w.start
}

// groupAliveLocked reports whether any process of w's group runs: the
// harness, or what it left behind in its group.
func (r *Runtime) groupAliveLocked(w *worker) bool {
	if w.pid == 0 {
		return false
	}
	if r.runningLocked(w) {
		return true
	}
	return !pidReused(w) && groupExists(w.pid)
}

// signalLocked signals w's process group, unless its pid was reused.
func (r *Runtime) signalLocked(w *worker, sig syscall.Signal) {
	if w.pid == 0 || pidReused(w) {
		return
	}
	if err := syscall.Kill(-w.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Error("cannot signal a worker", "handle", w.handle, "signal", sig.String(), "err", err)
	}
}

// reapLoop reaps this Runtime's harnesses as they end, so none lingers as a
// zombie when nobody asks for its liveness.
func (r *Runtime) reapLoop() {
	defer r.wg.Done()
	t := time.NewTicker(reapEvery)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-r.sigchld:
		case <-t.C:
		}
		r.mu.Lock()
		for _, w := range r.workers {
			if w.child && !w.exited {
				r.runningLocked(w)
			}
		}
		r.mu.Unlock()
	}
}

// RemoveWorkspace deletes the worktree at path, which must lie inside
// WorkspacesDir (even through symbolic links); removing a missing one
// succeeds. It never touches a branch.
func (r *Runtime) RemoveWorkspace(ctx context.Context, handle, path string) error {
	const op = galleyerr.Op("localproc.remove-workspace")
	root := r.WorkspacesDir()
	refuse := galleyerr.E(op, galleyerr.Invalid, "workspace path "+strconv.Quote(path)+" is not inside "+root)
	if !filepath.IsAbs(path) {
		return refuse
	}
	rel, ok := inside(root, filepath.Clean(path))
	if !ok {
		return refuse
	}
	// A symbolic link on the way could lead out of the folder: compare the
	// real parent with the real root.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return galleyerr.E(op, err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Join(root, filepath.Dir(rel)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return galleyerr.E(op, err)
	}
	if _, ok := inside(realRoot, filepath.Join(parent, filepath.Base(rel))); !ok {
		return refuse
	}
	// safepath follows no link beneath the folder, even one that changes
	// meanwhile (a link is removed as a link).
	rt, err := safepath.Open(root)
	if err != nil {
		return galleyerr.E(op, err)
	}
	defer rt.Close()
	if err := rt.RemoveAll(filepath.ToSlash(rel)); err != nil {
		return galleyerr.E(op, err)
	}
	if err := rt.RemoveAll(filepath.ToSlash(workspace.NotReusableMark(rel))); err != nil {
		return galleyerr.E(op, err)
	}
	r.log.Info("workspace removed", "handle", handle, "path", path)
	return nil
}

// inside returns p relative to root if p lies strictly inside root.
func inside(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// Close ends the reaper and waits for pending stops to finish (at most a
// grace). It leaves workers running: a server restart must not stop them.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	signal.Stop(r.sigchld)
	r.wg.Wait()
	return nil
}

// Handles lists the handles this data directory has started, for operators
// and tests.
func (r *Runtime) Handles() ([]string, error) {
	ents, err := os.ReadDir(r.workersDir())
	if err != nil {
		return nil, galleyerr.E(galleyerr.Op("localproc.handles"), err)
	}
	var hs []string
	for _, e := range ents {
		if e.IsDir() && handleRE.MatchString(e.Name()) {
			hs = append(hs, e.Name())
		}
	}
	return hs, nil
}

// writeNew creates name with mode 600, failing if it exists.
func writeNew(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeAtomic replaces name, so that a reader sees the old or the new
// content, never part of it.
func writeAtomic(name string, data []byte) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
