package e2e

// Fault runs against the real binaries: the server killed with SIGKILL at
// random points under the load driver's mixed load and restarted on the
// same data directory; worker harnesses and agents killed; the doorbell
// stalled, failing or slow. Every run is recorded with package history and
// checked against the design's invariants. GALLEY_FAULT_LONG=1 runs more
// kill iterations and the worker inbox under a lost doorbell (up to the
// harness's 25 s long poll per message).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/localserver"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/scripts/load/drive"
)

func faultLong() bool { return os.Getenv("GALLEY_FAULT_LONG") == "1" }

// dumpHistory writes a failing history where GALLEY_HISTORY_DUMP says,
// for a closer look.
func dumpHistory(t *testing.T, ops []history.Op) {
	if path := os.Getenv("GALLEY_HISTORY_DUMP"); path != "" {
		if b, err := json.Marshal(ops); err == nil && os.WriteFile(path, b, 0o600) == nil {
			t.Logf("history written to %s", path)
		}
	}
}

// TestFaultSIGKILLUnderLoad kills `galley serve` with SIGKILL at a random
// point of a mixed load (coordinators launching scripted workers that ask
// and finish, messages, replies, cancels, releases, readers), restarts it
// on the same data directory and port, and lets the load run on: the
// load's whole history, across every kill, must keep every invariant, and
// every resource an applied launch created must still be listed.
func TestFaultSIGKILLUnderLoad(t *testing.T) {
	data := t.TempDir()
	addr := "" // the first server picks its port; restarts keep it
	iterations := 2
	if faultLong() {
		iterations = 5
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	rec := history.NewRecorder()
	var all []history.Op
	kills := 0
	for i := range iterations {
		srv := serverOn(t, data, &addr)
		cfg := drive.MixedConfig{
			Target:       drive.Target{Endpoint: srv.Endpoint, Token: srv.Token, House: "origin89", Backend: "galley", Credential: "galley-token"},
			Duration:     4 * time.Second,
			Settle:       90 * time.Second,
			Coordinators: 2, Workers: 3, Readers: 1,
			AwaitWait: time.Second, CancelAfter: 1500 * time.Millisecond,
			Data: data, ID: fmt.Sprintf("kill%d", i), Seed: seed + uint64(i), Tolerant: true, Recorder: rec,
			// The search for a linearization of a history a kill cut
			// sometimes does not end: an 11,000-op history ran 5 minutes
			// without an answer, where its sibling checked in 138 ms. A
			// minute is ample for one that ends, even on a busy machine;
			// an unknown is logged, and every other invariant is checked.
			LinearizeTimeout: time.Minute,
		}
		done := make(chan *drive.Mixed, 1)
		go func() {
			res, err := drive.RunMixed(context.Background(), cfg)
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		// Kill at a random point of the main phase, restart after a random
		// pause on the same port and data.
		time.Sleep(time.Duration(300+rng.IntN(3200)) * time.Millisecond)
		srv.kill()
		// The killed server applies nothing more: a call it left without
		// an answer took effect, if at all, before now.
		rec.Cut()
		kills++
		time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond)
		again := serverOn(t, data, &addr)
		res := <-done
		if res == nil {
			t.FailNow()
		}
		for _, e := range res.Notes {
			t.Logf("iteration %d: tolerated: %s", i, e)
		}
		for _, e := range res.Errors {
			t.Errorf("iteration %d: %s", i, e)
		}
		for _, u := range res.Report.Unknown {
			t.Logf("iteration %d: NOT CONCLUDED: %s (the other invariants were checked)", i, u)
		}
		if len(res.Errors) > 0 {
			dumpHistory(t, res.Ops)
		}
		t.Logf("iteration %d: main phase %v, end phase %v, checks %v; %d ops, %d launches; %s", i,
			res.MainEnd.Sub(res.Start).Round(time.Millisecond), res.End.Sub(res.MainEnd).Round(time.Millisecond),
			res.CheckTime.Round(time.Millisecond), len(res.Ops), res.Launches, strings.TrimSpace(res.Report.String()))
		if !res.Report.OK() {
			dumpHistory(t, res.Ops)
			t.Fatalf("iteration %d broke an invariant:\n%s", i, res.Report)
		}
		if res.Report.Checked["receipts"] == 0 || res.Report.Checked["posts"] == 0 {
			t.Fatalf("iteration %d: nothing was applied or delivered: the kill proves little", i)
		}
		all = append(all, res.Ops...)
		again.stop(t)
	}
	// Across every kill: receipts, promises and the inventory over the
	// whole history (linearizability was checked per iteration).
	for i := range all {
		all[i].ID = i
	}
	rep := history.Check(all, history.Options{})
	t.Logf("%d kills; whole history: %s", kills, strings.TrimSpace(rep.String()))
	if !rep.OK() {
		t.Fatalf("the history across kills broke an invariant:\n%s", rep)
	}
}

// faultCoordinator is a recording kitchn client for one run.
type faultCoordinator struct {
	t   *testing.T
	c   *history.Client
	run string
	n   int
}

func newFaultCoordinator(t *testing.T, endpoint, token, run string, rec *history.Recorder) *faultCoordinator {
	c, err := history.NewClient(endpoint, token, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Timeout = 5 * time.Second
	return &faultCoordinator{t: t, c: c, run: run}
}

func (f *faultCoordinator) effect(eff string) (history.Op, protocol.Receipt) {
	f.t.Helper()
	f.n++
	key := fmt.Sprintf("%s-k%d", f.run, f.n)
	body := effectBody(f.run, key, eff)
	op, err := f.c.Do(context.Background(), "kitchn", history.Effect, []byte(body), key, 0)
	var a struct {
		Status  string
		Receipt protocol.Receipt
	}
	if err != nil || op.Status != 200 || json.Unmarshal(op.Answer, &a) != nil || a.Status != "applied" {
		f.t.Fatalf("effect %s: %d %s %v", eff, op.Status, op.Answer, err)
	}
	return op, a.Receipt
}

func (f *faultCoordinator) observe(handle string) protocol.Observation {
	f.t.Helper()
	op, err := f.c.Do(context.Background(), "kitchn", history.Observe, []byte(`{"worker":`+workerRes(handle)+`}`), "", 0)
	var o protocol.Observation
	if err != nil || op.Status != 200 || json.Unmarshal(op.Answer, &o) != nil {
		f.t.Fatalf("observe %s: %d %s %v", handle, op.Status, op.Answer, err)
	}
	return o
}

// await waits up to wait for a batch and acknowledges it; every call must
// be answered within wait plus the client's deadline.
func (f *faultCoordinator) await(wait time.Duration) []protocol.MailMessage {
	f.t.Helper()
	ms := wait.Milliseconds()
	body := fmt.Sprintf(`{"run":%q,"coordinator":"c1","waitMs":%d}`, f.run, ms)
	op, err := f.c.Do(context.Background(), "c1", history.Await, []byte(body), "", wait)
	var a protocol.MailboxAnswer
	if err != nil || op.Status != 200 || json.Unmarshal(op.Answer, &a) != nil {
		f.t.Fatalf("await (waitMs %d) was not answered within its bound: %d %s %v", ms, op.Status, op.Answer, err)
	}
	if a.Status != protocol.MailDelivery {
		return nil
	}
	ack := fmt.Sprintf(`{"run":%q,"coordinator":"c1","delivery":%q}`, f.run, a.Delivery.ID)
	if op, err := f.c.Do(context.Background(), "c1", history.Acknowledge, []byte(ack), "", 0); err != nil || op.Status != 200 {
		f.t.Fatalf("acknowledge: %d %v", op.Status, err)
	}
	return a.Delivery.Messages
}

// rowsUntil awaits until match has seen a row, returning every row read.
func (f *faultCoordinator) rowsUntil(wait time.Duration, bound time.Duration, match func(protocol.MailMessage) bool) []protocol.MailMessage {
	f.t.Helper()
	var rows []protocol.MailMessage
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); {
		for _, m := range f.await(wait) {
			rows = append(rows, m)
			if match(m) {
				return rows
			}
		}
	}
	f.t.Fatalf("run %s: the awaited row did not arrive within %v; rows %+v", f.run, bound, rows)
	return nil
}

func harnessPid(t *testing.T, data, handle string) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(data, "workers", handle, "pid"))
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				return pid
			}
		}
	}
	t.Fatalf("worker %s has no pid file", handle)
	return 0
}

