package drive

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/workerapi"
)

// MixedConfig is a mixed run: coordinators that launch scripted workers and
// answer them, and readers.
type MixedConfig struct {
	Target
	// Duration and MaxRequests bound the main phase; the end phase that
	// settles every worker and drains every mailbox is bounded by Settle.
	Duration    time.Duration
	MaxRequests int64
	Settle      time.Duration
	// Coordinators each own one run (kitchn's houses' coordinators); they
	// keep Workers scripted workers live between them, launching a new one
	// as one settles. Readers call the read routes without pause.
	Coordinators int
	Workers      int
	Readers      int
	// AwaitWait is each await's waitMs; CancelAfter is how long an idle
	// worker lives before its coordinator cancels it.
	AwaitWait   time.Duration
	CancelAfter time.Duration
	// Data is the server's data directory, when on this machine: the
	// harness logs there time each question, for the await wake-up. Both
	// layouts are read: the local server's (<data>/workers/<handle>) and
	// the aws-local stack's ECS stand-in (<data>/aws-local/ecs/procs/
	// workers/<task>, named by the handle its lines carry).
	Data string
	// ServerPID, when set, is the galley process on this machine (the
	// server, or the aws-local gateway); Procs are more process trees, such
	// as the stand-ins (DynamoDB Local, fauxqs). The main phase reports
	// their CPU by process class.
	ServerPID int
	Procs     []int
	// ID names this run's runs, keys and branches (default random).
	ID   string
	Seed uint64
	// Tolerant keeps going through calls that fail or get no outcome (a
	// server being killed and restarted: fault runs).
	Tolerant bool
	// Recorder, when set, is recorded into (a fault run shares one across
	// several drives); default a new one.
	Recorder *history.Recorder `json:"-"`
	Log      io.Writer         `json:"-"`
	// LinearizeTimeout bounds the linearizability search over the run's
	// history (0: history.DefaultLinearizeTimeout).
	LinearizeTimeout time.Duration `json:"-"`
}

func (c *MixedConfig) defaults() {
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = 1 << 40
	}
	if c.Settle <= 0 {
		c.Settle = 90 * time.Second
	}
	c.Coordinators = max(c.Coordinators, 1)
	c.Workers = max(c.Workers, c.Coordinators)
	if c.AwaitWait <= 0 {
		c.AwaitWait = 2 * time.Second
	}
	if c.CancelAfter <= 0 {
		c.CancelAfter = 3 * time.Second
	}
	if c.ID == "" {
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	if c.Recorder == nil {
		c.Recorder = history.NewRecorder()
	}
}

// Worker kinds and their scripts.
const (
	kindAsker   = "asker"   // asks twice, waits for a message in between, finishes
	kindIdle    = "idle"    // no script: ready and idle until cancelled
	kindCrasher = "crasher" // posts a status and exits without an outcome
)

// crasherExit is the code a crasher's script exits with once its status
// was posted.
const crasherExit = 3

type worker struct {
	handle, tag, kind, key string
	worktree               string
	launchOp               int64 // the launch's first call, recorder clock
	launched               time.Time
	answered               time.Time // the launch's applied answer
	settled                bool
	outcome                string
	cancelled, released    bool
	doneSeen               bool
	doneBody               string // the delivered worker-done row's body
	msgBody                string
	msgAt                  time.Time
	q1, q2                 bool // questions answered
}

func brief(kind, tag string) string {
	switch kind {
	case kindAsker:
		return strings.Join([]string{"#!galley-script",
			"status " + tag + " start",
			"ask " + tag + " q1 :: " + tag + " question one",
			"wait-message",
			"ask " + tag + " q2 :: " + tag + " question two",
			"done succeeded " + tag + " done",
		}, "\n")
	case kindCrasher:
		return "#!galley-script\nstatus " + tag + " start\nexit " + strconv.Itoa(crasherExit)
	}
	return tag + ": an idle worker, until cancelled"
}

