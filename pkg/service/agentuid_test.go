package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
)

func agentUID(t *testing.T, e *env, worker string) uint32 {
	t.Helper()
	self, err := e.svc.WorkerSelf(context.Background(), worker)
	if err != nil {
		t.Fatalf("self of %s: %v", worker, err)
	}
	if self.AgentUID < workerapi.AgentUIDBase || self.AgentUID >= workerapi.AgentUIDEnd {
		t.Fatalf("worker %s has agent uid %d, outside [%d, %d)", worker, self.AgentUID, workerapi.AgentUIDBase, workerapi.AgentUIDEnd)
	}
	return self.AgentUID
}

// Every worker of a house gets an agent uid of its own: two launches, and
// a third into the first one's worktree (whose files the harness gives to
// the new uid), get three consecutive uids.
func TestAgentUIDsDiffer(t *testing.T) {
	e := newEnv(t)
	first, _ := e.apply(t, call("run-1", "k-1", launchBody("feature/a")))
	w1, wt := first.Created[0].Handle, first.Created[2].Handle
	w2 := e.launch(t, "run-1", "k-2", "feature/b")
	e.apply(t, call("run-1", "k-c", `{"type":"cancel-worker","worker":`+workerRef(w1)+`}`))
	again, _ := e.apply(t, call("run-1", "k-3", `{"type":"launch-worker","role":"commis","workspace":{"type":"existing","resource":{"kind":"worktree","backend":"galley","handle":"`+wt+`"}},"brief":"again"}`))
	w3 := again.Created[0].Handle
	got := []uint32{agentUID(t, e, w1), agentUID(t, e, w2), agentUID(t, e, w3)}
	for i, uid := range got[1:] {
		if uid != got[i]+1 {
			t.Errorf("worker %d has agent uid %d, want %d (the next after worker %d's)", i+2, uid, got[i]+1, i+1)
		}
	}
	// Another deployment (another signing key) numbers from elsewhere.
	other := servicetest.New(t, func(c *service.Config) { c.WorkerSecret = []byte("another deployment's signing key!") })
	rc, err := other.Service.Apply(context.Background(), call("run-1", "k-1", launchBody("feature/a")), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(rc, &r); err != nil {
		t.Fatal(err)
	}
	self, err := other.Service.WorkerSelf(context.Background(), r.Created[0].Handle)
	if err != nil {
		t.Fatal(err)
	}
	if d := int64(self.AgentUID) - int64(got[0]); d > -1000 && d < 1000 {
		t.Errorf("two deployments' first agent uids are %d and %d: their agents would collide", got[0], self.AgentUID)
	}
}

// A launch retried after its first holder wrote the worker record and
// died keeps the record's uid, and takes no number of the house's: the
// next launch gets the very next one.
func TestRetriedLaunchKeepsAgentUID(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			e, fs, clock := faultEnv(t, sc.open(t))
			c := call("run-1", "k-launch", launchBody("feature/retried"))
			loseLaunchReceipt(fs, "k-launch")
			if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first holder: %v, want an uncertain answer", err)
			}
			w := startedWorker(t, e)
			before := agentUID(t, e, w)
			fs.Clear()
			clock.Advance(11 * time.Second)
			r, _ := e.apply(t, c)
			if r.Created[0].Handle != w {
				t.Fatalf("the retry made worker %s, the first try %s", r.Created[0].Handle, w)
			}
			if e.rt.Starts[w] != 2 {
				// The worker was still starting: the retry started it
				// again (a runtime's Start converges), so it did run
				// through the record's creation.
				t.Fatalf("the worker was started %d times, want 2", e.rt.Starts[w])
			}
			if after := agentUID(t, e, w); after != before {
				t.Fatalf("the retry changed the agent uid from %d to %d", before, after)
			}
			next := e.launch(t, "run-1", "k-next", "feature/next")
			if uid := agentUID(t, e, next); uid != before+1 {
				t.Errorf("the next launch got agent uid %d, want %d (the retry took a number)", uid, before+1)
			}
		})
	}
}

// Launches racing on every store get distinct uids.
func TestConcurrentLaunchesGetDistinctAgentUIDs(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			te := servicetest.New(t, nil, service.WithStore(sc.open(t)))
			e := &env{svc: te.Service, store: te.Store, rt: te.Runtime, git: te.Git, clock: service.SystemClock}
			const n = 8
			handles := make([]string, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					raw, err := e.svc.Apply(context.Background(), call("run-1", fmt.Sprint("k-", i), launchBody("")), e.clock.Now())
					if err != nil {
						t.Errorf("launch %d: %v", i, err)
						return
					}
					var r protocol.Receipt
					if err := json.Unmarshal(raw, &r); err != nil {
						t.Error(err)
						return
					}
					handles[i] = r.Created[0].Handle
				})
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			seen := map[uint32]string{}
			for _, h := range handles {
				uid := agentUID(t, e, h)
				if other, ok := seen[uid]; ok {
					t.Errorf("workers %s and %s share agent uid %d", other, h, uid)
				}
				seen[uid] = h
			}
		})
	}
}
