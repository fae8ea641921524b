package reconcile

import (
	"fmt"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/store"
)

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