// scriptedRows are the rows a worker of kind posts, in order, once it ran
// to its end (ranToEnd).
func scriptedRows(w *worker) []workerapi.PostRequest {
	switch w.kind {
	case kindAsker:
		return []workerapi.PostRequest{
			{Kind: protocol.MsgStatus, Body: w.tag + " start"},
			{Kind: protocol.MsgQuestion, Subject: w.tag + " q1", Body: w.tag + " question one"},
			{Kind: protocol.MsgStatus, Body: "reply: " + answer(w, 1)},
			{Kind: protocol.MsgStatus, Body: "message: " + w.msgBody},
			{Kind: protocol.MsgQuestion, Subject: w.tag + " q2", Body: w.tag + " question two"},
			{Kind: protocol.MsgStatus, Body: "reply: " + answer(w, 2)},
			{Kind: protocol.MsgWorkerDone, Outcome: protocol.OutcomeSucceeded, Body: w.tag + " done"},
		}
	case kindCrasher:
		return []workerapi.PostRequest{{Kind: protocol.MsgStatus, Body: w.tag + " start"}}
	}
	return nil
}

// ranToEnd says whether the worker's delivered end shows that its script
// ran to its last directive, so that galley accepted (answered 200) each of
// its scripted posts: the script agent goes past a post only once the post
// succeeded, and a post that failed (a fault that outlasted the harness's
// retries, or an error answer that is not retried) ends the script through
// its failure path instead: an escalation and a done failed, or exit 1.
// An asker ran to its end when it reported succeeded; a crasher when its
// harness reported its exit with crasherExit, which galley's worker-done
// row names (pkg/service WorkerExited).
func ranToEnd(w *worker) bool {
	if !w.doneSeen {
		return false
	}
	switch w.kind {
	case kindAsker:
		return w.outcome == protocol.OutcomeSucceeded
	case kindCrasher:
		return w.outcome == protocol.OutcomeFailed &&
			strings.HasPrefix(w.doneBody, service.AgentExitedBody(crasherExit))
	}
	return false
}

func answer(w *worker, n int) string { return fmt.Sprintf("%s answer %d", w.tag, n) }

// Mixed is the result of a mixed run.
type Mixed struct {
	Config  MixedConfig
	Ops     []history.Op
	Report  history.Report
	Start   time.Time
	MainEnd time.Time // the end of the main phase
	End     time.Time
	Routes  []RouteStats
	// Wake is question posted (the harness's log) → await answered, for
	// awaits that were waiting when the question was posted; Chain is
	// message-worker applied → the worker's next question returned by
	// await, through the real harness and agent (an upper bound of the
	// wake-up).
	Wake, Chain Latency
	// StartUp is launch answered → the harness logged its agent started.
	StartUp  Latency
	Launches int
	Errors   []string
	// Notes are what a tolerant (fault) run let pass: calls without an
	// outcome while the server was down.
	Notes []string
	// CheckTime is how long the invariant checks took.
	CheckTime time.Duration
	// CPU is what the server's and Procs' process trees used in the main
	// phase, by class; SelfCPU is this process's CPU seconds then, and
	// MachineCores the whole machine's busy cores.
	CPU          ProcCPU
	SelfCPU      float64
	MachineCores float64
}

type sample struct {
	handle, question string
	awaitCall        int64 // recorder clock
	awaitReturn      int64
}

type mixed struct {
	cfg   MixedConfig
	c     *caller
	stop  chan struct{}
	mu    sync.Mutex
	known []string // worker handles, for readers
	wakes []sample
	chain []time.Duration
	errs  []string
	notes []string
	ws    []*worker
	logs  map[string]string // worker handle -> its harness log
}

func (m *mixed) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.errs = append(m.errs, fmt.Sprintf(format, args...))
}

