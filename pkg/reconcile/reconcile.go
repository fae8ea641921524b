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
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/metrics"
	"github.com/galley-run/galley/pkg/protocol"
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

// record puts a task's start or stop in its worker's event log.
func (r *Reconciler) record(c ecsrt.TaskChange, out Outcome) {
	if r.events == nil || out == Ignored || out == Stale {
		return
	}
	e := store.Event{At: c.Time, Kind: eventlog.KindCompute, Fields: map[string]string{"task": taskID(c.TaskARN), "ecsEvent": c.EventID}}
	switch c.LastStatus {
	case ecsrt.StatusRunning:
		e.Text = "task running"
		e.Fields["event"] = "task-running"
	case ecsrt.StatusStopped:
		e.Text = "task stopped"
		if c.StoppedReason != "" {
			e.Text = "task stopped: " + c.StoppedReason
		}
		e.Fields["event"] = "task-stopped"
		e.Fields["stopCode"] = c.StopCode
		e.Fields["code"] = fmt.Sprint(exitCode(c, r.container))
		if ct, ok := c.Container(r.container); ok && ct.Reason != "" {
			e.Fields["containerReason"] = ct.Reason
		}
	default:
		return
	}
	if e.At.IsZero() {
		e.At = r.now()
	}
	r.events.Record(c.Handle, e)
}

