package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/modelproxy"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// usageEvery is how often, at most, the harness reports the proxy's count
// while calls go on; the count at the agent's end is always reported.
const usageEvery = 5 * time.Second

// ModelBudgetFromEnv reads the house's cap on a worker's model use
// (contract.EnvModelCapTokens, EnvModelCapUSD): the zero Budget (no cap)
// when unset. A worker's model calls go through the harness's model proxy
// (pkg/modelproxy): the agent holds a token that works there alone and
// ends with the worker, never the house's provider key; the proxy counts
// what the provider says each call used (the worker's usage reports come
// from that count, never from what the CLI says) and refuses calls past
// the cap.
func ModelBudgetFromEnv(getenv func(string) string) (modelproxy.Budget, error) {
	var b modelproxy.Budget
	if s := strings.TrimSpace(getenv(contract.EnvModelCapTokens)); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return b, errors.New(contract.EnvModelCapTokens + " must be a positive whole number of tokens")
		}
		b.Tokens = n
	}
	if s := strings.TrimSpace(getenv(contract.EnvModelCapUSD)); s != "" {
		micro, err := ParseMicroUSD(s)
		if err != nil || micro <= 0 {
			return b, errors.New(contract.EnvModelCapUSD + " must be a positive number of dollars, at most six decimal places")
		}
		b.MicroUSD = micro
	}
	return b, nil
}

// ParseMicroUSD reads a decimal number of dollars ("12", "2.50") as
// millionths of a dollar, exactly.
func ParseMicroUSD(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(frac) > 6 || strings.ContainsAny(whole+frac, "+-") {
		return 0, errors.New("not a decimal number of dollars")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 1<<40 {
		return 0, errors.New("not a decimal number of dollars")
	}
	var f int64
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil {
			return 0, errors.New("not a decimal number of dollars")
		}
	}
	return w*1_000_000 + f, nil
}

// modelCalls is the model proxy one agent reaches, and what the harness
// reports of it.
type modelCalls struct {
	h       *harness
	proxy   *modelproxy.Proxy
	srv     *http.Server
	token   string // the agent's: it works at this proxy only, until close
	baseURL string // where the agent's CLI sends its calls

	mu       sync.Mutex
	latest   modelproxy.Totals
	reported int64 // latest.Calls when last reported
	// final is set once galley takes no more usage of the worker (it
	// answered a report 409): nothing more is sent.
	final bool
	// inFlight counts the proxy's requests being served; quiet is closed
	// when it falls to zero (a call is counted before its request ends).
	inFlight int
	quiet    chan struct{}

	kick     chan struct{}
	done     chan struct{}
	stopped  chan struct{}
	stopping sync.Once
	closing  sync.Once
	// sending makes one report at a time, so a flush waits for the one
	// the loop is making and then sends what it did not.
	sending sync.Mutex
	// escalated is closed when the escalation at the cap has been posted
	// (or failed); nil until the cap is reached.
	escalated chan struct{}
}

// usageDrain bounds how long a report that settles the worker, and the
// last report, wait for the model calls in flight to be counted: an answer
// the agent left is still read for its usage (pkg/modelproxy), and an
// agent that keeps a call open does not hold its worker's end for longer.
const usageDrain = 10 * time.Second

// escalationWait bounds how long the last reports wait for the escalation
// at the cap to be posted (its own call is bounded at 30 s).
const escalationWait = 35 * time.Second