// tolerate notes what a fault run expects to go wrong, and fails any
// other run with it.
func (m *mixed) tolerate(format string, args ...any) {
	if !m.cfg.Tolerant {
		m.fail(format, args...)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.notes = append(m.notes, fmt.Sprintf(format, args...))
}

func (m *mixed) stopped() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// RunMixed runs a mixed load and checks its history.
func RunMixed(ctx context.Context, cfg MixedConfig) (*Mixed, error) {
	cfg.defaults()
	c, err := newCaller(cfg.Target, cfg.Recorder, cfg.Log)
	if err != nil {
		return nil, err
	}
	m := &mixed{cfg: cfg, c: c, stop: make(chan struct{})}
	res := &Mixed{Config: cfg, Start: time.Now()}
	first := cfg.Recorder.Len()

	roots := procRoots(cfg.ServerPID, cfg.Procs)
	snap0, self0, mach0 := snapProcs(roots), selfCPU(), machineCPU()
	var stopOnce sync.Once
	var mainEnd time.Time
	closeStop := func() {
		stopOnce.Do(func() {
			mainEnd = time.Now()
			close(m.stop)
			res.CPU = snapProcs(roots).since(snap0)
			res.SelfCPU = selfCPU() - self0
			res.MachineCores = (machineCPU() - mach0) / max(res.CPU.Seconds, 1e-9)
		})
	}
	go func() {
		t := time.NewTimer(cfg.Duration)
		defer t.Stop()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.C:
				closeStop()
				return
			case <-ctx.Done():
				closeStop()
				return
			case <-m.stop:
				return
			case <-tick.C:
				if c.calls.Load() >= cfg.MaxRequests {
					closeStop()
					return
				}
			}
		}
	}()

	var wg sync.WaitGroup
	quota := (cfg.Workers + cfg.Coordinators - 1) / cfg.Coordinators
	for i := range cfg.Coordinators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			co := &coordinator{m: m, run: fmt.Sprintf("load-%s-h%d", cfg.ID, i), quota: quota,
				rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
			co.name = co.run + "-c1"
			co.loop(ctx)
		}()
	}
	var rg sync.WaitGroup
	for i := range cfg.Readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			m.reader(ctx, i)
		}()
	}
	rg.Wait()
	<-m.stop
	c.logf("main phase over after %d calls; settling workers and draining mailboxes", c.calls.Load())
	wg.Wait()
	closeStop()
	res.MainEnd = mainEnd
	c.logf("end phase over after %v; checking %d ops", time.Since(res.MainEnd).Round(time.Millisecond), cfg.Recorder.Len()-first)

	// The last word: what the inventory lists once everything settled.
	_, _ = c.do(context.WithoutCancel(ctx), "final", history.Inventory, nil, "", 0)
	res.End = time.Now()

	ops := cfg.Recorder.Ops()[first:]
	for _, p := range m.expectedPosts(ops) {
		p.ID = len(ops)
		ops = append(ops, p)
	}
	res.Ops = ops
	checkStart := time.Now()
	res.Report = history.Check(ops, history.Options{Linearizability: true, LinearizeTimeout: cfg.LinearizeTimeout})
	res.CheckTime = time.Since(checkStart)
	res.Routes = routeStats(ops, cfg.Recorder, res.Start, res.MainEnd)
	m.logs = harnessLogs(cfg.Data)
	res.Wake, res.Chain, res.StartUp = m.wakeUp(), latencyOf(m.chain), m.startUp()
	res.Errors, res.Notes = m.errs, m.notes
	for _, w := range m.ws {
		if w.handle != "" {
			res.Launches++
		}
	}
	return res, nil
}

// reader calls the read routes as fast as it is answered until the main
// phase ends.
func (m *mixed) reader(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(m.cfg.Seed^0x5eed, uint64(i)))
	name := fmt.Sprintf("load-%s-reader%d", m.cfg.ID, i)
	call := protocol.MailboxCall{Run: fmt.Sprintf("load-%s-r%d", m.cfg.ID, i), Coordinator: name}
	for !m.stopped() && ctx.Err() == nil {
		switch p := rng.IntN(20); {
		case p < 5:
			_, _ = m.c.do(ctx, name, history.Descriptor, nil, "", 0)
		case p < 12:
			m.mu.Lock()
			h := "w-never-launched"
			if len(m.known) > 0 {
				h = m.known[rng.IntN(len(m.known))]
			}
			m.mu.Unlock()
			m.c.observe(ctx, name, h)
		case p < 17:
			m.c.mailbox(ctx, history.Next, call)
		default:
			_, _ = m.c.do(ctx, name, history.Usage, mustJSON(protocol.WorkerCall{Worker: m.c.worker("w-never-launched")}), "", 0)
		}
	}
}

