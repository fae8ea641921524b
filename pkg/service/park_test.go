package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/faultstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// parkEnv is a service whose runtime resumes, on one of the stores, with
// a folder store for the parked files it deletes.
type parkEnv struct {
	*env
	rt     *servicetest.Runtime
	parked *snapshot.DirStore
}

// parkedFiles deletes a worker's session archive from a folder store, as
// galley serve's does.
type parkedFiles struct{ s *snapshot.DirStore }

func (p parkedFiles) DeleteParked(ctx context.Context, handle string) error {
	return p.s.Delete(ctx, snapshot.Key("origin89", handle, "session"))
}

// newParkEnv builds the service on st (nil: the memory store).
func newParkEnv(t *testing.T, st store.Store, more ...service.Option) *parkEnv {
	ds, err := snapshot.NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	opts := append([]service.Option{service.WithParkedFiles(parkedFiles{ds})}, more...)
	if st != nil {
		opts = append(opts, service.WithStore(st))
	}
	te := servicetest.New(t, nil, opts...)
	if st == nil {
		st = te.Store
	}
	e := &env{svc: te.Service, store: st, rt: te.Runtime, git: te.Git, clock: service.SystemClock}
	return &parkEnv{env: e, rt: te.Runtime, parked: ds}
}

// parkStores runs f on the memory store, bbolt (the local shape's) and
// DynamoDB Local (when its stand-in runs).
func parkStores(t *testing.T, f func(t *testing.T, e *parkEnv)) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) { f(t, newParkEnv(t, sc.open(t))) })
	}
}

// parkFaultStores runs f as parkStores does, each store behind a fault
// injector.
func parkFaultStores(t *testing.T, f func(t *testing.T, e *parkEnv, fs *faultstore.Store)) {
	for _, sc := range floodStores {
		t.Run(sc.name, func(t *testing.T) {
			fs := faultstore.New(sc.open(t))
			f(t, newParkEnv(t, fs), fs)
		})
	}
}

