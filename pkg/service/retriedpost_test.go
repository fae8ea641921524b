package service_test

import (
	"context"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestRetriedPostAppendsOnce: a worker's post fails after (or around) the
// append of its row, the coordinator takes and acknowledges what is there,
// and the harness retries the post with the same client id. The retry
// answers the row's id, completes what the first try left undone, and the
// coordinator gets the row exactly once over both tries.
func TestRetriedPostAppendsOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		kind  string
		fault faultstore.Fault // Key is filled in: the run, or the worker
		// appendedFirst: the row was appended before the fault fired.
		// rowFirst: the first try left the row in the mailbox.
		appendedFirst, rowFirst bool
		state                   string // the worker's state after the retry
	}{
		// A worker-done settles the record first and derives its row from
		// the record that won (issue 13, item 5): a settle that failed
		// appended nothing, one whose answer was lost owes the row.
		{"worker-done, the settle fails", protocol.MsgWorkerDone,
			faultstore.Fault{Method: "PutResource", When: faultstore.Before}, false, false, protocol.StateSettled},
		{"worker-done, the settle's answer is lost", protocol.MsgWorkerDone,
			faultstore.Fault{Method: "PutResource", When: faultstore.After}, false, false, protocol.StateSettled},
		{"worker-done, the append's answer is lost", protocol.MsgWorkerDone,
			faultstore.Fault{Method: "AppendMessage", When: faultstore.After}, false, true, protocol.StateSettled},
		{"question, the append's answer is lost", protocol.MsgQuestion,
			faultstore.Fault{Method: "AppendMessage", When: faultstore.After}, false, true, protocol.StateAwaitingReply},
		{"question, the registration's answer is lost", protocol.MsgQuestion,
			faultstore.Fault{Method: "PutResource", When: faultstore.After}, false, false, protocol.StateAwaitingReply},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := faultstore.New(memstore.New())
			e := newEnv(t, func(_ *service.Config, o *[]service.Option) {
				*o = append(*o, service.WithStore(fs))
			})
			ctx := context.Background()
			w := e.launch(t, "run-r", "k-1", "")
			if got := drain(t, e, "run-r"); len(got) != 0 {
				t.Fatalf("the mailbox holds %d rows before the post", len(got))
			}

			f := c.fault
			f.Key, f.Times = "run-r", 1
			if f.Method == "PutResource" {
				f.Key = protocol.KindWorker + "/" + w
			}
			appends := fs.Calls("AppendMessage")
			if f.Method == "PutResource" {
				f.Hook = func(faultstore.Call) {
					if appended := fs.Calls("AppendMessage") > appends; appended != c.appendedFirst {
						t.Errorf("the fault fired with the row appended %v, want %v", appended, c.appendedFirst)
					}
				}
			}
			fs.Inject(f)
			req := workerapi.PostRequest{ClientID: "c-1", Kind: c.kind, Body: "which one?"}
			if c.kind == protocol.MsgWorkerDone {
				req.Outcome, req.Body = protocol.OutcomeSucceeded, "done"
			}
			if _, err := e.svc.WorkerPost(ctx, w, req); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first post: %v, want Unavailable", err)
			}
			if fs.Injected("") != 1 {
				t.Fatal("the fault did not fire")
			}
			// The coordinator takes and acknowledges whatever arrived
			// before the retry.
			rows := drain(t, e, "run-r")
			if c.rowFirst != (len(rows) == 1) || len(rows) > 1 {
				t.Fatalf("before the retry the coordinator got %d rows", len(rows))
			}

			a, err := e.svc.WorkerPost(ctx, w, req)
			if err != nil {
				t.Fatalf("retried post: %v", err)
			}
			rows = append(rows, drain(t, e, "run-r")...)
			if len(rows) != 1 || rows[0].ID != a.ID || rows[0].Kind != c.kind {
				t.Fatalf("over both tries the coordinator got %+v, want one %s row %s", rows, c.kind, a.ID)
			}
			if got := e.observe(t, w); got.State != c.state {
				t.Errorf("worker state %s after the retry, want %s", got.State, c.state)
			}
			if c.kind == protocol.MsgWorkerDone {
				if got := e.observe(t, w); got.Outcome != protocol.OutcomeSucceeded {
					t.Errorf("worker outcome %q, want succeeded", got.Outcome)
				}
			}
		})
	}
}

// drain reads run's mailbox as its coordinator, acknowledging each batch,
// until it is empty, and returns the rows in order.
func drain(t *testing.T, e *env, run string) []protocol.MailMessage {
	t.Helper()
	ctx := context.Background()
	a, err := e.svc.Next(ctx, run, "c-1")
	var rows []protocol.MailMessage
	for err == nil && a.Status == "delivery" {
		rows = append(rows, a.Delivery.Messages...)
		a, err = e.svc.Acknowledge(ctx, run, "c-1", a.Delivery.ID)
	}
	if err != nil || a.Status != "empty" {
		t.Fatalf("reading the mailbox: %+v %v", a, err)
	}
	return rows
}