type coordinator struct {
	m       *mixed
	run     string
	name    string
	quota   int
	rng     *rand.Rand
	ws      []*worker
	by      map[string]*worker
	applied []protocol.EffectCall // applied effects, for resubmission and lookup
	n       int                   // effect keys used
	iter    int
	dead    bool // fenced or failed for good
}

func (co *coordinator) key(what string) string {
	co.n++
	return fmt.Sprintf("%s-%s-%d", co.run, what, co.n)
}

func (co *coordinator) patience() time.Duration {
	if co.m.cfg.Tolerant {
		return 3 * time.Minute
	}
	return 45 * time.Second
}

func (co *coordinator) loop(ctx context.Context) {
	co.by = map[string]*worker{}
	m := co.m
	if _, a, ok := m.c.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: co.run, Coordinator: co.name}); !ok || a.Status != "adopted" {
		m.tolerate("%s: first adoption answered %+v", co.run, a)
	}
	for !m.stopped() && ctx.Err() == nil && !co.dead {
		co.iter++
		co.topUp(ctx)
		co.awaitOnce(ctx, m.cfg.AwaitWait)
		co.extras(ctx)
	}
	co.end(ctx)
}

func (co *coordinator) live() int {
	n := 0
	for _, w := range co.ws {
		if !w.settled {
			n++
		}
	}
	return n
}

// topUp launches one worker when fewer than the quota run.
func (co *coordinator) topUp(ctx context.Context) {
	m := co.m
	if co.live() >= co.quota {
		return
	}
	kind := kindAsker
	switch p := co.rng.IntN(20); {
	case p < 5:
		kind = kindIdle
	case p < 8:
		kind = kindCrasher
	}
	w := &worker{kind: kind, key: co.key("launch")}
	w.tag = w.key
	eff := protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "commis", Workspace: &protocol.Workspace{Type: "isolated"}}
	b := brief(kind, w.tag)
	eff.Brief = &b
	if co.rng.IntN(3) == 0 {
		branch := "load/" + w.key
		eff.Branch = &branch
	}
	call := m.c.effect(co.run, "load-task", w.key, eff)
	w.launchOp = m.c.rec.Now()
	w.launched = time.Now()
	co.ws = append(co.ws, w)
	out, err := m.c.apply(ctx, co.name, call, co.patience())
	switch {
	case err != nil:
		m.tolerate("launch %s: %v", w.key, err)
		w.settled = true // unknown: not ours to wait for
		return
	case !out.applied:
		m.fail("launch %s: not applied (%s)", w.key, out.reason)
		w.settled = true
		return
	}
	w.answered = time.Now()
	co.applied = append(co.applied, call)
	w.handle, w.worktree = out.receipt.CreatedHandle(protocol.KindWorker), out.receipt.CreatedHandle(protocol.KindWorktree)
	co.by[w.handle] = w
	m.mu.Lock()
	m.known = append(m.known, w.handle)
	m.ws = append(m.ws, w)
	m.mu.Unlock()
}

// awaitOnce waits for the mailbox, answers what needs answering and
// acknowledges the batch.
func (co *coordinator) awaitOnce(ctx context.Context, wait time.Duration) bool {
	m := co.m
	ms := wait.Milliseconds()
	op, a, ok := m.c.mailbox(ctx, history.Await, protocol.MailboxCall{Run: co.run, Coordinator: co.name, WaitMs: &ms})
	if !ok {
		if op.Status == 0 {
			sleep(ctx, 50*time.Millisecond)
		}
		return false
	}
	switch a.Status {
	case protocol.MailFenced:
		m.fail("%s: coordinator %s fenced without a new adoption", co.run, co.name)
		co.dead = true
		return false
	case protocol.MailDelivery:
		co.process(ctx, op, a.Delivery)
		m.c.mailbox(ctx, history.Acknowledge, protocol.MailboxCall{Run: co.run, Coordinator: co.name, Delivery: a.Delivery.ID})
		return true
	}
	return false
}

