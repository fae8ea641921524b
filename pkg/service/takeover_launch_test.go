package service_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
)

// faultEnv is a service on st wrapped in a fault store, with leases of 10 s
// on a manual clock.
func faultEnv(t *testing.T, st store.Store) (*env, *faultstore.Store, *manualClock) {
	t.Helper()
	clock := servicetest.NewManualClock(time.Unix(1_800_000_000, 0))
	fs := faultstore.New(st)
	te := servicetest.New(t, func(c *service.Config) { c.Lease = 10 * time.Second },
		service.WithStore(fs), service.WithClock(clock))
	return &env{svc: te.Service, store: fs, rt: te.Runtime, git: te.Git, clock: clock}, fs, clock
}

// loseLaunchReceipt scripts what a launch holder that acted and then died
// leaves: every write after its plan (the receipt, three times, and the
// write that would end its lease) fails, so the claim stays in flight under
// a lease nobody completes.
func loseLaunchReceipt(fs *faultstore.Store, key string) {
	fs.Inject(faultstore.Fault{Method: "PutEffect", Key: key, Skip: 2, When: faultstore.Before, Times: 4})
}

// startedWorker is the one worker the runtime was asked to start.
func startedWorker(t *testing.T, e *env) string {
	t.Helper()
	if e.rt.StartCount() != 1 {
		t.Fatalf("%d workers started, want 1", e.rt.StartCount())
	}
	for h := range e.rt.Specs {
		return h
	}
	return ""
}

// pushTo moves branch on by one commit, as the worker's push would.
func pushTo(t *testing.T, e *env, branch string) string {
	t.Helper()
	git := func(args ...string) string {
		out, err := exec.Command("git", append([]string{"-C", e.git.Path()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	head := git("rev-parse", "refs/heads/"+branch)
	tree := git("rev-parse", head+"^{tree}")
	commit := git("-c", "user.name=w", "-c", "user.email=w@w", "commit-tree", tree, "-p", head, "-m", "the worker's work")
	git("update-ref", "refs/heads/"+branch, commit, head)
	return commit
}

func applyErr(e *env, c protocol.EffectCall) error {
	_, err := e.svc.Apply(context.Background(), c, e.clock.Now())
	return err
}

// TestTakenOverLaunchConvergesAfterThePush (issue 13, item 1): the first
// holder creates the branch, writes the records and starts the worker, and
// dies without its receipt. The worker pushes. The retry that takes the
// claim over finds the branch no longer at the planned base: the branch
// record owned by its key says the branch is its own, and it converges on
// the launch's receipt without starting the worker again.
func TestTakenOverLaunchConvergesAfterThePush(t *testing.T) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			e, fs, clock := faultEnv(t, sc.open(t))
			ctx := context.Background()
			c := call("run-1", "k-launch", launchBody("feature/pushed"))
			loseLaunchReceipt(fs, "k-launch")
			if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
				t.Fatalf("first holder: %v, want an uncertain answer", err)
			}
			w := startedWorker(t, e)
			if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
				t.Fatal(err)
			}
			pushed := pushTo(t, e, "feature/pushed")
			fs.Clear()

			if err := applyErr(e, c); !galleyerr.Is(galleyerr.InFlight, err) {
				t.Fatalf("during the lease: %v", err)
			}
			clock.Advance(11 * time.Second)
			r, raw := e.apply(t, c)
			want := []protocol.Resource{{Kind: "worker", Backend: "galley", Handle: w},
				{Kind: "branch", Backend: "galley", Handle: "feature/pushed"}}
			if len(r.Created) != 3 || r.Created[0] != want[0] || r.Created[1] != want[1] || r.Created[2].Kind != "worktree" {
				t.Fatalf("receipt after the takeover: %s", raw)
			}
			if ans, again, err := e.svc.Lookup(ctx, c); err != nil || ans.Status != protocol.StatusApplied || string(again) != string(raw) {
				t.Fatalf("lookup: %+v %s %v", ans, again, err)
			}
			if n := e.rt.Starts[w]; n != 1 {
				t.Fatalf("the worker was started %d times", n)
			}
			if head, _, _ := e.git.BranchHead(ctx, "feature/pushed"); head != pushed {
				t.Fatalf("the branch moved to %s, the worker pushed %s", head, pushed)
			}
			if got := e.observe(t, w); got.State != protocol.StateReady {
				t.Fatalf("observe after the takeover: %+v", got)
			}
		})
	}
}