// askAndPark launches a worker, has it ask a question and park in it:
// the question's id.
func (e *parkEnv) askAndPark(t *testing.T, key string) (handle, question string) {
	t.Helper()
	ctx := context.Background()
	handle = e.launch(t, "run-1", key, "feature/"+key)
	if err := e.svc.WorkerReady(ctx, handle, "test"); err != nil {
		t.Fatal(err)
	}
	ans, err := e.svc.WorkerPost(ctx, handle, workerapi.PostRequest{Kind: protocol.MsgQuestion, Subject: "which?", Body: "v1 or v2?"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.parked.Put(ctx, snapshot.Key("origin89", handle, "session"), strings.NewReader("session files")); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.WorkerPark(ctx, handle, parkReq(1, 0)); err != nil {
		t.Fatalf("park: %v", err)
	}
	e.rt.End(handle) // its harness ended, as a parked one does
	return handle, ans.ID
}

func parkReq(n int, read int64) workerapi.ParkRequest {
	return workerapi.ParkRequest{Parking: n, Read: read, State: json.RawMessage(`{"v":1,"fact":"3","wait":"ask"}`)}
}

func (e *parkEnv) inventoryLiveness(t *testing.T, handle string) string {
	t.Helper()
	inv, err := e.svc.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range inv.Resources {
		if r.Resource.Kind == "worker" && r.Resource.Handle == handle {
			return r.Liveness
		}
	}
	return "absent"
}

func (e *parkEnv) sessionKept(t *testing.T, handle string) bool {
	t.Helper()
	rc, err := e.parked.Get(context.Background(), snapshot.Key("origin89", handle, "session"))
	if galleyerr.Is(galleyerr.NotFound, err) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	return true
}

// TestParkedWorkerResumesOnReply: a parked worker observes awaiting-reply
// and is live in the inventory though its compute ended; the end of that
// compute settles nothing; the reply resumes it with a new credential
// (the parked one's is void), and it is starting until its new harness
// reports ready.
func TestParkedWorkerResumesOnReply(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		ctx := context.Background()
		w, q := e.askAndPark(t, "k-reply")
		oldToken := e.rt.Specs[w].Token
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply {
			t.Fatalf("parked worker observes %+v, want awaiting-reply", o)
		}
		if l := e.inventoryLiveness(t, w); l != protocol.LivenessLive {
			t.Fatalf("parked worker's inventory liveness %q, want live", l)
		}
		if err := e.svc.WorkerExited(ctx, w, -1, "the worker's harness process ended"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply {
			t.Fatalf("the parked compute's end changed the worker: %+v", o)
		}
		self, err := e.svc.WorkerSelf(ctx, w)
		if err != nil || self.Parked != 1 || self.Resume != nil {
			t.Fatalf("self of a parked worker: parked %d resume %v, %v", self.Parked, self.Resume, err)
		}
		// The report again is the same parking; another number is out
		// of turn.
		if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); err != nil {
			t.Fatalf("the same parking again: %v", err)
		}
		if err := e.svc.WorkerPark(ctx, w, parkReq(3, 0)); !galleyerr.Is(galleyerr.Invalid, err) {
			t.Fatalf("parking out of turn: %v, want Invalid", err)
		}
		if n := e.rt.ResumeCount(w); n != 0 {
			t.Fatalf("resumed %d times before any input", n)
		}

		e.apply(t, call("run-1", "k-answer", replyBody(w, q, "v2")))
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the reply resumed the worker %d times, want 1", n)
		}
		if o := e.observe(t, w); o.State != protocol.StateStarting {
			t.Fatalf("resuming worker observes %+v, want starting", o)
		}
		self, err = e.svc.WorkerSelf(ctx, w)
		if err != nil || self.Resume == nil || self.Resume.Parking != 1 || !strings.Contains(string(self.Resume.State), `"fact":"3"`) {
			t.Fatalf("self of a resumed worker: %+v, %v", self.Resume, err)
		}
		newToken := e.rt.ResumeSpec(w).Token
		if newToken == "" || newToken == oldToken {
			t.Fatalf("the resumed compute got no credential of its own")
		}
		if _, err := e.svc.AuthenticateWorker(ctx, oldToken); !galleyerr.Is(galleyerr.Unauthorized, err) {
			t.Fatalf("the parked harness's credential after the resume: %v, want Unauthorized", err)
		}
		if h, err := e.svc.AuthenticateWorker(ctx, newToken); err != nil || h != w {
			t.Fatalf("the resumed harness's credential: %q, %v", h, err)
		}
		inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
		if err != nil || len(inbox.Items) != 1 || inbox.Items[0].Question != q || inbox.Items[0].Body != "v2" {
			t.Fatalf("the resumed worker's inbox: %+v, %v", inbox, err)
		}
		if err := e.svc.WorkerReady(ctx, w, "script agent started"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State != protocol.StateReady {
			t.Fatalf("resumed worker after ready: %+v", o)
		}
		// A second message resumes nothing more: the worker runs.
		e.apply(t, call("run-1", "k-msg", messageBody(w, "and then?")))
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("a message to a running resumed worker resumed it again (%d)", n)
		}
		// It parks again, as its second parking.
		if err := e.svc.WorkerPark(ctx, w, parkReq(2, 2)); err != nil {
			t.Fatalf("second parking: %v", err)
		}
		if o := e.observe(t, w); o.State != protocol.StateAwaitingReply {
			t.Fatalf("parked again: %+v", o)
		}
	})
}

// TestParkedWorkerResumesOnMessage: a message to a parked worker resumes
// it. Input whose resume was lost (its effect's holder died between the
// append and the resume) resumes it when its parked compute's end is seen.
func TestParkedWorkerResumesOnMessage(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		w, _ := e.askAndPark(t, "k-msg1")
		e.apply(t, call("run-1", "k-m1", messageBody(w, "hello")))
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the message resumed the worker %d times, want 1", n)
		}

		ctx := context.Background()
		w2, _ := e.askAndPark(t, "k-msg2")
		if _, err := e.store.AppendInbox(ctx, w2, store.InboxItem{Key: "k-lost", Kind: "message", Body: "lost", At: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if n := e.rt.ResumeCount(w2); n != 0 {
			t.Fatalf("resumed %d times before anything looked", n)
		}
		if err := e.svc.WorkerExited(ctx, w2, -1, "the worker's harness process ended"); err != nil {
			t.Fatal(err)
		}
		if n := e.rt.ResumeCount(w2); n != 1 {
			t.Fatalf("the parked compute's end with input waiting resumed the worker %d times, want 1", n)
		}
	})
}