func (co *coordinator) process(ctx context.Context, op history.Op, d *protocol.Delivery) {
	m := co.m
	for _, row := range d.Messages {
		if row.Worker == nil {
			m.fail("%s: row %s without its worker", co.run, row.ID)
			continue
		}
		w := co.by[row.Worker.Handle]
		if w == nil {
			continue
		}
		switch row.Kind {
		case protocol.MsgQuestion:
			if op.Route == history.Await {
				m.mu.Lock()
				m.wakes = append(m.wakes, sample{handle: w.handle, question: row.ID, awaitCall: op.Call, awaitReturn: op.Return})
				m.mu.Unlock()
			}
			n := 1
			if strings.HasSuffix(row.Subject, " q2") {
				n = 2
				if w.q2 {
					continue // a replay: answered already
				}
				w.q2 = true
				if !w.msgAt.IsZero() {
					m.mu.Lock()
					m.chain = append(m.chain, m.c.rec.Start().Add(time.Duration(op.Return)).Sub(w.msgAt))
					m.mu.Unlock()
				}
			} else if w.q1 {
				continue
			} else {
				w.q1 = true
			}
			body := answer(w, n)
			q := row.ID
			reply := protocol.WorkerEffect{Type: protocol.OpReply, Worker: ptr(m.c.worker(w.handle)), Question: &q, Body: &body}
			call := m.c.effect(co.run, "load-task", co.key("reply"), reply)
			switch out, err := m.c.apply(ctx, co.name, call, co.patience()); {
			case err != nil:
				m.tolerate("reply to %s: %v", w.handle, err)
			case out.applied:
				co.applied = append(co.applied, call)
			default:
				// The question is live and this is its only reply: galley
				// must take it (refused, the asker would wait for ever),
				// unless a fault run's kill settled the worker first.
				m.tolerate("reply to %s's question %s: not applied (%s)", w.handle, q, out.reason)
			}
			if n == 1 {
				// The script waits for a message next; its body says when
				// it was sent.
				w.msgAt = time.Now()
				w.msgBody = fmt.Sprintf("%s message t=%d", w.tag, w.msgAt.UnixNano())
				msg := protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(m.c.worker(w.handle)), Body: &w.msgBody}
				call := m.c.effect(co.run, "load-task", co.key("message"), msg)
				switch out, err := m.c.apply(ctx, co.name, call, co.patience()); {
				case err != nil:
					m.tolerate("message to %s: %v", w.handle, err)
				case out.applied:
					co.applied = append(co.applied, call)
					w.msgAt = time.Now()
				default:
					m.tolerate("message to %s: not applied (%s)", w.handle, out.reason)
				}
			}
		case protocol.MsgWorkerDone:
			w.doneSeen, w.settled, w.outcome, w.doneBody = true, true, row.Outcome, row.Body
			m.c.observe(ctx, co.name, w.handle)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// extras are the other calls a coordinator makes between waits.
func (co *coordinator) extras(ctx context.Context) {
	m := co.m
	var launched []*worker
	for _, w := range co.ws {
		if w.handle != "" {
			launched = append(launched, w)
		}
	}
	if len(launched) > 0 {
		w := launched[co.rng.IntN(len(launched))]
		if o, ok := m.c.observe(ctx, co.name, w.handle); ok && o.State == protocol.StateSettled && !w.settled {
			w.settled, w.outcome = true, o.Outcome
		}
	}
	for _, w := range launched {
		if w.kind == kindIdle && !w.settled && time.Since(w.launched) > m.cfg.CancelAfter {
			co.cancel(ctx, w)
			break
		}
	}
	for _, w := range launched {
		if w.cancelled && !w.released && co.rng.IntN(3) == 0 {
			co.release(ctx, w)
			break
		}
	}
	switch co.iter % 12 {
	case 2, 8:
		if len(co.applied) > 0 {
			// A resubmission answers the same receipt.
			call := co.applied[co.rng.IntN(len(co.applied))]
			_, _ = m.c.do(ctx, co.name, history.Effect, mustJSON(call), call.Request.Key, 0)
		}
	case 4, 10:
		if len(co.applied) > 0 {
			call := co.applied[co.rng.IntN(len(co.applied))]
			_, _ = m.c.do(ctx, co.name, history.Lookup, mustJSON(call), "", 0)
		}
	case 6:
		// A key reused with another payload applies nothing.
		if len(co.applied) > 0 {
			call := co.applied[co.rng.IntN(len(co.applied))]
			body := "not this"
			eff := protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(m.c.worker("w-none")), Body: &body}
			other := m.c.effect(co.run, "load-task", call.Request.Key, eff)
			op, err := m.c.do(ctx, co.name, history.Effect, mustJSON(other), call.Request.Key, 0)
			if err == nil && op.Status == http.StatusOK && !strings.Contains(string(op.Answer), `"not-applied"`) {
				m.fail("key %s reused with another payload answered %s", call.Request.Key, op.Answer)
			}
		}
	case 9:
		// Absent, then sent: a copy sent after the lookup may apply.
		for _, w := range launched {
			if w.kind == kindIdle && !w.settled {
				body := "hello " + w.tag
				call := m.c.effect(co.run, "load-task", co.key("message"), protocol.WorkerEffect{Type: protocol.OpMessage,
					Worker: ptr(m.c.worker(w.handle)), Body: &body})
				_, _ = m.c.do(ctx, co.name, history.Lookup, mustJSON(call), "", 0)
				if out, err := m.c.apply(ctx, co.name, call, co.patience()); err == nil && out.applied {
					co.applied = append(co.applied, call)
				} else if err != nil {
					m.tolerate("message to %s after its lookup: %v", w.handle, err)
				}
				break
			}
		}
	case 11:
		_, _ = m.c.do(ctx, co.name, history.Inventory, nil, "", 0)
	}
}

func (co *coordinator) cancel(ctx context.Context, w *worker) {
	m := co.m
	call := m.c.effect(co.run, "load-task", co.key("cancel"), protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(m.c.worker(w.handle))})
	out, err := m.c.apply(ctx, co.name, call, co.patience())
	switch {
	case err != nil:
		m.tolerate("cancel %s: %v", w.handle, err)
		return
	case !out.applied:
		m.fail("cancel %s: not applied (%s)", w.handle, out.reason)
		return
	}
	co.applied = append(co.applied, call)
	w.cancelled, w.settled = true, true
	// The very next observe reads settled (the history checks it).
	m.c.observe(ctx, co.name, w.handle)
}