// childOf finds a process whose parent is pid (the agent under its
// harness).
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			child, err := strconv.Atoi(filepath.Base(d))
			if err != nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, "stat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
			if len(f) > 1 && f[1] == strconv.Itoa(pid) {
				return child
			}
		}
	}
	t.Fatalf("harness %d has no agent process", pid)
	return 0
}

// TestFaultWorkerProcesses kills a worker's processes three ways: the
// harness stopped (SIGTERM) and the agent killed (SIGKILL) settle the
// worker failed through the harness's exited report; the harness killed
// outright (SIGKILL, it reports nothing) settles the worker failed through
// the server, which sees its process end. Each leaves a worker-done row for
// the coordinator, and a settled worker never changes again.
func TestFaultWorkerProcesses(t *testing.T) {
	data := t.TempDir()
	s := startServer(t, data)
	rec := history.NewRecorder()
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, harness int)
	}{
		{"harness SIGTERM", func(t *testing.T, pid int) { _ = syscall.Kill(pid, syscall.SIGTERM) }},
		{"agent SIGKILL", func(t *testing.T, pid int) { _ = syscall.Kill(childOf(t, pid), syscall.SIGKILL) }},
		{"harness SIGKILL", func(t *testing.T, pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := "fault-" + strings.ReplaceAll(strings.ToLower(tc.name), " ", "-")
			f := newFaultCoordinator(t, s.Endpoint, s.Token, run, rec)
			_, receipt := f.effect(launchEffect("#!galley-script\nstatus "+run+" up\nsleep 1h", ""))
			handle := receipt.Created[0].Handle
			// The agent runs: its first row arrived.
			f.rowsUntil(time.Second, 60*time.Second, func(m protocol.MailMessage) bool { return m.Body == run+" up" })
			if o := f.observe(handle); o.State != protocol.StateReady {
				t.Fatalf("a worker whose agent posted reads %+v", o)
			}
			pid := harnessPid(t, data, handle)
			tc.kill(t, pid)
			{
				rows := f.rowsUntil(time.Second, 60*time.Second, func(m protocol.MailMessage) bool { return m.Kind == protocol.MsgWorkerDone })
				done := rows[len(rows)-1]
				if done.Outcome != protocol.OutcomeFailed || done.Worker == nil || done.Worker.Handle != handle {
					t.Fatalf("exit report row = %+v", done)
				}
				if o := f.observe(handle); o.State != protocol.StateSettled || o.Outcome != protocol.OutcomeFailed {
					t.Fatalf("after the exit report the worker reads %+v", o)
				}
			}
			// Settled for good.
			before := f.observe(handle)
			time.Sleep(300 * time.Millisecond)
			if after := f.observe(handle); after != before {
				t.Fatalf("a settled worker changed: %+v then %+v", before, after)
			}
		})
	}
	if rep := history.Check(rec.Ops(), history.Options{Linearizability: true}); !rep.OK() || len(rep.Unknown) > 0 {
		t.Fatalf("history:\n%s", rep)
	}
}

