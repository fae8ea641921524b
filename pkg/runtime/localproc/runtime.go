//go:build unix

package localproc

import (
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

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/service"
)

// DefaultGrace is how long Stop lets a harness end after SIGTERM before it
// kills the worker's process group.
const DefaultGrace = 5 * time.Second

// DefaultNice is the scheduling niceness workers run at. On one machine the
// workers (agents, their tools, git) and the API server share the CPU; a
// niced worker yields it to the server, which answers kitchn and wakes
// waiting coordinators, as a worker on AWS never competes with the API.
const DefaultNice = 10

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

// handleRE keeps a handle one safe path element.
var handleRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkHandle(op galleyerr.Op, h string) error {
	if !handleRE.MatchString(h) {
		return galleyerr.E(op, galleyerr.Invalid, "worker handle "+strconv.Quote(h)+" is not letters, digits, '.', '_' or '-'")
	}
	return nil
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