func (co *coordinator) release(ctx context.Context, w *worker) {
	m := co.m
	w.released = true
	for _, r := range []protocol.Resource{m.c.worker(w.handle), {Kind: protocol.KindWorktree, Backend: m.c.t.Backend, Handle: w.worktree}} {
		if r.Handle == "" {
			continue
		}
		call := m.c.effect(co.run, "load-task", co.key("release"), protocol.WorkerEffect{Type: protocol.OpRelease, Resource: &r})
		if out, err := m.c.apply(ctx, co.name, call, co.patience()); err == nil && out.applied {
			co.applied = append(co.applied, call)
		}
	}
	m.c.observe(ctx, co.name, w.handle)
}

// end settles every worker (answering them, cancelling what is left at
// the deadline), drains the mailbox, and hands the run to a new
// coordinator, whose adoption fences this one.
func (co *coordinator) end(ctx context.Context) {
	m := co.m
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(m.cfg.Settle)
	for _, w := range co.ws {
		if w.kind == kindIdle && !w.settled && w.handle != "" {
			co.cancel(ctx, w)
		}
	}
	for time.Now().Before(deadline) && co.live() > 0 && !co.dead {
		co.awaitOnce(ctx, time.Second)
		for _, w := range co.ws {
			if !w.settled && w.handle != "" {
				if o, ok := m.c.observe(ctx, co.name, w.handle); ok && o.State == protocol.StateSettled {
					w.settled, w.outcome = true, o.Outcome
				}
			}
		}
	}
	for _, w := range co.ws {
		if !w.settled && w.handle != "" {
			m.fail("%s: worker %s (%s) did not settle within %v; cancelling", co.run, w.handle, w.kind, m.cfg.Settle)
			co.cancel(ctx, w)
		}
	}
	// Drain: what the workers posted last is delivered and consumed.
	call := protocol.MailboxCall{Run: co.run, Coordinator: co.name}
	for range 200 {
		if co.dead {
			break
		}
		op, a, ok := m.c.mailbox(ctx, history.Next, call)
		if !ok {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		if a.Status != protocol.MailDelivery {
			break
		}
		co.process(ctx, op, a.Delivery)
		m.c.mailbox(ctx, history.Acknowledge, protocol.MailboxCall{Run: co.run, Coordinator: co.name, Delivery: a.Delivery.ID})
	}
	// Hand over: the new coordinator adopts, the old one is fenced.
	next := co.run + "-c2"
	m.c.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: co.run, Coordinator: next})
	if _, a, ok := m.c.mailbox(ctx, history.Next, call); ok && a.Status != protocol.MailFenced {
		m.fail("%s: the old coordinator read %s after the new one adopted", co.run, a.Status)
	}
	m.c.mailbox(ctx, history.Next, protocol.MailboxCall{Run: co.run, Coordinator: next})
}