// TestReplyRacingTheParking: the reply is recorded while the harness
// parks (after its inbox froze at cursor 0, before its report): the
// report lands, finds the reply after its cursor and resumes the worker
// at once; the reply is delivered to the resumed harness.
func TestReplyRacingTheParking(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		ctx := context.Background()
		w := e.launch(t, "run-1", "k-race", "feature/race")
		if err := e.svc.WorkerReady(ctx, w, "test"); err != nil {
			t.Fatal(err)
		}
		ans, err := e.svc.WorkerPost(ctx, w, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "v1 or v2?"})
		if err != nil {
			t.Fatal(err)
		}
		e.apply(t, call("run-1", "k-answer", replyBody(w, ans.ID, "v1")))
		if n := e.rt.ResumeCount(w); n != 0 {
			t.Fatalf("a reply to a running worker resumed it (%d)", n)
		}
		if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); err != nil {
			t.Fatalf("park: %v", err)
		}
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the parking that raced the reply resumed the worker %d times, want 1", n)
		}
		inbox, err := e.svc.WorkerInbox(ctx, w, 0, 0)
		if err != nil || len(inbox.Items) != 1 || inbox.Items[0].Body != "v1" {
			t.Fatalf("the reply after the race: %+v, %v", inbox, err)
		}
	})
}

// TestResumeOwedIsStartedWhenTheParkedComputeEnds: a runtime that cannot
// start the resumed compute yet (the parked harness still ends) leaves
// the start owed: the worker is starting, its inventory liveness
// unverifiable (no compute runs, and whether one was started galley
// cannot tell), and the end of the parked compute starts it.
func TestResumeOwedIsStartedWhenTheParkedComputeEnds(t *testing.T) {
	parkStores(t, func(t *testing.T, e *parkEnv) {
		ctx := context.Background()
		w, q := e.askAndPark(t, "k-owed")
		e.rt.RefuseResume(true)
		e.apply(t, call("run-1", "k-answer", replyBody(w, q, "v2")))
		if n := e.rt.ResumeCount(w); n != 0 {
			t.Fatalf("resumed %d times while the runtime refused", n)
		}
		if o := e.observe(t, w); o.State != protocol.StateStarting {
			t.Fatalf("owed resume observes %+v, want starting", o)
		}
		if l := e.inventoryLiveness(t, w); l != protocol.LivenessUnverifiable {
			t.Fatalf("owed resume's inventory liveness %q, want unverifiable", l)
		}
		e.rt.RefuseResume(false)
		if err := e.svc.WorkerExited(ctx, w, -1, "the worker's harness process ended"); err != nil {
			t.Fatal(err)
		}
		if n := e.rt.ResumeCount(w); n != 1 {
			t.Fatalf("the parked compute's end started %d resumes, want 1", n)
		}
		if o := e.observe(t, w); o.State != protocol.StateStarting {
			t.Fatalf("resumed worker observes %+v, want starting", o)
		}
		// A late end of the parked compute while the resumed one runs
		// settles nothing; the resumed one's own end settles it failed.
		if err := e.svc.WorkerExited(ctx, w, -1, "late"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State == protocol.StateSettled {
			t.Fatalf("a late end of the parked compute settled the resumed worker: %+v", o)
		}
		e.rt.End(w)
		if err := e.svc.WorkerExited(ctx, w, -1, "the resumed harness ended"); err != nil {
			t.Fatal(err)
		}
		if o := e.observe(t, w); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
			t.Fatalf("the resumed compute's end: %+v, want settled failed", o)
		}
	})
}

