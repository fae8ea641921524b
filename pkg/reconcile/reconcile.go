// Package reconcile settles workers from ECS "Task State Change" events,
// as EventBridge delivers them to the reconciler function, and keeps house
// on EventBridge's 5-minute housekeeping "Scheduled Event": a worker whose
// task stopped without a report settles failed, and its coordinator gets a
// worker-done row saying why; a task that still runs for a worker that
// already settled (a cancel that raced the launch) is stopped; and a
// cleanup a record still owes (a stop that failed, a worktree removal
// whose task failed to start) is done again until it is done.
//
// Every housekeeping tick emits the worker gauges the alarms read
// (LiveWorkers and StuckWorkers, package metrics) as an embedded metric
// format line; the tick scheduled in an hour's first tick period also
// sweeps the idle doorbell queues, so about once an hour. Whether a tick
// sweeps follows from the time EventBridge scheduled it, not from when it
// arrives: a redelivered tick decides as the first copy did, and an hour
// whose sweeping tick was lost leaves its work to the next hour's.
//
// Events arrive late, twice, concurrently and out of order. The reconciler
// is safe under all of that because it acts on facts that never revert: a
// STOPPED task never runs again, and a settled worker never changes (the
// service refuses to move it). Only a STOPPED event can settle; an earlier
// status arriving after it is stale by its version and changes nothing. Two
// copies of the STOPPED event race for one claim record in the store, so
// the worker-done row is posted once.
package reconcile

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/metrics"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/store"
)

// Settler settles a worker whose compute ended without a report: it posts
// the worker-done row (outcome failed, with the reason) and settles the
// worker, unless it settled already. *service.Service implements it.
type Settler interface {
	WorkerExited(ctx context.Context, handle string, code int, reason string) error
}

// Store is what the reconciler reads and claims in.
type Store interface {
	GetResource(ctx context.Context, kind, handle string) (store.Resource, store.Version, error)
	GetEffect(ctx context.Context, key string) (store.Effect, store.Version, error)
	PutEffect(ctx context.Context, e store.Effect, prev store.Version) (store.Version, error)
}

// Stopper stops one task by its ARN; stopping a stopped task succeeds.
// *ecsrt.Runtime implements it.
type Stopper interface {
	StopTask(ctx context.Context, taskARN string) error
}

// Sweeper deletes the doorbell queues idle for longer than idle and says
// how many it deleted. *sqsbell.Bell implements it.
type Sweeper interface {
	Sweep(ctx context.Context, idle time.Duration) (int, error)
}

// LostSettler settles the workers whose compute is gone without a
// settle (a lost STOPPED event). *service.Service implements it.
type LostSettler interface {
	SettleLost(ctx context.Context) (int, error)
}

// Cleaner does the cleanups the records still owe (a failed stop of a
// settled worker's task, a worktree removal whose task failed to start).
// *service.Service implements it.
type Cleaner interface {
	RetryCleanups(ctx context.Context) (int, error)
}

// Gauger counts the workers for the gauges: live, what the launch cap
// counts, and stuck, the live ones without a sign of life in time.
// *service.Service implements it.
type Gauger interface {
	WorkerGauges(ctx context.Context) (live, stuck int, err error)
}

// Scheduled events: what EventBridge sends for a schedule rule (the
// reconciler's housekeeping tick).
const (
	ScheduledSource     = "aws.events"
	ScheduledDetailType = "Scheduled Event"
)

// DefaultTick is the housekeeping schedule's period: the stack's
// rate(5 minutes).
const DefaultTick = 5 * time.Minute

// Outcome says what one event did.
type Outcome string

const (
	Ignored        Outcome = "ignored"         // not a galley worker's task, or no record of it
	Live           Outcome = "live"            // the task runs (or is on its way); nothing to do
	Stale          Outcome = "stale"           // older than a change already applied
	Settled        Outcome = "settled-failed"  // the worker settled failed, its coordinator told
	AlreadySettled Outcome = "already-settled" // the worker had settled; at most marked exited
	OrphanStopped  Outcome = "orphan-stopped"  // a task of a settled worker was stopped
)

// DefaultLease bounds how long one invocation holds a worker's claim
// before a retry may take it over (the reconciler function's timeout is
// 30 s).
const DefaultLease = 20 * time.Second

// Reconciler applies task state changes to workers.
type Reconciler struct {
	svc       Settler
	st        Store
	stop      Stopper
	container string
	sweeper   Sweeper
	idle      time.Duration
	tick      time.Duration
	gauger    Gauger
	lost      LostSettler
	cleaner   Cleaner
	house     string
	out       io.Writer
	gauges    *metrics.Writer
	lease     time.Duration
	now       func() time.Time
	log       *slog.Logger
	events    EventRecorder
}

