package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/store"
)

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
		case cur.State == store.EffectApplied && claimedTask(cur) == c.TaskARN:
			return AlreadySettled, nil
		case cur.State == store.EffectApplied:
			// An earlier task's stop was applied, and the worker went on:
			// it was parked, and this is the task that resumed it
			// (docs/parking.md). Its stop is claimed afresh.
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

// claimedTask is the task whose stop a claim record was applied for.
func claimedTask(rec store.Effect) string {
	var p claimPlan
	if json.Unmarshal(rec.Plan, &p) != nil {
		return ""
	}
	return p.Task
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