// startModelCalls serves the agent's model proxy for the driver's
// provider, with the harness's key for it, where the agent reaches it.
func (h *harness) startModelCalls() (*modelCalls, error) {
	fam, ok := map[Provider]modelproxy.Family{ProviderAnthropic: modelproxy.Anthropic, ProviderOpenAI: modelproxy.OpenAI}[h.needs.Provider]
	if !ok {
		return nil, fmt.Errorf("no model proxy for provider %q", h.needs.Provider)
	}
	token, err := modelproxy.NewToken()
	if err != nil {
		return nil, err
	}
	m := &modelCalls{h: h, token: token, kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{}),
		quiet: closedChan()}
	opts := []modelproxy.Option{}
	if st := h.resumed; st != nil && st.Usage != nil {
		// A resumed worker's proxy counts on from the parked one's count
		// (docs/parking.md): its reports stay the worker's totals.
		opts = append(opts, modelproxy.CountingFrom(*st.Usage))
		m.latest, m.reported = *st.Usage, st.Usage.Calls
	}
	m.proxy, err = modelproxy.New(fam, h.providerKey(h.needs.Provider), token, append(opts,
		modelproxy.WithUpstream(h.providerBaseURL(h.needs.Provider)),
		modelproxy.WithTransport(ownTransport(h.cfg.ownProxy)),
		modelproxy.WithBudget(h.cfg.ModelBudget),
		modelproxy.OnUsage(m.counted),
		modelproxy.OnCapReached(m.capReached),
		modelproxy.WithLogger(h.log.With("component", "model proxy")))...)
	if err != nil {
		return nil, err
	}
	ln, err := h.listenForAgent("model proxy")
	if err != nil {
		m.proxy.Close()
		return nil, err
	}
	m.baseURL = modelproxy.AgentBaseURL(fam, ln.Addr().String())
	// The proxy sets each call's own read and write deadlines; its
	// headers are bounded as the harness's other servers' are (a CLI's are
	// a few KiB).
	m.srv = &http.Server{Handler: m.track(m.proxy), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		MaxHeaderBytes: maxHeaderBytes}
	go func() { _ = m.srv.Serve(limitConns(ln, m.srv, h.log)) }()
	go m.reportLoop()
	return m, nil
}

