package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// CheckInfo describes one check for listings.
type CheckInfo struct {
	Name        string
	Description string
	// Effects says the check launches, messages, cancels or releases real
	// workers (and may create a branch).
	Effects bool
}

// Checks lists every check in the order a run performs them.
func Checks() []CheckInfo {
	out := make([]CheckInfo, len(allChecks))
	for i, c := range allChecks {
		out[i] = CheckInfo{Name: c.name, Description: c.desc, Effects: c.effects}
	}
	return out
}

// Selected lists the checks cfg selects, in run order.
func Selected(cfg Config) []CheckInfo {
	var out []CheckInfo
	for _, c := range Checks() {
		if selected(cfg.Only, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

func selected(only []string, name string) bool {
	if len(only) == 0 {
		return true
	}
	for _, n := range only {
		if n == name {
			return true
		}
	}
	return false
}

type check struct {
	name    string
	desc    string
	effects bool
	run     func(*suite, context.Context) error
}

func findCheck(name string) *check {
	for i := range allChecks {
		if allChecks[i].name == name {
			return &allChecks[i]
		}
	}
	return nil
}

func checkNames() []string {
	out := make([]string, len(allChecks))
	for i, c := range allChecks {
		out[i] = c.name
	}
	return out
}

// Run performs the selected checks in order against cfg's endpoint and
// reports each. Checks that need a worker share the one the first of them
// launches, so a selection of one check still sets up what it needs.
func Run(ctx context.Context, cfg Config) Report {
	if err := cfg.Validate(); err != nil {
		return Report{Err: err}
	}
	s := newSuite(cfg)
	defer s.c.CloseIdle()
	var rep Report
	for _, c := range allChecks {
		if !selected(cfg.Only, c.name) {
			continue
		}
		res := Result{Name: c.name, Effects: c.effects}
		switch {
		case c.effects && cfg.NoEffects:
			res.Status, res.Reason = Skip, "performs real effects (--no-effects)"
		case ctx.Err() != nil:
			res.Status, res.Reason = Skip, "run interrupted"
		default:
			start := time.Now()
			err := c.run(s, ctx)
			res.Elapsed = time.Since(start)
			if err != nil {
				res.Status, res.Reason = Fail, s.redact(err.Error())
			} else {
				res.Status = Pass
			}
		}
		rep.Results = append(rep.Results, res)
		if cfg.OnResult != nil {
			cfg.OnResult(res)
		}
	}
	// Clean up even when the caller's context is done: a worker left
	// running costs money.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*cfg.Timeout)
	defer cancel()
	for _, n := range s.cleanup(cctx) {
		rep.Notes = append(rep.Notes, s.redact(n))
	}
	return rep
}

// suite is one run's state: the client, a random id that makes every run,
// key, branch and coordinator name fresh, and the workers launched so far.
type suite struct {
	cfg Config
	c   *client.Client
	id  string
	seq int

	main    *launched // the worker the effect checks share
	mainErr error
	desc    *protocol.Descriptor

	launches []*launched // for clean-up
}

func newSuite(cfg Config) *suite {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	c := client.New(cfg.Endpoint, cfg.Token,
		client.WithBackend(cfg.Backend), client.WithTimeout(cfg.Timeout), client.WithExpectContinue())
	return &suite{cfg: cfg, c: c, id: hex.EncodeToString(b[:])}
}

// redact keeps the token out of every line the suite prints, in case a
// service echoes it back.
func (s *suite) redact(msg string) string {
	return string(client.Redact([]byte(msg), s.cfg.Token))
}

// name makes a fresh reference for this run: a run, key or coordinator.
func (s *suite) name(tag string) string {
	s.seq++
	return fmt.Sprintf("gc-%s-%s-%d", s.id, tag, s.seq)
}

// call builds the envelope kitchn would persist and send for effect.
func (s *suite) call(run, key string, effect protocol.WorkerEffect) protocol.EffectCall {
	raw, err := client.Encode(effect)
	if err != nil {
		panic(err) // a WorkerEffect always encodes
	}
	return protocol.EffectCall{
		Run: run,
		Request: protocol.EffectRequest{
			House:      s.cfg.House,
			Backend:    s.cfg.Backend,
			Credential: s.cfg.Credential,
			Task:       "galley-conformance",
			Attempt:    1,
			Key:        key,
			Effect:     protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: raw},
		},
	}
}

// applied is an applied effect: its receipt, parsed and as sent.
type applied struct {
	receipt protocol.Receipt
	raw     []byte
}

// effect sends call and requires 200 applied, read strictly.
func (s *suite) effect(ctx context.Context, call protocol.EffectCall) (applied, error) {
	r, err := s.c.Effect(ctx, call)
	if err != nil {
		return applied{}, err
	}
	if r.Status != 200 {
		// Only 200 carries an outcome: 401/403 read as refused, 429 as rate
		// limited, anything else leaves the client uncertain.
		return applied{}, s.c.StatusError(contract.RouteEffects, r)
	}
	o, err := protocol.ParseEffectOutcome(r.Body, s.cfg.Backend)
	if err != nil {
		return applied{}, fmt.Errorf("the client cannot read the outcome, so it is uncertain: %w", err)
	}
	if o.Status != protocol.StatusApplied || o.Receipt == nil {
		return applied{}, fmt.Errorf("%s %s: want applied, got %s", call.Request.Key, opOf(call), describeOutcome(o))
	}
	return applied{receipt: *o.Receipt, raw: client.RawMember(r.Body, "receipt")}, nil
}

func opOf(call protocol.EffectCall) string {
	var e struct{ Type string }
	_ = json.Unmarshal(call.Request.Effect.Effect, &e)
	return e.Type
}

func describeOutcome(o protocol.EffectOutcome) string {
	s := o.Status
	if o.Reason != "" {
		s += " " + o.Reason
	}
	if o.Capability != "" {
		s += " (" + o.Capability + ")"
	}
	return s
}

// launched is a worker this run started.
type launched struct {
	run     string
	call    protocol.EffectCall
	branch  string
	applied applied
	worker  protocol.Resource
	settled bool // seen settled, or cancelled by the suite: no clean-up needed
	known   bool // the launch answered applied; otherwise clean-up looks it up
}

// launch launches a worker with brief (and branch, when not empty) in run,
// and requires an applied receipt naming exactly one worker, in created.
func (s *suite) launch(ctx context.Context, run, brief, branch string) (*launched, error) {
	e := protocol.WorkerEffect{
		Type:      protocol.OpLaunch,
		Role:      "station-cook",
		Workspace: &protocol.Workspace{Type: "isolated"},
		Brief:     &brief,
	}
	if branch != "" {
		e.Branch = &branch
	}
	l := &launched{run: run, call: s.call(run, s.name("launch"), e), branch: branch}
	s.launches = append(s.launches, l)
	a, err := s.effect(ctx, l.call)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	l.applied, l.known = a, true
	var workers []protocol.Resource
	for _, r := range a.receipt.Created {
		if r.Kind == protocol.KindWorker {
			workers = append(workers, r)
		}
	}
	if len(workers) != 1 {
		return nil, fmt.Errorf("launch receipt lists %d workers in created, want exactly 1: %s", len(workers), a.raw)
	}
	for _, r := range a.receipt.Touched {
		if r.Kind == protocol.KindWorker {
			return nil, fmt.Errorf("launch receipt lists a worker in touched: %s", a.raw)
		}
	}
	l.worker = workers[0]
	return l, nil
}

// script is a brief for the scripted agent.
func script(lines ...string) string {
	return "#!galley-script\n" + strings.Join(lines, "\n") + "\n"
}

// mainWorker is the worker the effect checks share: launched once, on a
// fresh branch, with a script that takes one message and then idles long
// enough for every check to act on it (the clean-up cancels it if no check
// did).
func (s *suite) mainWorker(ctx context.Context) (*launched, error) {
	if s.main != nil || s.mainErr != nil {
		return s.main, s.mainErr
	}
	branch := "galley-conformance/" + s.id
	s.main, s.mainErr = s.launch(ctx, s.name("effects"), script("wait-message", "sleep 10m"), branch)
	if s.mainErr != nil {
		s.mainErr = fmt.Errorf("the shared launch failed: %w", s.mainErr)
	}
	return s.main, s.mainErr
}

// descriptor reads the descriptor once per run.
func (s *suite) descriptor(ctx context.Context) (protocol.Descriptor, error) {
	if s.desc != nil {
		return *s.desc, nil
	}
	d, err := s.c.Descriptor(ctx)
	if err != nil {
		return d, err
	}
	s.desc = &d
	return d, nil
}

// cancel cancels l's worker with a fresh key and requires applied.
func (s *suite) cancel(ctx context.Context, l *launched) (applied, error) {
	w := l.worker
	a, err := s.effect(ctx, s.call(l.run, s.name("cancel"), protocol.WorkerEffect{Type: protocol.OpCancel, Worker: &w}))
	if err == nil {
		l.settled = true
	}
	return a, err
}

// cleanup cancels every worker this run launched and did not see settle. A
// launch whose answer was lost is looked up first, as kitchn would.
func (s *suite) cleanup(ctx context.Context) []string {
	var notes []string
	for _, l := range s.launches {
		if l.settled {
			continue
		}
		if !l.known {
			a, raw, err := s.c.Lookup(ctx, l.call)
			if err != nil {
				notes = append(notes, fmt.Sprintf("could not look up launch %s to clean it up: %v", l.call.Request.Key, err))
				continue
			}
			if a.Status != protocol.StatusApplied || a.Receipt == nil {
				continue
			}
			l.applied = applied{receipt: *a.Receipt, raw: raw}
			found := false
			for _, r := range a.Receipt.Created {
				if r.Kind == protocol.KindWorker {
					l.worker, found = r, true
				}
			}
			if !found {
				continue
			}
		}
		if o, err := s.c.Observe(ctx, l.worker); err == nil && o.State == protocol.StateSettled {
			continue
		}
		if _, err := s.cancel(ctx, l); err != nil {
			notes = append(notes, fmt.Sprintf("could not cancel worker %s: %v", l.worker.Handle, err))
		}
	}
	return notes
}

// until polls f every interval until it reports done, fails, or wait
// passes; the error then says what was last seen.
func until(ctx context.Context, wait, interval time.Duration, what string, f func() (done bool, seen string, err error)) error {
	deadline := time.Now().Add(wait)
	seen := "nothing"
	for {
		done, s, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if s != "" {
			seen = s
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (last seen: %s)", what, wait, seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
