package service_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/standins"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
	"github.com/galley-run/galley/pkg/store/dynamostore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// floodStores are the three stores the flood runs on. DynamoDB Local is
// required under GALLEY_REQUIRE_STANDINS=1 and skipped otherwise.
var floodStores = []struct {
	name string
	open func(t *testing.T) store.Store
}{
	{"memstore", func(*testing.T) store.Store { return memstore.New() }},
	{"bbolt", func(t *testing.T) store.Store {
		st, err := boltstore.Open(filepath.Join(t.TempDir(), "galley.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"dynamodb", func(t *testing.T) store.Store {
		standins.Require(t, standins.DynamoDB)
		c, err := dynamostore.NewClientFromEnv(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var b [6]byte
		rand.Read(b[:])
		name := "galley-flood-" + hex.EncodeToString(b[:])
		st := dynamostore.New(c, name)
		if err := st.EnsureTable(t.Context()); err != nil {
			t.Fatalf("EnsureTable: %v", err)
		}
		t.Cleanup(func() {
			c.DeleteTable(context.WithoutCancel(t.Context()), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		})
		return st
	}},
}

// TestFloodedWorkerStaysCancellable: one worker posts 10,000 questions and
// 10,000 status rows and kitchn answers its questions with 64 KiB replies.
// Every refused post is refused definitely (rate-limited, with a retry
// hint); the worker record stays far below DynamoDB's item limit; another
// worker's question is in the first batch the coordinator reads; and
// cancel, the exit report and release still succeed and stop the compute.
func TestFloodedWorkerStaysCancellable(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			st := sc.open(t)
			te := servicetest.New(t, func(c *service.Config) { c.PostBudget = service.DefaultPostBudget },
				service.WithStore(st))
			e := &env{svc: te.Service, store: st, rt: te.Runtime, git: te.Git, clock: service.SystemClock}
			ctx := t.Context()
			flooder := e.launch(t, "run-flood", "k-flooder", "")
			other := e.launch(t, "run-flood", "k-other", "")

			body := strings.Repeat("x", 1<<10)
			start := time.Now()
			var accepted []string
			var questions []string
			refused := 0
			for i := range 20000 {
				kind := protocol.MsgStatus
				if i%2 == 0 {
					kind = protocol.MsgQuestion
				}
				a, err := e.svc.WorkerPost(ctx, flooder, workerapi.PostRequest{Kind: kind, Body: body})
				if err == nil {
					accepted = append(accepted, a.ID)
					if kind == protocol.MsgQuestion {
						questions = append(questions, a.ID)
					}
					continue
				}
				refused++
				var ge *galleyerr.Error
				if ge = galleyerr.As(err); ge == nil || ge.Kind != galleyerr.RateLimited || ge.RetryAfterSeconds < 1 || ge.Msg == "" {
					t.Fatalf("post %d (%s) refused without a definite answer: %v", i, kind, err)
				}
			}
			// The budget: its burst, then a row a second.
			b := service.DefaultPostBudget
			if most := int(b.RowBurst + b.Rows*time.Since(start).Seconds()); len(accepted) == 0 || len(accepted) > most {
				t.Fatalf("accepted %d posts of 20,000, want 1..%d", len(accepted), most)
			}
			if len(questions) > store.MaxPendingAttention {
				t.Fatalf("%d unread questions accepted, bound %d", len(questions), store.MaxPendingAttention)
			}
			t.Logf("%d posts accepted, %d refused", len(accepted), refused)

			// kitchn answers every question with 64 KiB.
			for i, q := range questions {
				reply := strings.Repeat(string(rune('a'+i%26)), 64<<10)
				e.apply(t, call("run-flood", "k-reply-"+q, `{"type":"reply-to-worker","worker":`+workerRef(flooder)+
					`,"question":"`+q+`","body":"`+reply+`"}`))
			}
			res, _, err := st.GetResource(ctx, protocol.KindWorker, flooder)
			if err != nil {
				t.Fatal(err)
			}
			if raw, _ := json.Marshal(res); len(raw) > 32<<10 {
				t.Errorf("the flooded worker's record is %d bytes", len(raw))
			}
			in, err := e.svc.WorkerInbox(ctx, flooder, 0, 0)
			if err != nil || len(in.Items) != len(questions) {
				t.Fatalf("the flooder's inbox has %d items (%v), want its %d replies", len(in.Items), err, len(questions))
			}

			// Another worker's question is in the first batch.
			q, err := e.svc.WorkerPost(ctx, other, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "which API?"})
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.svc.Await(ctx, "run-flood", "coordinator", time.Second)
			if err != nil || d.Delivery == nil {
				t.Fatalf("await = %+v, %v", d, err)
			}
			found := false
			for _, m := range d.Delivery.Messages {
				found = found || m.ID == q.ID
			}
			if !found {
				t.Fatalf("the other worker's question is not in the first batch (%d rows)", len(d.Delivery.Messages))
			}

			// Cancel settles the flooder and stops its compute.
			e.apply(t, call("run-flood", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(flooder)+`}`))
			if o := e.observe(t, flooder); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeCancelled {
				t.Fatalf("after cancel: %+v", o)
			}
			if !e.rt.Stopped[flooder] {
				t.Fatal("cancel did not stop the flooder's compute")
			}
			if _, err := e.svc.WorkerPost(ctx, flooder, workerapi.PostRequest{Kind: protocol.MsgStatus, Body: "more"}); !galleyerr.Is(galleyerr.Conflict, err) {
				t.Fatalf("a post after cancel: %v, want a conflict", err)
			}
			if err := e.svc.WorkerExitReport(ctx, flooder, 137, "killed"); err != nil {
				t.Fatalf("exit report: %v", err)
			}
			e.apply(t, call("run-flood", "k-release", `{"type":"release-resource","resource":`+workerRef(flooder)+`}`))
			if o := e.observe(t, flooder); o.State != protocol.StateMissing {
				t.Fatalf("after release: %+v", o)
			}
			if o := e.observe(t, other); o.State != protocol.StateAwaitingReply {
				t.Fatalf("the other worker: %+v", o)
			}
		})
	}
}