// housekeeping runs one tick scheduled at the RFC 3339 time at: it emits
// the gauges, then sweeps when the sweep is due. Either failing makes the
// tick an error (the function's error alarm), and a failure of the gauges
// does not keep the sweep from running.
func (r *Reconciler) housekeeping(ctx context.Context, eventID, at string) error {
	scheduled, err := time.Parse(time.RFC3339, at)
	if err != nil {
		scheduled = r.now()
		r.log.Warn("scheduled event without a readable time: the sweep is due by the reconciler's clock",
			"event", eventID, "time", at)
	}
	var errs []error
	if err := r.settleLost(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if err := r.retryCleanups(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if err := r.emitGauges(ctx, eventID); err != nil {
		errs = append(errs, err)
	}
	if r.sweepDue(scheduled) {
		if err := r.sweep(ctx, eventID); err != nil {
			errs = append(errs, err)
		}
	} else {
		r.log.Debug("doorbell sweep not due", "event", eventID, "scheduled", scheduled.UTC().Format(time.RFC3339))
	}
	return errors.Join(errs...)
}

// settleLost settles the workers whose compute is gone: before the gauges,
// so they count what remains.
func (r *Reconciler) settleLost(ctx context.Context, eventID string) error {
	if r.lost == nil {
		return nil
	}
	n, err := r.lost.SettleLost(ctx)
	if err != nil {
		r.log.Error("housekeeping could not settle every lost worker", "event", eventID, "settled", n, "err", err.Error())
		return err
	}
	if n > 0 {
		r.log.Info("housekeeping settled lost workers", "event", eventID, "settled", n)
	}
	return nil
}

// retryCleanups does the owed cleanups: after settleLost, whose settles
// may owe none but must not wait a tick for the ones they do.
func (r *Reconciler) retryCleanups(ctx context.Context, eventID string) error {
	if r.cleaner == nil {
		return nil
	}
	n, err := r.cleaner.RetryCleanups(ctx)
	if err != nil {
		r.log.Error("housekeeping could not do every owed cleanup", "event", eventID, "done", n, "err", err.Error())
		return err
	}
	if n > 0 {
		r.log.Info("housekeeping did owed cleanups", "event", eventID, "done", n)
	}
	return nil
}

// sweepDue reports whether the tick scheduled at t sweeps: the one tick of
// the hour that falls in its first tick period.
func (r *Reconciler) sweepDue(t time.Time) bool {
	if r.tick <= 0 || r.tick >= time.Hour {
		return true
	}
	return t.Sub(t.Truncate(time.Hour)) < r.tick
}

// emitGauges writes the worker gauges as one embedded metric format line
// and logs them.
func (r *Reconciler) emitGauges(ctx context.Context, eventID string) error {
	if r.gauger == nil {
		return nil
	}
	live, stuck, err := r.gauger.WorkerGauges(ctx)
	if err != nil {
		r.log.Error("worker gauges not counted", "event", eventID, "err", err.Error())
		return err
	}
	if err := r.gauges.Emit(r.now(), metrics.Metric{Name: contract.MetricStuckWorkers, Unit: metrics.UnitCount, Value: float64(stuck)},
		metrics.Metric{Name: contract.MetricLiveWorkers, Unit: metrics.UnitCount, Value: float64(live)}); err != nil {
		r.log.Error("worker gauges not emitted", "event", eventID, "live", live, "stuck", stuck, "err", err.Error())
		return err
	}
	r.log.Info("worker gauges", "event", eventID, "live", live, "stuck", stuck)
	return nil
}

// sweep removes the idle doorbell queues within ctx's deadline. A failed
// or cut-short sweep is an error, so the function's error alarm tells the
// operator (a missing permission fails every hour); what it deleted stays
// deleted, and the next sweep goes on from there.
func (r *Reconciler) sweep(ctx context.Context, eventID string) error {
	if r.sweeper == nil {
		if r.gauger == nil {
			r.log.Warn("scheduled event dropped: this reconciler has no doorbell to sweep", "event", eventID)
		} else {
			r.log.Debug("no doorbell to sweep", "event", eventID)
		}
		return nil
	}
	n, err := r.sweeper.Sweep(ctx, r.idle)
	attrs := []any{"event", eventID, "idle", r.idle.String(), "queues", n}
	if err != nil {
		r.log.Error("doorbell sweep failed", append(attrs, "err", err.Error())...)
		return err
	}
	r.log.Info("doorbell sweep", attrs...)
	return nil
}

// claimKey names a worker's reconcile claim among the effect records. The
// space keeps it apart from every client key: keys are printable ASCII
// without spaces.
func claimKey(handle string) string { return "reconcile " + handle }

// claimPlan is what the claim records: the stop it settled the worker for.
type claimPlan struct {
	Task    string `json:"task"`
	Version int64  `json:"version"`
}

// Apply applies one task state change.
func (r *Reconciler) Apply(ctx context.Context, c ecsrt.TaskChange) (Outcome, error) {
	if c.Handle == "" {
		return Ignored, nil
	}
	res, _, err := r.st.GetResource(ctx, protocol.KindWorker, c.Handle)
	if galleyerr.Is(galleyerr.NotFound, err) || (err == nil && res.Worker == nil) {
		// Another deployment's task on a shared cluster, or a record that
		// is gone: nothing galley may act on.
		return Ignored, nil
	}
	if err != nil {
		return "", err
	}
	w := res.Worker
	settled := res.Released || w.State == protocol.StateSettled
	if !c.Stopped() {
		if !settled {
			return Live, nil
		}
		if r.stale(ctx, c) {
			return Stale, nil
		}
		if c.DesiredStatus == ecsrt.StatusStopped {
			return AlreadySettled, nil // already on its way down
		}
		// A task runs for a worker that settled (a cancel that raced the
		// launch, whose stop found no task yet): stop it.
		if r.stop == nil {
			r.log.Warn("a settled worker's task runs and this reconciler cannot stop it", "task", c.TaskARN, "worker", c.Handle)
			return AlreadySettled, nil
		}
		if err := r.stop.StopTask(ctx, c.TaskARN); err != nil {
			return "", err
		}
		return OrphanStopped, nil
	}
	if res.Released {
		return AlreadySettled, nil
	}
	if w.State == protocol.StateSettled {
		if !w.Exited {
			// Record that the compute ended; a settled worker keeps its
			// state and outcome, and no row is posted.
			if err := r.svc.WorkerExited(ctx, c.Handle, exitCode(c, r.container), ""); err != nil && !gone(err) {
				return "", err
			}
		}
		return AlreadySettled, nil
	}
	return r.settle(ctx, c)
}

// stale reports whether a settling stop of a later version was applied.
func (r *Reconciler) stale(ctx context.Context, c ecsrt.TaskChange) bool {
	rec, _, err := r.st.GetEffect(ctx, claimKey(c.Handle))
	if err != nil || rec.State != store.EffectApplied {
		return false
	}
	var p claimPlan
	return json.Unmarshal(rec.Plan, &p) == nil && p.Task == c.TaskARN && !c.Supersedes(p.Version)
}

// settle claims the worker's reconcile record, settles the worker failed
// with the stop's reason, and completes the claim. A concurrent copy of the
// event finds the claim held and is retried later, when the worker has
// settled.
func (r *Reconciler) settle(ctx context.Context, c ecsrt.TaskChange) (Outcome, error) {
	key := claimKey(c.Handle)
	plan, _ := json.Marshal(claimPlan{Task: c.TaskARN, Version: c.Version})
	var (
		rec store.Effect
		ver store.Version
	)
	for attempt := 0; ; attempt++ {
		if attempt == 8 {
			return "", galleyerr.Errorf(galleyerr.InFlight, "the reconcile claim of %s is contended", c.Handle)
		}
		cur, cv, err := r.st.GetEffect(ctx, key)
		now := r.now()
		switch {
		case galleyerr.Is(galleyerr.NotFound, err):
			cur, cv = store.Effect{Key: key, Fingerprint: "reconcile", Operation: "reconcile"}, store.NoVersion
		case err != nil:
			return "", err
		case cur.State == store.EffectApplied:
			return AlreadySettled, nil
		case cur.State == store.EffectInFlight && now.Before(cur.LeaseExpires):
			return "", galleyerr.Errorf(galleyerr.InFlight, "another invocation is settling %s", c.Handle)
		}
		cur.State, cur.Lease, cur.LeaseExpires, cur.Plan, cur.Updated = store.EffectInFlight, newLease(), now.Add(r.lease), plan, now
		nv, err := r.st.PutEffect(ctx, cur, cv)
		if galleyerr.Is(galleyerr.Conflict, err) {
			continue
		}
		if err != nil {
			return "", err
		}
		rec, ver = cur, nv
		break
	}

	if err := r.svc.WorkerExited(ctx, c.Handle, exitCode(c, r.container), stopReason(c, r.container)); err != nil && !gone(err) {
		// Let a retry take over at once.
		rec.LeaseExpires = r.now()
		if _, perr := r.st.PutEffect(context.WithoutCancel(ctx), rec, ver); perr != nil {
			r.log.Warn("could not release the reconcile claim", "worker", c.Handle, "err", perr.Error())
		}
		return "", err
	}
	rec.State, rec.Lease, rec.LeaseExpires, rec.Updated = store.EffectApplied, "", time.Time{}, r.now()
	rec.Receipt = json.RawMessage(plan)
	if _, err := r.st.PutEffect(ctx, rec, ver); err != nil && !galleyerr.Is(galleyerr.Conflict, err) {
		// The worker settled; a retry finds it settled and posts nothing.
		r.log.Warn("could not complete the reconcile claim", "worker", c.Handle, "err", err.Error())
	}
	return Settled, nil
}

// gone reports an error the service gives for a worker that no longer
// exists or was released: nothing to settle.
func gone(err error) bool {
	return galleyerr.Is(galleyerr.NotFound, err) || galleyerr.Is(galleyerr.Invalid, err)
}

// exitCode is the worker container's exit code, or -1 when ECS cannot tell
// (the task never started it).
func exitCode(c ecsrt.TaskChange, container string) int {
	if ct, ok := c.Container(container); ok && ct.ExitCode != nil {
		return *ct.ExitCode
	}
	return -1
}

// stopReason says why the task stopped, from what ECS reported: the stop
// code, the stopped reason and the container's reason, for the coordinator
// and the operator.
func stopReason(c ecsrt.TaskChange, container string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "its ECS task %s stopped", taskID(c.TaskARN))
	if c.StopCode != "" {
		fmt.Fprintf(&b, " (%s)", c.StopCode)
	}
	if c.StoppedReason != "" {
		fmt.Fprintf(&b, ": %s", c.StoppedReason)
	}
	if ct, ok := c.Container(container); ok && ct.Reason != "" {
		fmt.Fprintf(&b, "; container %s: %s", container, ct.Reason)
	}
	return b.String()
}

func taskID(arn string) string {
	if i := strings.LastIndexByte(arn, '/'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

func newLease() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