// expectedPosts turns what the scripts posted into post ops for the
// checkers: for every worker whose delivered end shows its script ran to
// its end (ranToEnd: each of its posts was accepted), each scripted row
// was posted between its launch and the first answer that carried it (or
// the end of the history, if none did: then it is lost). A worker whose
// script stopped early (a post refused or failed under faults) is left
// out: which of its posts were accepted is not known here.
func (m *mixed) expectedPosts(ops []history.Op) []history.Op {
	type seen struct {
		id  string
		ret int64
	}
	first := map[string]seen{} // run + row content -> first answer carrying it
	var last int64
	for _, op := range ops {
		if op.Return != history.Pending {
			last = max(last, op.Return)
		}
		switch op.Route {
		case history.Next, history.Await, history.Acknowledge:
		default:
			continue
		}
		if op.Status != http.StatusOK {
			continue
		}
		var call protocol.MailboxCall
		var a protocol.MailboxAnswer
		if decode(op.Body, &call) != nil || decode(op.Answer, &a) != nil || a.Delivery == nil {
			continue
		}
		for _, r := range a.Delivery.Messages {
			if r.Worker == nil {
				continue
			}
			k := call.Run + "\x00" + r.Worker.Handle + "\x00" + r.Kind + "\x00" + r.Subject + "\x00" + r.Body
			if s, ok := first[k]; !ok || op.Return < s.ret {
				first[k] = seen{r.ID, op.Return}
			}
		}
	}
	var out []history.Op
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.ws {
		if w.handle == "" || !ranToEnd(w) {
			continue
		}
		run := runOf(w.key)
		for _, row := range scriptedRows(w) {
			k := run + "\x00" + w.handle + "\x00" + row.Kind + "\x00" + row.Subject + "\x00" + row.Body
			s, ok := first[k]
			if !ok {
				s = seen{ret: last}
			}
			out = append(out, history.Op{Client: w.handle, Route: history.Post, Run: run, Call: w.launchOp,
				Return: s.ret, Body: mustJSON(row), Status: http.StatusOK, Answer: mustJSON(workerapi.PostAnswer{ID: s.id})})
		}
	}
	return out
}

// runOf recovers the run from a key "<run>-launch-<n>".
func runOf(key string) string {
	i := strings.LastIndex(key, "-launch-")
	if i < 0 {
		return ""
	}
	return key[:i]
}