// counted takes the proxy's totals after a call (the proxy calls it one
// at a time: it must not block).
func (m *modelCalls) counted(t modelproxy.Totals) {
	m.mu.Lock()
	m.latest = t
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// reportLoop reports the count to galley at most every usageEvery while
// calls come, until close.
func (m *modelCalls) reportLoop() {
	defer close(m.stopped)
	for {
		select {
		case <-m.done:
			return
		case <-m.kick:
		}
		m.report()
		t := time.NewTimer(usageEvery)
		select {
		case <-m.done:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// closedChan is a closed channel: no call in flight.
func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// track counts the proxy's requests in flight, so that a last report can
// wait for their counts (drain).
func (m *modelCalls) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		if m.inFlight == 0 {
			m.quiet = make(chan struct{})
		}
		m.inFlight++
		m.mu.Unlock()
		defer func() {
			m.mu.Lock()
			if m.inFlight--; m.inFlight == 0 {
				close(m.quiet)
			}
			m.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// drain waits, up to usageDrain, until no call is in flight at the proxy:
// each has then been counted.
func (m *modelCalls) drain() {
	m.mu.Lock()
	quiet, n := m.quiet, m.inFlight
	m.mu.Unlock()
	if n == 0 {
		return
	}
	t := time.NewTimer(usageDrain)
	defer t.Stop()
	select {
	case <-quiet:
	case <-t.C:
		m.h.log.Warn("model calls still in flight are left out of the usage report", "calls", n, "waited", usageDrain)
	}
}

// stopLoop ends the periodic reports: from a report that settles the
// worker on, galley takes at most one more (after a worker-done, for the
// agent's last turn), and that one is the last count, sent by close.
func (m *modelCalls) stopLoop() {
	m.stopping.Do(func() {
		close(m.done)
		<-m.stopped
	})
}

// flush reports the latest count now, if it is newer than the last one
// sent: before a report that settles the worker, after which galley takes
// no more. The periodic reports end, the calls in flight are counted first
// (drain), and the escalation at the cap, if there is one, is posted
// before. Nil-safe: an agent without a model proxy has nothing to flush.
func (m *modelCalls) flush() {
	if m == nil {
		return
	}
	m.stopLoop()
	m.drain()
	m.awaitEscalation()
	m.report()
}

// report sends the latest count, if it is newer than the last one sent.
func (m *modelCalls) report() {
	m.sending.Lock()
	defer m.sending.Unlock()
	m.mu.Lock()
	t := m.latest
	if m.final || t.Calls == 0 || t.Calls == m.reported {
		m.mu.Unlock()
		return
	}
	m.reported = t.Calls
	m.mu.Unlock()
	h := m.h
	rep := t.Report()
	rep.Source, rep.Agent = h.self.Handle, h.self.Agent.Agent
	if rep.Model == "" && len(t.Models) == 0 {
		rep.Model = h.self.Agent.Model
	}
	if err := protocol.ValidUsageReport(rep); err != nil {
		h.log.Warn("dropping an invalid usage report", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 30*time.Second)
	defer cancel()
	err := h.api.Usage(ctx, rep)
	switch {
	case err == nil:
		h.log.Info("usage reported from the model proxy's count", "usage", rep, "calls", t.Calls, "unmetered", t.Unmetered)
	case galleyerr.Is(galleyerr.Conflict, err):
		// The worker has settled and its usage is final: galley takes no
		// more, so none is sent again.
		m.mu.Lock()
		m.final = true
		m.mu.Unlock()
		h.log.Info("the worker has settled: galley takes no more usage", "usage", rep, "calls", t.Calls, "err", err)
	default:
		h.log.Error("cannot report usage", "err", err)
		m.mu.Lock()
		m.reported = 0 // the next report sends it again
		m.mu.Unlock()
	}
}

// parkCount reports the count now, for a parking, and answers it for the
// resumed harness (nil without a proxy). The agent is blocked in its
// wait: its calls have ended, and drain counts what is left of them.
func (m *modelCalls) parkCount() *modelproxy.Totals {
	if m == nil {
		return nil
	}
	m.drain()
	t := m.proxy.Totals()
	m.mu.Lock()
	m.latest = t
	m.mu.Unlock()
	m.report()
	return &t
}

// capReached is the first call the proxy refused at the worker's cap: the
// agent was told; the coordinator is asked what to do (an escalation), and
// the worker's event log says why. The proxy calls it holding its count,
// so the escalation is posted aside; a report that settles the worker, and
// the harness's end, wait for it (awaitEscalation).
func (m *modelCalls) capReached(r modelproxy.Refusal) {
	h := m.h
	h.log.Warn("the worker's model budget is spent: model calls are refused", "why", r.Message, "tokens", r.Totals.All())
	h.rep.report(workerapi.EventWarning, "model budget reached: model calls are refused", "budget", "reached",
		"why", r.Message, "tokens", strconv.FormatInt(r.Totals.All(), 10), "microUSD", strconv.FormatInt(r.Totals.MicroUSD, 10))
	escalated := make(chan struct{})
	m.mu.Lock()
	m.escalated = escalated
	m.mu.Unlock()
	go func() {
		defer close(escalated)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 30*time.Second)
		defer cancel()
		body := r.Message + "\nThe agent's model calls are refused from now on. Raise the cap and launch anew, or cancel the worker."
		_, err := h.api.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgEscalation, Subject: "Model budget reached", Body: body})
		if err != nil {
			h.log.Error("cannot escalate the spent model budget", "err", err)
		}
	}()
}

// awaitEscalation waits for the escalation at the cap, if there is one,
// to be posted: before the worker settles, and before the harness ends.
func (m *modelCalls) awaitEscalation() {
	m.mu.Lock()
	escalated := m.escalated
	m.mu.Unlock()
	if escalated == nil {
		return
	}
	t := time.NewTimer(escalationWait)
	defer t.Stop()
	select {
	case <-escalated:
	case <-t.C:
	}
}

// close ends the agent's token and the proxy, and reports the last count
// (if the worker has not settled since: galley then refuses it, and the
// count was flushed before). The agent has ended: its calls in flight are
// counted first, within usageDrain, then cut.
func (m *modelCalls) close() {
	m.closing.Do(func() {
		m.stopLoop()
		_ = m.srv.Close() // no new call; those in flight go on reading their answers
		m.drain()
		_ = m.proxy.Close()
		m.awaitEscalation()
		m.report()
	})
}