// TestCancelAndReleaseOfAParkedWorker: cancel and release settle a
// parked worker without starting anything, stop it (its ended compute),
// and delete what it saved; a parking reported after the cancel is
// refused.
func TestCancelAndReleaseOfAParkedWorker(t *testing.T) {
	for _, how := range []string{"cancel", "release"} {
		t.Run(how, func(t *testing.T) {
			parkStores(t, func(t *testing.T, e *parkEnv) {
				ctx := context.Background()
				w, _ := e.askAndPark(t, "k-"+how)
				if !e.sessionKept(t, w) {
					t.Fatal("the session archive is missing before the settle")
				}
				body := fmt.Sprintf(`{"type":"cancel-worker","worker":%s}`, workerRef(w))
				if how == "release" {
					body = fmt.Sprintf(`{"type":"release-resource","resource":%s}`, workerRef(w))
				}
				e.apply(t, call("run-1", "k-"+how+"-it", body))
				want := protocol.Observation{State: protocol.StateSettled, Outcome: protocol.OutcomeCancelled}
				if how == "release" {
					want = protocol.Observation{State: protocol.StateMissing}
				}
				if o := e.observe(t, w); o != want {
					t.Fatalf("%s of a parked worker observes %+v, want %+v", how, o, want)
				}
				if n := e.rt.ResumeCount(w); n != 0 {
					t.Fatalf("%s started the worker again (%d)", how, n)
				}
				if !e.rt.Stopped[w] {
					t.Fatalf("%s did not stop the parked worker", how)
				}
				if e.sessionKept(t, w) {
					t.Fatalf("the session archive outlived the %s", how)
				}
				if l := e.inventoryLiveness(t, w); how == "cancel" && l != protocol.LivenessExited {
					t.Fatalf("a cancelled parked worker's inventory liveness %q, want exited", l)
				}
				err := e.svc.WorkerPark(ctx, w, parkReq(2, 0))
				if !galleyerr.Is(galleyerr.Conflict, err) {
					t.Fatalf("a parking after the %s: %v, want Conflict", how, err)
				}
			})
		})
	}
}

// TestParkingRefusals: a settled worker's parking is refused (Conflict),
// as is one whose state is not a JSON object or is too large, and a
// runtime that cannot resume refuses every parking.
func TestParkingRefusals(t *testing.T) {
	e := newParkEnv(t, nil)
	ctx := context.Background()
	w := e.launch(t, "run-1", "k-ref", "feature/ref")
	for name, st := range map[string]string{"not JSON": `nope`, "an array": `[1]`,
		"too large": `{"s":"` + strings.Repeat("x", workerapi.MaxParkState) + `"}`} {
		err := e.svc.WorkerPark(ctx, w, workerapi.ParkRequest{Parking: 1, State: json.RawMessage(st)})
		if !galleyerr.Is(galleyerr.Invalid, err) {
			t.Errorf("a state %s: %v, want Invalid", name, err)
		}
	}
	e.apply(t, call("run-1", "k-ref-cancel", fmt.Sprintf(`{"type":"cancel-worker","worker":%s}`, workerRef(w))))
	if err := e.svc.WorkerPark(ctx, w, parkReq(1, 0)); !galleyerr.Is(galleyerr.Conflict, err) {
		t.Fatalf("parking a settled worker: %v, want Conflict", err)
	}

	noResume := servicetest.New(t, nil, service.WithRuntime(startOnly{servicetest.NewRuntime()}))
	ne := &env{svc: noResume.Service, store: noResume.Store, clock: service.SystemClock}
	w2 := ne.launch(t, "run-1", "k-nr", "feature/nr")
	if err := ne.svc.WorkerPark(ctx, w2, parkReq(1, 0)); !galleyerr.Is(galleyerr.Invalid, err) {
		t.Fatalf("parking where the runtime cannot resume: %v, want Invalid", err)
	}
}

// startOnly is a runtime without Resume.
type startOnly struct{ *servicetest.Runtime }

func (startOnly) Resume() {} // not service.Resumer's

func replyBody(w, question, body string) string {
	return fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":%q}`, workerRef(w), question, body)
}

func messageBody(w, body string) string {
	return fmt.Sprintf(`{"type":"message-worker","worker":%s,"body":%q}`, workerRef(w), body)
}
