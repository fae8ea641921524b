package service

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// DefaultClockSkew bounds how far the clock that stamps a request's
// arrival (API Gateway's, or this process's wall clock) may run ahead of
// the one that stamps a lookup's promise; see Config.ClockSkew.
const DefaultClockSkew = time.Second

// Config is what one deployment serves: one house in one backend namespace.
type Config struct {
	House      string
	Backend    string
	Credential string // the binding's credential name

	// DefaultAgent runs launches that name no agent: "script", "claude" or
	// "codex".
	DefaultAgent string
	// Families are the agent families this deployment can start and so
	// declares in workerSelection ("claude", "codex").
	Families []string
	// Model says whether a launch can choose a model; Effort is
	// "unsupported", "with-model" or "always".
	Model  bool
	Effort string

	// AwaitCap bounds how long deliveries/await holds a call.
	AwaitCap time.Duration
	// Lease bounds how long one request may hold an effect key before a
	// retry may take it over.
	Lease time.Duration
	// ExclusiveStore says this process is the only one that writes the
	// store (the local server's bbolt file is locked to one process). A
	// claim left in flight by an earlier process is then certainly dead,
	// and a retry takes it over at once instead of waiting out its lease.
	ExclusiveStore bool
	// ClockSkew is the largest difference between the clocks that stamp a
	// request's arrival and a lookup's promise; 0 means DefaultClockSkew.
	// It is not 0 even on one machine: arrivals and promises are compared
	// as wall-clock times (a promise is stored, so it loses Go's monotonic
	// reading), and a wall clock that NTP slews or steps runs backwards
	// against the monotonic one by milliseconds or more.
	ClockSkew time.Duration
	// MaxWorkers bounds live workers; a launch beyond it is rate-limited.
	// 0 means no bound.
	MaxWorkers int
	// WorkerSecret signs worker credentials (see tokens.go).
	WorkerSecret []byte
	// PostBudget bounds what each worker posts to its mailbox, per process
	// (budget.go); zero fields take DefaultPostBudget's.
	PostBudget PostBudget
	// FinalReportGrace is how long after its own worker-done a worker may
	// still send its one final usage report (default 2 minutes).
	FinalReportGrace time.Duration
	// WorkspaceRoot is where isolated worktrees are made, one folder per
	// worktree handle (a local folder, or a mounted file system on AWS).
	WorkspaceRoot string
}

func (c *Config) setDefaults() {
	if c.Credential == "" {
		c.Credential = contract.DefaultCredential
	}
	if c.DefaultAgent == "" {
		c.DefaultAgent = "script"
	}
	if c.Effort == "" {
		c.Effort = "unsupported"
	}
	if c.AwaitCap <= 0 {
		c.AwaitCap = contract.AwaitCap
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = DefaultClockSkew
	}
	d := DefaultPostBudget
	for _, f := range []struct {
		v   *float64
		def float64
	}{
		{&c.PostBudget.Rows, d.Rows}, {&c.PostBudget.RowBurst, d.RowBurst},
		{&c.PostBudget.Bytes, d.Bytes}, {&c.PostBudget.ByteBurst, d.ByteBurst},
	} {
		if *f.v <= 0 {
			*f.v = f.def
		}
	}
	if c.FinalReportGrace <= 0 {
		c.FinalReportGrace = 2 * time.Minute
	}
}

// Service is galley's domain logic. Its methods are safe for concurrent use
// and, across processes, correct under any interleaving the store's
// conditional writes allow.
type Service struct {
	cfg     Config
	store   Store
	runtime Runtime
	git     GitHost
	bell    Doorbell
	wakes   WakeGranter
	clock   Clock
	log     *slog.Logger
	inboxes *inboxCache
	budgets *budgets
	events  EventRecorder
	// snapshots removes a released worktree's snapshot (nil: none kept).
	snapshots WorktreeSnapshots
	// parkedFiles forgets what parked workers saved (park.go).
	parkedFiles ParkedFiles
	// incarnation names this Service in the leases it takes, so that with
	// an exclusive store a lease of any other incarnation is known dead.
	incarnation string
	// drained ends when the server shuts down (Drain): no call waits on.
	drained context.Context
	drain   context.CancelFunc
}

// Option configures a Service.
type Option func(*Service)

func WithStore(s Store) Option       { return func(v *Service) { v.store = s } }
func WithRuntime(r Runtime) Option   { return func(v *Service) { v.runtime = r } }
func WithGitHost(g GitHost) Option   { return func(v *Service) { v.git = g } }
func WithDoorbell(d Doorbell) Option { return func(v *Service) { v.bell = d } }
func WithClock(c Clock) Option       { return func(v *Service) { v.clock = c } }

