package reconcile_test

import (
	"sync"
	"testing"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/reconcile"
	"github.com/galley-run/galley/pkg/runtime/ecsrt"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/memstore"
)

// recorded collects what the reconciler records.
type recorded struct {
	mu sync.Mutex
	es []store.Event
}

func (r *recorded) Record(worker string, e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Fields["worker"] = worker
	r.es = append(r.es, e)
}

// A worker task's start and stop land in the worker's event log, the stop
// with ECS's stop code and reason and the container's exit code; the
// statuses between and a stale change are not recorded.
func TestTaskEventsRecorded(t *testing.T) {
	rec := &recorded{}
	e := newEnv(t, memstore.New(), reconcile.WithEvents(rec))
	e.deliver(e.event(ecsrt.StatusPending, 1, nil))
	e.deliver(e.event(ecsrt.StatusRunning, 2, nil))
	e.deliver(e.event(ecsrt.StatusStopped, 5, nil))
	e.deliver(e.event(ecsrt.StatusRunning, 3, nil)) // late, after the stop: stale
	if len(rec.es) != 2 {
		t.Fatalf("recorded %+v, want the start and the stop", rec.es)
	}
	start, stop := rec.es[0], rec.es[1]
	if start.Kind != eventlog.KindCompute || start.Fields["event"] != "task-running" || start.Fields["worker"] != e.worker ||
		start.Fields["ecsEvent"] != "ev-RUNNING-2" {
		t.Errorf("start %+v", start)
	}
	if stop.Kind != eventlog.KindCompute || stop.Fields["event"] != "task-stopped" ||
		stop.Fields["stopCode"] != "EssentialContainerExited" || stop.Fields["code"] != "2" ||
		stop.Fields["containerReason"] != "agent crashed" || stop.Text != "task stopped: Essential container in task exited" {
		t.Errorf("stop %+v", stop)
	}
}