// TestTakenOverLaunchNeverRevives (issue 13, item 2): a launch acted and
// lost its receipt; its worker was then cancelled, or released with its
// worktree by another key. The retry that takes the claim over converges
// on the launch's receipt: it never makes the records again, never starts
// compute again, and the worker stays settled or released.
func TestTakenOverLaunchNeverRevives(t *testing.T) {
	for _, sc := range floodStores {
		for _, then := range []string{"released", "cancelled"} {
			t.Run(sc.name+"/"+then, func(t *testing.T) {
				e, fs, clock := faultEnv(t, sc.open(t))
				ctx := context.Background()
				c := call("run-1", "k-launch", launchBody("feature/revive"))
				loseLaunchReceipt(fs, "k-launch")
				if err := applyErr(e, c); !galleyerr.Is(galleyerr.Unavailable, err) {
					t.Fatalf("first holder: %v, want an uncertain answer", err)
				}
				w := startedWorker(t, e)
				fs.Clear()
				var wt string
				all, err := e.store.ListResources(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range all {
					if r.Kind == protocol.KindWorktree {
						wt = r.Handle
					}
				}
				switch then {
				case "released":
					// The inventory names the uncertain key as owner, so
					// another key cleans up.
					e.apply(t, call("run-1", "k-release-w", `{"type":"release-resource","resource":`+workerRef(w)+`}`))
					e.apply(t, call("run-1", "k-release-wt", `{"type":"release-resource","resource":{"kind":"worktree","backend":"galley","handle":"`+wt+`"}}`))
				case "cancelled":
					e.apply(t, call("run-1", "k-cancel", `{"type":"cancel-worker","worker":`+workerRef(w)+`}`))
				}
				before := e.observe(t, w)

				clock.Advance(11 * time.Second)
				r, raw := e.apply(t, c)
				if len(r.Created) != 3 || r.Created[0].Handle != w || r.Created[1].Handle != "feature/revive" || r.Created[2].Handle != wt {
					t.Fatalf("receipt after the takeover: %s", raw)
				}
				if again, _ := e.apply(t, c); again.Created[0] != r.Created[0] {
					t.Fatalf("a second retry answered %+v", again)
				}
				if n := e.rt.Starts[w]; n != 1 {
					t.Fatalf("the worker was started %d times", n)
				}
				if got := e.observe(t, w); got != before {
					t.Fatalf("observe went from %+v to %+v", before, got)
				}
				for _, h := range []struct{ kind, handle string }{{protocol.KindWorker, w}, {protocol.KindWorktree, wt}} {
					res, _, err := e.store.GetResource(ctx, h.kind, h.handle)
					if err != nil {
						t.Fatal(err)
					}
					if then == "released" && !res.Released {
						t.Fatalf("%s %s was made again: %+v", h.kind, h.handle, res)
					}
					if res.Worker != nil && res.Worker.State != protocol.StateSettled {
						t.Fatalf("the worker went back to %s", res.Worker.State)
					}
				}
				inv, err := e.svc.Inventory(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, row := range inv.Resources {
					if then == "released" && (row.Resource.Handle == w || row.Resource.Handle == wt) {
						b, _ := json.Marshal(inv)
						t.Fatalf("a released resource is back in the inventory: %s", b)
					}
				}
			})
		}
	}
}