// WithWakeGranter sets how harnesses wait for their wake-ups (default:
// through galley, WakeGalley).
func WithWakeGranter(g WakeGranter) Option { return func(v *Service) { v.wakes = g } }

// WithEvents records what happens to each worker in its event log
// (package eventlog); without it nothing is recorded.
func WithEvents(r EventRecorder) Option { return func(v *Service) { v.events = r } }

// WithSnapshots removes each worktree's snapshot when the worktree is
// released; without it a snapshot stays until its store expires it.
func WithSnapshots(w WorktreeSnapshots) Option { return func(v *Service) { v.snapshots = w } }

func WithLogger(l *slog.Logger) Option {
	return func(v *Service) { v.log = l }
}

// New returns a Service; the store, runtime, git host and doorbell are
// required.
func New(cfg Config, opts ...Option) (*Service, error) {
	cfg.setDefaults()
	s := &Service{cfg: cfg, clock: SystemClock, log: slog.Default(),
		inboxes: newInboxCache(defaultInboxWorkers, defaultInboxBytes), incarnation: randomHex(8),
		budgets: newBudgets(cfg.PostBudget)}
	s.drained, s.drain = context.WithCancel(context.Background())
	for _, o := range opts {
		o(s)
	}
	switch {
	case s.store == nil:
		return nil, errors.New("service: no store")
	case s.runtime == nil:
		return nil, errors.New("service: no runtime")
	case s.git == nil:
		return nil, errors.New("service: no git host")
	case s.bell == nil:
		return nil, errors.New("service: no doorbell")
	case len(cfg.WorkerSecret) < 16:
		return nil, errors.New("service: worker secret shorter than 16 bytes")
	case cfg.House == "" || cfg.Backend == "":
		return nil, errors.New("service: house and backend are required")
	}
	if k, ok := s.bell.(topicKeeper); ok {
		k.KeepTopics(s.topicLive)
	}
	return s, nil
}

// Drain answers every held wait at once, as its deadline would, and every
// later one without holding: the process is shutting down, and a long
// poll held to its deadline would hold the shutdown as long.
// deliveries/await answers what next would (empty when nothing waits); a
// worker's inbox poll answers what it has.
func (s *Service) Drain() { s.drain() }

// topicKeeper is a doorbell whose idle queues are swept (the SQS doorbell):
// it asks the service whether a topic's owner still lives before it
// deletes the topic's queue.
type topicKeeper interface {
	KeepTopics(func(ctx context.Context, topic string) (bool, error))
}

// topicLive reports whether topic belongs to a worker that still lives (it
// exists, is not released and has not settled): its harness may be
// waiting on the topic's queue, however long since it was last used. Other
// topics (runs) are judged by their age.
func (s *Service) topicLive(ctx context.Context, topic string) (bool, error) {
	handle, ok := strings.CutPrefix(topic, "inbox:")
	if !ok {
		return false, nil
	}
	_, _, err := s.liveWorker(ctx, handle)
	switch {
	case err == nil:
		return true, nil
	case galleyerr.Is(galleyerr.Invalid, err):
		return false, nil
	}
	return false, err
}

// Config returns the service's configuration.
func (s *Service) Config() Config { return s.cfg }

// servedCapabilities is every capability galley really serves.
var servedCapabilities = []string{
	"worker.launch_isolated",
	"worker.launch_readiness",
	"worker.status_and_outcome",
	"worker.messaging",
	"worker.cancel",
	"worker.deliveries",
	"run.transfer",
	"resource.inventory",
	"resource.release",
	"usage.attribution",
	"effect.lookup",
	"effect.idempotent_requests",
}

// Descriptor answers GET /v1/descriptor.
func (s *Service) Descriptor() protocol.Descriptor {
	caps := make(map[string]string, len(servedCapabilities))
	for _, c := range servedCapabilities {
		caps[c] = "supported"
	}
	families := slices.Clone(s.cfg.Families)
	if families == nil {
		families = []string{}
	}
	return protocol.Descriptor{
		Backend:      s.cfg.Backend,
		House:        s.cfg.House,
		Capabilities: caps,
		WorkerSelection: &protocol.WorkerSelection{
			Families: families,
			Model:    s.cfg.Model,
			Effort:   s.cfg.Effort,
		},
	}
}