// EventRecorder keeps the workers' event logs (package eventlog's
// Recorder): Record never blocks nor fails.
type EventRecorder interface {
	Record(worker string, e store.Event)
}

// WithEvents records each worker task's start (RUNNING) and stop
// (STOPPED, with the stop code, ECS's reason and the exit code) in the
// worker's event log. A redelivered event is recorded again, with the
// same event id field.
func WithEvents(r EventRecorder) Option { return func(rc *Reconciler) { rc.events = r } }

// Option configures a Reconciler.
type Option func(*Reconciler)

// WithStopper lets the reconciler stop a task that runs for a settled
// worker; without it such a task is only logged.
func WithStopper(s Stopper) Option { return func(r *Reconciler) { r.stop = s } }

// WithContainer names the worker container whose exit code the report
// gives (default "worker").
func WithContainer(name string) Option { return func(r *Reconciler) { r.container = name } }

// WithSweeper has a scheduled event sweep the doorbell queues idle for
// longer than idle; without it a scheduled event is only logged.
func WithSweeper(s Sweeper, idle time.Duration) Option {
	return func(r *Reconciler) { r.sweeper, r.idle = s, idle }
}

// WithTick tells the reconciler its housekeeping schedule's period
// (default DefaultTick): the sweep runs on the tick scheduled in each
// hour's first period. A period of an hour or more sweeps on every tick.
func WithTick(d time.Duration) Option { return func(r *Reconciler) { r.tick = d } }

// WithGauges has every housekeeping tick emit g's worker gauges for house
// (dimension House); without it a tick emits no metric.
func WithGauges(g Gauger, house string) Option {
	return func(r *Reconciler) { r.gauger, r.house = g, house }
}

// WithLostSettler has every housekeeping tick settle the workers whose
// compute is gone without a settle, so a lost STOPPED event needs no
// manual redrive.
func WithLostSettler(l LostSettler) Option { return func(r *Reconciler) { r.lost = l } }

// WithCleaner has every housekeeping tick do the cleanups the records
// still owe, so a failed one is retried without anyone asking again.
func WithCleaner(c Cleaner) Option { return func(r *Reconciler) { r.cleaner = c } }

// WithMetrics sets where the gauges' embedded metric format lines go
// (default os.Stdout, where Lambda hands them to CloudWatch Logs).
func WithMetrics(w io.Writer) Option { return func(r *Reconciler) { r.out = w } }

// WithLease sets the claim's lease.
func WithLease(d time.Duration) Option { return func(r *Reconciler) { r.lease = d } }

// WithClock sets the clock.
func WithClock(now func() time.Time) Option { return func(r *Reconciler) { r.now = now } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(r *Reconciler) { r.log = l } }

// New returns a Reconciler settling through svc and claiming in st.
func New(svc Settler, st Store, opts ...Option) *Reconciler {
	r := &Reconciler{svc: svc, st: st, container: "worker", lease: DefaultLease, now: time.Now,
		tick: DefaultTick, out: os.Stdout, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(r)
	}
	if r.gauger != nil {
		r.gauges = metrics.NewWriter(r.out, contract.MetricNamespace, metrics.Dimension{Name: contract.MetricDimHouse, Value: r.house})
	}
	return r
}

// HandleEvent is the reconciler function's handler: one EventBridge event.
// A scheduled event is a housekeeping tick. Any other event that is not a
// task state change, or cannot be read, is logged and dropped (a retry
// could not make it readable); an error asks for the event again later.
func (r *Reconciler) HandleEvent(ctx context.Context, event json.RawMessage) error {
	var head struct {
		ID         string `json:"id"`
		Source     string `json:"source"`
		DetailType string `json:"detail-type"`
		Time       string `json:"time"`
	}
	if json.Unmarshal(event, &head) == nil && head.Source == ScheduledSource && head.DetailType == ScheduledDetailType {
		return r.housekeeping(ctx, head.ID, head.Time)
	}
	c, err := ecsrt.ParseTaskStateChange(event)
	if err != nil {
		r.log.Warn("event dropped", "err", err.Error())
		return nil
	}
	out, err := r.Apply(ctx, c)
	attrs := []any{"event", c.EventID, "task", c.TaskARN, "worker", c.Handle, "lastStatus", c.LastStatus,
		"version", c.Version, "outcome", string(out)}
	if err != nil {
		r.log.Error("task state change not applied", append(attrs, "err", err.Error())...)
		return err
	}
	r.log.Info("task state change", attrs...)
	r.record(c, out)
	return nil
}
