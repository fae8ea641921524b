package drive

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/awsfault"
	"github.com/galley-run/galley/pkg/history"
	"github.com/galley-run/galley/pkg/protocol"
)

// TakeoverConfig is a takeover run: coordinators launch scripted workers,
// reply to their questions, message, cancel and release them while the
// server is killed with SIGKILL at random points and started again on the
// same data (and, with --inject-aws-faults in its flags, its DynamoDB and
// SQS calls fail, time out and lose their answers). Each effect is given
// a short patience and then left uncertain, as a coordinator that crashed
// would leave it; after the last fault every uncertain key is sent again
// until it is definite, every key is looked up, and every applied effect
// must be visible at its worker.
type TakeoverConfig struct {
	// Target's Token is read from <Server.Data>/private/token once the server
	// started.
	Target
	Server *GalleyServer `json:"-"`
	// Duration is the main phase; Kills SIGKILLs fall at random points in
	// its first KillWindow (default the whole phase), each followed by a
	// restart after 50 to 750 ms. A window shorter than the phase leaves
	// the last incarnation under AWS faults running for the rest: only its
	// counts are reported (a killed one takes its counts with it).
	Duration   time.Duration
	KillWindow time.Duration
	Kills      int
	// UntilApplied goes on with the main phase past Duration, up to this
	// long in all, until a launch, a reply and a message were applied in
	// it: a busy machine starts workers slowly, and a phase that applied
	// only launches proves little. Zero ends the phase at Duration.
	UntilApplied time.Duration
	// Coordinators each drive workers one after another; Messages is how
	// many messages each worker is sent.
	Coordinators int
	Messages     int
	// Lease is the server's claim lease (pkg/service: 30 s by default,
	// which galley serve does not change): every key must be definite two
	// leases after the last fault.
	Lease time.Duration
	// Patience is how long the main phase retries an effect before leaving
	// it uncertain (default 250 ms: one or two tries).
	Patience time.Duration
	// QuestionWait bounds how long a coordinator waits for its worker's
	// question before it goes on to the next worker (default 5 s; a
	// machine busy with other work starts workers more slowly).
	QuestionWait time.Duration
	// Visible bounds the wait for an applied effect to show at its worker
	// (default 45 s: a harness's inbox retry backs off across restarts).
	Visible time.Duration
	ID      string
	Seed    uint64
	Log     io.Writer `json:"-"`
}