// stallBell is a doorbell that fails in one of three ways: rings are lost
// (nobody is ever woken), the doorbell is down (every call fails), or
// rings are slow (each waits before it rings, as a slow queue would).
type stallBell struct {
	inner *localbell.Bell
	mode  string
	mu    sync.Mutex
	rings int
}

func (b *stallBell) Ring(ctx context.Context, topic string) error {
	b.mu.Lock()
	b.rings++
	b.mu.Unlock()
	switch b.mode {
	case "lost":
		return nil
	case "down":
		return galleyerr.E(galleyerr.Unavailable, errors.New("doorbell down (injected)"))
	case "slow":
		time.Sleep(400 * time.Millisecond)
	}
	return b.inner.Ring(ctx, topic)
}

func (b *stallBell) Listen(ctx context.Context, topic string) (service.Listener, error) {
	if b.mode == "down" {
		return nil, galleyerr.E(galleyerr.Unavailable, errors.New("doorbell down (injected)"))
	}
	return b.inner.Listen(ctx, topic)
}

// TestFaultStalledDoorbell runs the real server and worker processes with
// a doorbell that loses every ring, is down, or is slow: every await is
// answered within waitMs and its client deadline, and every row the worker
// posted is delivered, in order, with the attention row at the latest when
// the await's wait ends.
func TestFaultStalledDoorbell(t *testing.T) {
	modes := []string{"lost", "down", "slow"}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			data := t.TempDir()
			bell := &stallBell{inner: localbell.New(), mode: mode}
			srv, err := localserver.Start(context.Background(), localserver.Options{Listen: "127.0.0.1:0", House: "origin89",
				Data: data, WorkerBin: filepath.Join(binDir, "galley-worker"), Doorbell: bell,
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = srv.Shutdown(context.Background())
				killWorkers(data)
			})
			tok, _ := os.ReadFile(filepath.Join(data, "private", "token"))
			rec := history.NewRecorder()
			run := "bell-" + mode
			f := newFaultCoordinator(t, srv.Endpoint, strings.TrimSpace(string(tok)), run, rec)
			script := "#!galley-script\nstatus " + run + " one\nescalate " + run + " look :: " + run + " needs attention\nstatus " + run + " two\n"
			if faultLong() {
				script += "wait-message\n"
			}
			script += "sleep 1h"
			launch, receipt := f.effect(launchEffect(script, ""))
			handle := receipt.Created[0].Handle
			rows := f.rowsUntil(1200*time.Millisecond, 90*time.Second, func(m protocol.MailMessage) bool { return m.Body == run+" two" })
			if faultLong() {
				f.effect(`{"type":"message-worker","worker":` + workerRes(handle) + `,"body":"` + run + ` hello"}`)
				rows = append(rows, f.rowsUntil(1200*time.Millisecond, 90*time.Second, func(m protocol.MailMessage) bool {
					return m.Body == "message: "+run+" hello"
				})...)
			}
			var got []string
			for _, m := range rows {
				if m.Kind != protocol.MsgHeartbeat {
					got = append(got, m.Body)
				}
			}
			want := []string{run + " one", run + " needs attention", run + " two"}
			if faultLong() {
				want = append(want, "message: "+run+" hello")
			}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("rows %q, want %q", got, want)
			}
			// The posts, as the script made them, for the history check.
			for i, m := range rows {
				if m.Kind == protocol.MsgHeartbeat {
					continue
				}
				post, _ := json.Marshal(map[string]string{"kind": m.Kind, "subject": m.Subject, "body": m.Body})
				rec.Add(history.Op{Client: handle, Route: history.Post, Run: run, Call: launch.Call, Return: rec.Now(),
					Body: post, Status: 200, Answer: []byte(fmt.Sprintf(`{"id":%q}`, rows[i].ID))})
			}
			f.effect(`{"type":"cancel-worker","worker":` + workerRes(handle) + `}`)
			if o := f.observe(handle); o.State != protocol.StateSettled {
				t.Fatalf("cancelled worker reads %+v", o)
			}
			rep := history.Check(rec.Ops(), history.Options{Linearizability: true})
			if !rep.OK() || len(rep.Unknown) > 0 || rep.Checked["posts"] < 3 {
				t.Fatalf("history:\n%s", rep)
			}
			bell.mu.Lock()
			defer bell.mu.Unlock()
			if bell.rings == 0 {
				t.Fatal("nothing rang the doorbell: the stall proves nothing")
			}
			t.Logf("%d rings %s; %s", bell.rings, mode, strings.TrimSpace(rep.String()))
		})
	}
}
