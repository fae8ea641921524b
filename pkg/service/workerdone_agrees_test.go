package service_test

import (
	"context"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestWorkerDoneAgreesWithObserve (issue 13, item 5): a cancel or the
// runtime's exit report lands in the middle of the harness's worker-done
// (before the write that settles, or before the row's append), on every
// store. Whatever the interleaving, the coordinator gets at most one
// worker-done row for the worker, and its outcome is the one observe
// answers; a worker that settled by its own report keeps a row even when
// its harness stopped before appending it.
func TestWorkerDoneAgreesWithObserve(t *testing.T) {
	const run = "run-done"
	cancel := func(t *testing.T, e *env, w string) {
		t.Helper()
		e.apply(t, call(run, "k-cancel-"+w, `{"type":"cancel-worker","worker":`+workerRef(w)+`}`))
	}
	exited := func(t *testing.T, e *env, w string) {
		t.Helper()
		if err := e.svc.WorkerExited(context.Background(), w, 137, "task stopped"); err != nil {
			t.Errorf("WorkerExited: %v", err)
		}
	}
	for _, c := range []struct {
		name string
		// at is the store call of the harness's worker-done at which meddle
		// runs: the worker record's write, or the run's append.
		at     string
		meddle func(*testing.T, *env, string)
		// fail makes the harness's call at fail with nothing written, and
		// meddle then runs after the post.
		fail bool
		// refused: the harness's post is refused (409); outcome: what
		// observe and the one row say; rows: how many worker-done rows.
		refused bool
		outcome string
		rows    int
	}{
		{name: "a cancel before the settle", at: "PutResource", meddle: cancel,
			refused: true, outcome: protocol.OutcomeCancelled, rows: 0},
		{name: "a cancel before the append", at: "AppendMessage", meddle: cancel,
			outcome: protocol.OutcomeSucceeded, rows: 1},
		{name: "the exit before the settle", at: "PutResource", meddle: exited,
			refused: true, outcome: protocol.OutcomeFailed, rows: 1},
		{name: "the exit before the append", at: "AppendMessage", meddle: exited,
			outcome: protocol.OutcomeSucceeded, rows: 1},
		{name: "the harness stops before the append, then the exit", at: "AppendMessage", meddle: exited, fail: true,
			outcome: protocol.OutcomeSucceeded, rows: 1},
	} {
		for _, sc := range floodStores {
			t.Run(c.name+"/"+sc.name, func(t *testing.T) {
				fs := faultstore.New(sc.open(t))
				te := servicetest.New(t, nil, service.WithStore(fs))
				e := &env{svc: te.Service, store: fs, rt: te.Runtime, git: te.Git, clock: service.SystemClock}
				ctx := t.Context()
				w := e.launch(t, run, "k-w", "")
				if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
					t.Fatal(err)
				}
				key := run
				if c.at == "PutResource" {
					key = protocol.KindWorker + "/" + w
				}
				f := faultstore.Fault{Method: c.at, Key: key, Times: 1, When: faultstore.Delay}
				if c.fail {
					f.When = faultstore.Before
				} else {
					f.Hook = func(faultstore.Call) { c.meddle(t, e, w) }
				}
				fs.Inject(f)
				_, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{ClientID: "done-1", Kind: protocol.MsgWorkerDone,
					Outcome: protocol.OutcomeSucceeded, Body: "all green"})
				if fs.Injected("") != 1 {
					t.Fatal("the fault point was never reached")
				}
				if c.fail {
					if !galleyerr.Is(galleyerr.Unavailable, err) {
						t.Fatalf("post: %v, want Unavailable", err)
					}
					c.meddle(t, e, w)
				}

				// The invariant first: at most one row, agreeing with observe.
				obs := e.observe(t, w)
				var done []protocol.MailMessage
				for _, m := range drain(t, e, run) {
					if m.Kind == protocol.MsgWorkerDone {
						done = append(done, m)
					}
				}
				if len(done) > 1 {
					t.Errorf("the coordinator got %d worker-done rows: %+v", len(done), done)
				}
				for _, m := range done {
					if m.Outcome != obs.Outcome {
						t.Errorf("a worker-done row says %s, observe says %s %s", m.Outcome, obs.State, obs.Outcome)
					}
				}
				// Then which interleaving won.
				if obs.State != protocol.StateSettled || obs.Outcome != c.outcome || len(done) != c.rows {
					t.Fatalf("observe = %s %s with %d rows, want settled %s with %d", obs.State, obs.Outcome, len(done), c.outcome, c.rows)
				}
				switch {
				case c.fail:
				case c.refused && !galleyerr.Is(galleyerr.Conflict, err):
					t.Fatalf("post: %v, want refused (Conflict)", err)
				case !c.refused && err != nil:
					t.Fatalf("post: %v", err)
				}
				// Later reports change nothing: no second row.
				exited(t, e, w)
				if more := drain(t, e, run); len(more) != 0 {
					t.Errorf("a later exit added %d rows", len(more))
				}
			})
		}
	}
}