func (c *TakeoverConfig) defaults() {
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	c.UntilApplied = max(c.UntilApplied, c.Duration)
	if c.KillWindow <= 0 || c.KillWindow > c.Duration {
		c.KillWindow = c.Duration
	}
	c.Coordinators = max(c.Coordinators, 1)
	if c.Messages <= 0 {
		c.Messages = 2
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.Patience <= 0 {
		c.Patience = 250 * time.Millisecond
	}
	if c.QuestionWait <= 0 {
		c.QuestionWait = 5 * time.Second
	}
	if c.Visible <= 0 {
		c.Visible = 45 * time.Second
	}
	if c.ID == "" {
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.ID = hex.EncodeToString(b[:])
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// KeyEnd is how one key ended.
type KeyEnd struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`           // launch, reply, message, cancel, release
	Worker string `json:"worker,omitempty"` // the worker it targets or launched
	// Status is the final lookup's answer: applied, not-applied, absent or
	// unknown; Reason a not-applied reason.
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
	// Answer is the definite answer its sender got (a refusal need not be
	// recorded: its lookup may then answer absent, which promises the
	// same).
	Answer string `json:"answer,omitempty"`
	// Uncertain is set when the main phase left the key without a
	// definite answer; Converged is then last fault → definite.
	Uncertain bool          `json:"uncertain,omitempty"`
	Converged time.Duration `json:"converged,omitempty"`
	// Visible says what showed the applied effect (or what was missing).
	Visible string `json:"visible,omitempty"`
}

// Takeover is the result of a takeover run.
type Takeover struct {
	Config    TakeoverConfig
	Start     time.Time
	LastFault time.Time
	End       time.Time
	// MainPhase is how long the main phase ran (past Duration when
	// UntilApplied extended it).
	MainPhase time.Duration
	Kills     int
	// AWSFaults are the fault counts the server printed at a graceful
	// stop (the incarnation under faults that ended the main phase), and
	// FaultCounts the same counts as it logged them (nil when it ran
	// without faults or logged none).
	AWSFaults   []string
	FaultCounts *awsfault.PlanCounts `json:",omitempty"`
	Keys        []KeyEnd
	// Counts are keys per final status ("not-applied rejected" with its
	// reason); Uncertain the keys the main phase left uncertain.
	Counts    map[string]int
	Uncertain int
	// MaxConverge is the longest last fault → definite of those keys.
	MaxConverge time.Duration
	Calls       int
	// StartingAtEnd counts the workers still starting once every key
	// was definite and every applied effect visible; StartingWithoutTask
	// those among them whose compute the inventory did not show live (a
	// worker that would count against maxWorkers for ever). The run
	// fails on any of the latter.
	StartingAtEnd       int
	StartingWithoutTask int
	Report              history.Report
	Failures            []string
	Notes               []string
	Ops                 []history.Op `json:"-"`
}

type tkey struct {
	call     protocol.EffectCall
	effect   string
	w        *tworker
	question string
	done     bool // a definite answer
	out      outcome
	unsure   bool
	conv     time.Duration
	end      KeyEnd
}

type tworker struct {
	tag, handle string
	launch      *tkey
	question    string
	cancelled   bool // a cancel answered applied
	released    bool // a release answered applied
}

type takeover struct {
	cfg  TakeoverConfig
	c    *caller
	stop chan struct{}
	mu   sync.Mutex
	keys []*tkey
	ws   []*tworker
	errs []string
	note []string
	// applied counts the effects the main phase saw applied, by kind.
	applied map[string]int
}

// enoughApplied says whether the main phase has applied a launch, a reply
// and a message: each path through the server was taken at least once.
func (t *takeover) enoughApplied() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied["launch"] > 0 && t.applied["reply"] > 0 && t.applied["message"] > 0
}

func (t *takeover) fail(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs = append(t.errs, fmt.Sprintf(format, args...))
}

func (t *takeover) notef(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.note = append(t.note, fmt.Sprintf(format, args...))
}

func (t *takeover) stopped() bool {
	select {
	case <-t.stop:
		return true
	default:
		return false
	}
}

// RunTakeover starts the server, runs the takeover load with its faults,
// converges every key, looks each up, checks that applied effects are
// visible, and stops the server and its workers.
func RunTakeover(ctx context.Context, cfg TakeoverConfig) (*Takeover, error) {
	cfg.defaults()
	srv := cfg.Server
	if srv == nil {
		return nil, fmt.Errorf("takeover: no server to run")
	}
	endpoint, err := srv.Start(nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		srv.Stop()
		srv.KillWorkers()
	}()
	tok, err := readTokenFile(filepath.Join(srv.Data, "private", "token"))
	if err != nil {
		return nil, err
	}
	cfg.Endpoint, cfg.Token = endpoint, tok
	rec := history.NewRecorder()
	c, err := newCaller(cfg.Target, rec, cfg.Log)
	if err != nil {
		return nil, err
	}
	c.c.Timeout = 5 * time.Second
	t := &takeover{cfg: cfg, c: c, stop: make(chan struct{}), applied: map[string]int{}}
	res := &Takeover{Config: cfg, Start: time.Now(), Counts: map[string]int{}}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7a4e))

	var wg sync.WaitGroup
	for i := range cfg.Coordinators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			co := &tcoord{t: t, run: fmt.Sprintf("takeover-%s-h%d", cfg.ID, i), rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
			co.name = co.run + "-c1"
			co.loop(ctx)
		}()
	}

	// The faults: kills at random points of the main phase.
	at := make([]time.Duration, cfg.Kills)
	for i := range at {
		at[i] = time.Duration(rng.Int64N(int64(cfg.KillWindow)))
	}
	sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
	restartErr := error(nil)
	for _, d := range at {
		sleep(ctx, time.Until(res.Start.Add(d)))
		if ctx.Err() != nil {
			break
		}
		srv.Kill()
		rec.Cut() // the killed server applies nothing after this
		res.Kills++
		res.LastFault = time.Now()
		c.logf("killed the server (%d of %d)", res.Kills, cfg.Kills)
		sleep(ctx, time.Duration(50+rng.IntN(700))*time.Millisecond)
		if _, err := srv.Start(nil); err != nil {
			restartErr = err
			break
		}
	}
	sleep(ctx, time.Until(res.Start.Add(cfg.Duration)))
	if !t.enoughApplied() && cfg.UntilApplied > cfg.Duration {
		c.logf("main phase: too little applied after %s; going on until a launch, a reply and a message are, for up to %s in all", cfg.Duration, cfg.UntilApplied)
		for !t.enoughApplied() && time.Now().Before(res.Start.Add(cfg.UntilApplied)) && ctx.Err() == nil {
			sleep(ctx, 250*time.Millisecond)
		}
	}
	res.MainPhase = time.Since(res.Start).Round(time.Millisecond)
	close(t.stop)
	wg.Wait()
	if restartErr != nil {
		return nil, fmt.Errorf("restart after a kill: %w", restartErr)
	}
	// Faults end here: a server under injected AWS faults is stopped (its
	// counts printed) and started without them.
	if clean := WithoutFaults(srv.Args); len(clean) != len(srv.Args) {
		srv.Stop()
		rec.Cut()
		res.LastFault = time.Now()
		for _, out := range srv.Outputs {
			for line := range strings.SplitSeq(out, "\n") {
				if strings.Contains(line, faultCountsMsg) {
					res.AWSFaults = append(res.AWSFaults, strings.TrimSpace(line))
				}
			}
		}
		if n := len(srv.Logs); n > 0 {
			res.FaultCounts = loggedFaultCounts(srv.Logs[n-1])
		}
		if _, err := srv.Start(clean); err != nil {
			return nil, fmt.Errorf("restart without faults: %w", err)
		}
	}
	if res.LastFault.IsZero() {
		res.LastFault = time.Now()
	}
	c.logf("main phase over; converging %d keys within two leases (%v) of the last fault", len(t.keys), 2*cfg.Lease)
	ctx = context.WithoutCancel(ctx)
	t.converge(ctx, res.LastFault.Add(2*cfg.Lease))
	t.lookupAll(ctx)
	t.visible(ctx)
	res.StartingAtEnd, res.StartingWithoutTask = t.starting(ctx)
	t.cleanup(ctx)
	res.End = time.Now()

	res.Ops = rec.Ops()
	for i := range res.Ops {
		res.Ops[i].ID = i
	}
	res.Calls = len(res.Ops)
	res.Report = history.Check(res.Ops, history.Options{})
	for _, k := range t.keys {
		res.Keys = append(res.Keys, k.end)
		name := k.end.Status
		if k.end.Reason != "" {
			name += " " + k.end.Reason
		}
		res.Counts[name]++
		if k.unsure {
			res.Uncertain++
			res.MaxConverge = max(res.MaxConverge, k.conv)
		}
	}
	res.Failures, res.Notes = t.errs, t.note
	return res, nil
}

// OK reports whether every key is definite, every applied effect visible
// and the history kept every invariant.
func (r *Takeover) OK() bool { return len(r.Failures) == 0 && r.Report.OK() }

// faultCountsMsg is the message of the log line in which galley-dev serve
// logs its fault plan's counts at a graceful stop (awsfault.Plan.LogCounts).
const faultCountsMsg = "AWS faults injected"

// loggedFaultCounts reads the fault counts from an incarnation's JSON log,
// or nil when it logged none.
func loggedFaultCounts(log string) *awsfault.PlanCounts {
	for line := range strings.SplitSeq(log, "\n") {
		var l struct {
			Msg string `json:"msg"`
			awsfault.PlanCounts
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == faultCountsMsg {
			return &l.PlanCounts
		}
	}
	return nil
}

func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

type tcoord struct {
	t         *takeover
	run, name string
	rng       *rand.Rand
	n         int
}

func (co *tcoord) key(what string) string {
	co.n++
	return fmt.Sprintf("%s-%s-%d", co.run, what, co.n)
}

// send gives an effect the main phase's patience and records how it came
// out: definite, or left uncertain for the convergence.
func (co *tcoord) send(ctx context.Context, k *tkey) {
	t := co.t
	t.mu.Lock()
	t.keys = append(t.keys, k)
	t.mu.Unlock()
	out, err := t.c.apply(ctx, co.name, k.call, t.cfg.Patience)
	if err != nil {
		k.unsure = true
		return
	}
	k.done, k.out = true, out
	if out.applied {
		t.mu.Lock()
		t.applied[k.effect]++
		t.mu.Unlock()
	}
}

func (co *tcoord) effect(ctx context.Context, what string, w *tworker, eff protocol.WorkerEffect) *tkey {
	k := &tkey{effect: what, w: w, call: co.t.c.effect(co.run, "takeover-task", co.key(what), eff)}
	if eff.Question != nil {
		k.question = *eff.Question
	}
	co.send(ctx, k)
	return k
}

func (co *tcoord) loop(ctx context.Context) {
	t := co.t
	t.c.mailbox(ctx, history.Adopt, protocol.MailboxCall{Run: co.run, Coordinator: co.name})
	for !t.stopped() && ctx.Err() == nil {
		co.worker(ctx)
	}
}

// worker drives one worker through its life: launch, its question
// answered (sometimes by two competing replies), messages, and sometimes
// a cancel and a release; now and then a cancel of a worker that never
// existed, which must be refused.
func (co *tcoord) worker(ctx context.Context) {
	t := co.t
	m := t.cfg.Messages
	w := &tworker{}
	w.tag = fmt.Sprintf("%s-w%d", co.run, co.n+1)
	lines := []string{"#!galley-script", "status " + w.tag + " start", "ask " + w.tag + " q1 :: " + w.tag + " question"}
	for range m + 1 { // the last wait holds the worker live until it is cancelled
		lines = append(lines, "wait-message")
	}
	brief := strings.Join(lines, "\n")
	eff := protocol.WorkerEffect{Type: protocol.OpLaunch, Role: "commis", Workspace: &protocol.Workspace{Type: "isolated"}, Brief: &brief}
	t.mu.Lock()
	t.ws = append(t.ws, w)
	t.mu.Unlock()
	w.launch = co.effect(ctx, "launch", w, eff)
	if co.rng.IntN(4) == 0 {
		never := fmt.Sprintf("w-never-%s-%d", co.run, co.n)
		co.effect(ctx, "cancel", &tworker{handle: never}, protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(t.c.worker(never))})
	}
	if !w.launch.done || !w.launch.out.applied {
		return // uncertain: the convergence finds out
	}
	w.handle = handleOf(w.launch.out.receipt)
	// Its question.
	for deadline := time.Now().Add(t.cfg.QuestionWait); w.question == "" && time.Now().Before(deadline) && ctx.Err() == nil && !t.stopped(); {
		co.await(ctx, w)
	}
	if w.question == "" {
		if !t.stopped() {
			t.notef("%s: no question within %s", w.handle, t.cfg.QuestionWait)
		}
		return
	}
	bodies := []string{w.tag + " answer"}
	if co.rng.IntN(3) == 0 {
		bodies = append(bodies, w.tag+" other answer")
	}
	var rg sync.WaitGroup
	for _, b := range bodies {
		q, b := w.question, b
		k := &tkey{effect: "reply", w: w, question: q, call: t.c.effect(co.run, "takeover-task", co.key("reply"),
			protocol.WorkerEffect{Type: protocol.OpReply, Worker: ptr(t.c.worker(w.handle)), Question: &q, Body: &b})}
		rg.Add(1)
		go func() { defer rg.Done(); co.send(ctx, k) }()
	}
	rg.Wait()
	allApplied := true
	for i := range m {
		body := fmt.Sprintf("%s message %d", w.tag, i)
		k := co.effect(ctx, "message", w, protocol.WorkerEffect{Type: protocol.OpMessage, Worker: ptr(t.c.worker(w.handle)), Body: &body})
		allApplied = allApplied && k.done && k.out.applied
	}
	// A cancel only once every message is in the worker's harness log, so
	// a message answered applied is never cut off by its own cancel.
	if allApplied && co.rng.IntN(2) == 0 && waitLog(ctx, t.cfg.Server.Data, w.handle, 3*time.Second, func(l wlog) bool { return l.messages >= m }) {
		k := co.effect(ctx, "cancel", w, protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(t.c.worker(w.handle))})
		if k.done && k.out.applied && co.rng.IntN(3) == 0 {
			co.effect(ctx, "release", w, protocol.WorkerEffect{Type: protocol.OpRelease, Resource: ptr(t.c.worker(w.handle))})
		}
	}
}

// await reads the run's mailbox once, notes w's question, acknowledges.
func (co *tcoord) await(ctx context.Context, w *tworker) {
	t := co.t
	wait := int64(1000)
	_, a, ok := t.c.mailbox(ctx, history.Await, protocol.MailboxCall{Run: co.run, Coordinator: co.name, WaitMs: &wait})
	if !ok {
		sleep(ctx, 100*time.Millisecond)
		return
	}
	if a.Status != protocol.MailDelivery || a.Delivery == nil {
		return
	}
	for _, row := range a.Delivery.Messages {
		if row.Kind == protocol.MsgQuestion && row.Worker != nil && row.Worker.Handle == w.handle {
			w.question = row.ID
		}
	}
	t.c.mailbox(ctx, history.Acknowledge, protocol.MailboxCall{Run: co.run, Coordinator: co.name, Delivery: a.Delivery.ID})
}

func handleOf(r protocol.Receipt) string {
	for _, c := range r.Created {
		if c.Kind == protocol.KindWorker {
			return c.Handle
		}
	}
	return ""
}

// converge sends every uncertain key again, as kitchn does, until it is
// definite or the deadline (two leases after the last fault) passes.
func (t *takeover) converge(ctx context.Context, deadline time.Time) {
	lastFault := deadline.Add(-2 * t.cfg.Lease)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, k := range t.keys {
		if k.done {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out, err := t.c.apply(ctx, "converge", k.call, time.Until(deadline))
			if err == nil {
				k.done, k.out, k.conv = true, out, time.Since(lastFault)
			}
		}()
	}
	wg.Wait()
	// A launch that converged applied names its worker now.
	for _, w := range t.ws {
		if w.handle == "" && w.launch != nil && w.launch.done && w.launch.out.applied {
			w.handle = handleOf(w.launch.out.receipt)
		}
	}
	for _, k := range t.keys {
		if k.effect == "cancel" && k.done && k.out.applied {
			k.w.cancelled = true
		}
		if k.effect == "release" && k.done && k.out.applied {
			k.w.released = true
		}
	}
}

// lookupAll looks up every key the run sent; the answer is how it ended.
func (t *takeover) lookupAll(ctx context.Context) {
	for _, k := range t.keys {
		k.end = KeyEnd{Key: k.call.Request.Key, Effect: k.effect, Uncertain: k.unsure, Converged: k.conv}
		if k.w != nil {
			k.end.Worker = k.w.handle
		}
		if k.done {
			k.end.Answer = protocol.StatusApplied
			if !k.out.applied {
				k.end.Answer = protocol.StatusNotApplied + " " + k.out.reason
			}
		}
		var a effectAnswer
		got := false
		for try := 0; try < 5 && !got; try++ {
			op, err := t.c.do(ctx, "audit", history.Lookup, mustJSON(k.call), "", 0)
			got = err == nil && op.Status == http.StatusOK && json.Unmarshal(op.Answer, &a) == nil
			if !got {
				sleep(ctx, 200*time.Millisecond)
			}
		}
		if !got {
			k.end.Status = protocol.StatusUnknown
			t.fail("%s: lookup never answered", k.end.Key)
			continue
		}
		k.end.Status, k.end.Reason = a.Status, a.Reason
		switch {
		case a.Status == protocol.StatusUnknown:
			t.fail("%s (%s): still unknown two leases after the last fault", k.end.Key, k.effect)
		case k.done && k.out.applied && a.Status != protocol.StatusApplied:
			t.fail("%s: answered applied, looked up %s", k.end.Key, a.Status)
		case k.done && !k.out.applied && a.Status != protocol.StatusNotApplied && a.Status != protocol.StatusAbsent:
			t.fail("%s: answered not-applied (%s), looked up %s", k.end.Key, k.out.reason, a.Status)
		case !k.done && a.Status == protocol.StatusApplied:
			// Converged only through the lookup: its receipt is the one.
			k.done, k.out = true, outcome{applied: true, receipt: a.Receipt}
		}
		if k.effect == "launch" && a.Status == protocol.StatusApplied && k.w.handle == "" {
			k.w.handle = handleOf(a.Receipt)
			k.end.Worker = k.w.handle
		}
		if k.effect == "cancel" && k.w.launch == nil && a.Status == protocol.StatusApplied {
			t.fail("%s: a cancel of a worker that never existed applied", k.end.Key)
		}
	}
}

// wlog is what a worker's harness log shows of its inbox.
type wlog struct {
	messages int
	replies  map[string]int // question -> reply items
}

func readWorkerLog(data, handle string) wlog {
	l := wlog{replies: map[string]int{}}
	b, err := os.ReadFile(filepath.Join(data, "workers", handle, "harness.log"))
	if err != nil {
		return l
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		var e struct {
			Msg      string `json:"msg"`
			Kind     string `json:"kind"`
			Question string `json:"question"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Msg != "inbox item" {
			continue
		}
		switch e.Kind {
		case "message":
			l.messages++
		case "reply":
			l.replies[e.Question]++
		}
	}
	return l
}

// waitLog polls a worker's harness log until ok holds or bound passes.
func waitLog(ctx context.Context, data, handle string, bound time.Duration, ok func(wlog) bool) bool {
	for deadline := time.Now().Add(bound); ; {
		if ok(readWorkerLog(data, handle)) {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// visible checks every applied effect at its worker: a launched worker
// observed, a cancelled one settled, a released one missing, each applied
// reply in its worker's inbox exactly once, as many message items as
// messages applied.
func (t *takeover) visible(ctx context.Context) {
	type want struct {
		messages int
		replies  map[string]int
		keys     []*tkey
	}
	per := map[*tworker]*want{}
	for _, k := range t.keys {
		if k.end.Status != protocol.StatusApplied || k.w == nil || k.w.launch == nil {
			continue
		}
		wt := per[k.w]
		if wt == nil {
			wt = &want{replies: map[string]int{}}
			per[k.w] = wt
		}
		wt.keys = append(wt.keys, k)
		switch k.effect {
		case "message":
			wt.messages++
		case "reply":
			wt.replies[k.question]++
		}
	}
	deadline := time.Now().Add(t.cfg.Visible)
	for w, wt := range per {
		if w.handle == "" {
			t.fail("%s: launch applied without a worker in its receipt", w.launch.end.Key)
			continue
		}
		o, ok := t.c.observe(ctx, "audit", w.handle)
		state := o.State
		if !ok {
			state = "unanswered"
		}
		for q, n := range wt.replies {
			if n > 1 {
				t.fail("%s: %d replies answered applied to question %s", w.handle, n, q)
			}
		}
		complete := func(l wlog) bool {
			if l.messages < wt.messages {
				return false
			}
			for q := range wt.replies {
				if l.replies[q] < 1 {
					return false
				}
			}
			return true
		}
		// A released worker's inbox is gone with it; its log still shows
		// what it read.
		waitLog(ctx, t.cfg.Server.Data, w.handle, time.Until(deadline), complete)
		l := readWorkerLog(t.cfg.Server.Data, w.handle)
		for _, k := range wt.keys {
			switch k.effect {
			case "launch":
				k.end.Visible = "observed " + state
				if state == "unanswered" || (state == protocol.StateMissing && !w.released) {
					t.fail("%s: launch applied, its worker %s observed %s", k.end.Key, w.handle, state)
				}
			case "cancel":
				k.end.Visible = "observed " + state + " " + o.Outcome
				if state != protocol.StateSettled && !(w.released && state == protocol.StateMissing) {
					t.fail("%s: cancel applied, its worker %s observed %s", k.end.Key, w.handle, state)
				}
			case "release":
				k.end.Visible = "observed " + state
				if state != protocol.StateMissing {
					t.fail("%s: release applied, its worker %s observed %s", k.end.Key, w.handle, state)
				}
			case "reply":
				n := l.replies[k.question]
				k.end.Visible = fmt.Sprintf("%d reply item(s) for %s", n, k.question)
				if n != 1 {
					t.fail("%s: reply applied, delivered %d times to %s", k.end.Key, n, w.handle)
				}
			case "message":
				k.end.Visible = fmt.Sprintf("%d message item(s) for %d applied", l.messages, wt.messages)
				if l.messages != wt.messages {
					t.fail("%s: message applied; %s's inbox delivered %d messages for %d applied", k.end.Key, w.handle, l.messages, wt.messages)
				}
			}
		}
	}
}

// startingBound is how long a worker still starting at the end may take
// to show its compute live, or to leave starting.
const startingBound = 15 * time.Second

// starting finds the workers still starting at the end and checks that
// each has its compute: the inventory's liveness live. A worker starting
// without one was left by a launch cut between its record and its task
// (or a task refused without a settle), and would hold a place under
// maxWorkers for ever. It answers how many were starting, and how many of
// those had no compute within startingBound.
func (t *takeover) starting(ctx context.Context) (atEnd, without int) {
	seen := map[string]bool{}
	pending := map[string]bool{}
	for _, w := range t.ws {
		if w.handle == "" || w.released || seen[w.handle] {
			continue
		}
		seen[w.handle] = true
		if o, ok := t.c.observe(ctx, "audit", w.handle); ok && o.State == protocol.StateStarting {
			pending[w.handle] = true
		}
	}
	atEnd = len(pending)
	last := map[string]string{}
	for deadline := time.Now().Add(startingBound); len(pending) > 0; {
		if op, err := t.c.do(ctx, "audit", history.Inventory, nil, "", 0); err == nil && op.Status == http.StatusOK {
			var inv protocol.Inventory
			if json.Unmarshal(op.Answer, &inv) == nil {
				for _, row := range inv.Resources {
					if pending[row.Resource.Handle] {
						last[row.Resource.Handle] = row.Liveness
						if row.Liveness == protocol.LivenessLive {
							delete(pending, row.Resource.Handle)
						}
					}
				}
			}
		}
		for h := range pending {
			if o, ok := t.c.observe(ctx, "audit", h); ok && o.State != protocol.StateStarting {
				delete(pending, h) // it moved on: its compute ran, or it settled
			}
		}
		if len(pending) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	for h := range pending {
		t.fail("%s: still starting at the end with no compute live (inventory liveness %q)", h, last[h])
	}
	return atEnd, len(pending)
}

// cleanup cancels every worker still live (these cancels come after the
// faults, and are not reported as the run's keys).
func (t *takeover) cleanup(ctx context.Context) {
	for _, w := range t.ws {
		if w.handle == "" || w.cancelled || w.released {
			continue
		}
		call := t.c.effect("takeover-"+t.cfg.ID+"-cleanup", "takeover-task", "takeover-"+t.cfg.ID+"-cleanup-"+w.handle,
			protocol.WorkerEffect{Type: protocol.OpCancel, Worker: ptr(t.c.worker(w.handle))})
		if _, err := t.c.apply(ctx, "cleanup", call, 10*time.Second); err != nil {
			t.notef("cleanup: cancel %s: %v", w.handle, err)
		}
	}
}

// dynamoWrites are the DynamoDB operations that write.
var dynamoWrites = []string{"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}

// ResendsAfterAppliedWrites counts the DynamoDB writes that were applied
// and then answered a 500 or a reset connection, so that the SDK sent
// them again (awsfault's server-error and reset act after the request
// reached DynamoDB).
func ResendsAfterAppliedWrites(c awsfault.PlanCounts) int {
	n := 0
	for _, op := range dynamoWrites {
		n += c.ByOperation[op][awsfault.ServerError.String()] + c.ByOperation[op][awsfault.Reset.String()]
	}
	return n
}
