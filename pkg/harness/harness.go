// Package harness runs beside one agent as one galley worker: it fetches the
// worker's launch facts from galley's worker API, prepares the workspace,
// serves the agent its tools over MCP (ask the coordinator, post status,
// escalate, heartbeat, wait for a message, finish, report usage), starts the
// agent through a Driver, reports ready only on positive evidence that the
// agent runs, posts heartbeats, delivers kitchn's messages and replies, stops
// the agent when galley settles the worker, and reports an agent that ended
// without an outcome as exited. It never reports success on its own.
//
// docs/harness.md describes the flow and its choices.
package harness

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
)

// CodeNotStarted is the exit code reported when the agent never ran (no
// driver, a workspace or start failure) or the harness was stopped.
const CodeNotStarted = -1

type harness struct {
	cfg Config
	// calls are the MCP server's HTTP requests in flight (tools.go).
	calls liveRequests
	api   *client.Client
	log   *slog.Logger
	self  workerapi.Self
	// needs is the driver's: whether tool results carry waiting messages,
	// and which provider key the agent gets.
	needs AgentNeeds
	// gateEnv gives the agent's git the push gate's credential.
	gateEnv []string
	// egressURL is the agent's egress proxy (egress.go).
	egressURL string
	// model is the agent's model proxy (modelcalls.go); nil for an agent
	// that calls no provider.
	model *modelCalls
	box   *inbox
	// net is the agent's network: where the harness's servers listen for
	// the agent (agentnet.go).
	net *agentNet
	rep *reporter // events for the worker's log (report.go)
	// stderr logs the agent's stderr and keeps its last lines.
	stderr *lineLogger
	ctx    context.Context // the run's context, for work started by events

	readyMu sync.Mutex
	ready   bool

	saved     atomic.Bool   // the worktree's snapshot was saved (or tried); a parking saves it from its own goroutine
	finishing atomic.Bool   // the agent called finish
	finished  atomic.Bool   // the agent's worker-done was posted
	settled   chan struct{} // closed when galley says the worker is settled
	fatal     chan error    // the inbox can no longer be read

	// parks follows the agent's waits for parking, parked is closed once
	// it parked (park.go); resumed is the state of the parking this
	// harness resumes, and reattached says its question was taken up
	// again (resume.go).
	parks      parkWatch
	parked     chan struct{}
	driver     Driver // the worker's, set before its agent starts
	resumed    *parkState
	reattached bool
}

// Run runs one worker to its end. It returns nil when the worker's end was
// reported (or galley had settled it), and an error when the harness could
// not do its job.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	// The worker's credential is bound to this key, made here and never
	// written anywhere: the bootstrap exchange binds it, or, for a
	// credential given directly, the first call (made before the agent
	// starts). Whoever reads the credential without the key can use it
	// for nothing (pkg/dpop).
	key, err := dpop.NewKey()
	if err != nil {
		return galleyerr.E(galleyerr.Op("harness.key"), "could not make the worker's proof key", err)
	}
	cfg.ClientOptions = append(slices.Clone(cfg.ClientOptions), client.WithProofKey(key))
	if cfg.ownProxy != nil {
		// galley's API is reached through the stack's egress service.
		cfg.ClientOptions = append(cfg.ClientOptions, client.WithHTTPClient(&http.Client{Transport: ownTransport(cfg.ownProxy)}))
	}
	if cfg.Token == "" && cfg.Bootstrap != "" {
		// The claim is drawn once and repeated on every retry of the
		// exchange, so a lost answer can be retried.
		var b [32]byte
		_, _ = crand.Read(b[:])
		claim := base64.RawURLEncoding.EncodeToString(b[:])
		tok, err := client.ExchangeBootstrap(ctx, cfg.Endpoint, cfg.Handle, cfg.Bootstrap, claim, cfg.ClientOptions...)
		if err != nil {
			return galleyerr.E(galleyerr.Op("harness.credential"), "could not exchange the bootstrap code", err)
		}
		cfg.Token, cfg.Bootstrap = tok, ""
	}
	h := &harness{
		cfg:     cfg,
		api:     client.New(cfg.Endpoint, cfg.Token, cfg.ClientOptions...),
		log:     cfg.Logger,
		box:     newInbox(),
		settled: make(chan struct{}),
		fatal:   make(chan error, 1),
		parked:  make(chan struct{}),
	}
	return h.run(ctx)
}

func (h *harness) run(ctx context.Context) (retErr error) {
	// h.ctx lives while the agent may run: heartbeats and ready retries
	// stop with it.
	agentCtx, agentGone := context.WithCancel(ctx)
	defer agentGone()
	h.ctx = agentCtx

	var self workerapi.Self
	err := h.untilReachable(ctx, "reading the worker's launch facts", SelfPatience, func(ctx context.Context) (err error) {
		self, err = h.api.Self(ctx)
		return err
	})
	if err != nil {
		h.log.Error("cannot read the worker's launch facts", "err", err)
		return err
	}
	h.self = self
	h.log = h.log.With("worker", self.Handle, "run", self.Run)
	if self.ReportEvents {
		h.rep = newReporter(h)
		defer h.rep.close()
	}
	if self.State == protocol.StateSettled {
		h.log.Info("the worker is already settled; nothing to do", "outcome", self.Outcome)
		return nil
	}
	driver, ok := h.cfg.Drivers[self.Agent.Agent]
	if !ok {
		return h.notStarted(ctx, fmt.Sprintf("this worker image has no driver for agent family %q", self.Agent.Agent), nil)
	}
	h.driver = driver
	if h.resumed, err = h.resumeFrom(self); err != nil {
		return h.notStarted(ctx, "resuming the parked worker failed", err)
	}
	h.wakeAsMessage(driver)
	h.needs = driver.Needs()
	if h.needs.Provider != ProviderNone && h.providerKey(h.needs.Provider) == "" {
		return h.notStarted(ctx, missingKey(self.Agent.Agent, h.needs.Provider), nil)
	}
	branch := h.cfg.Branch
	if branch == "" {
		branch = self.Branch
	}
	jail, err := h.chooseJail()
	if err != nil {
		return h.notStarted(ctx, "confining the agent failed", err)
	}
	if h.net, err = h.chooseNet(jail.mode); err != nil {
		return h.notStarted(ctx, "confining the agent's network failed", err)
	}
	defer h.net.close()
	jail.net = h.net
	h.log.Info("preparing the workspace", "dir", h.cfg.Workspace, "branch", branch)
	onDisk := workspaceOnDisk(h.cfg.Workspace)
	prepStart := time.Now()
	if err := h.cfg.Prepare(ctx, h.cfg.Repository, branch, h.cfg.Workspace); err != nil {
		return h.notStarted(ctx, "preparing the workspace failed", err)
	}
	// scripts/launchbench reads this line's time (launch → workspace ready).
	took := time.Since(prepStart)
	h.log.Info("workspace ready", "dir", h.cfg.Workspace, "took", took)
	h.rep.report(workerapi.EventWorkspace, "workspace prepared", "branch", branch, "took", took.Round(time.Millisecond).String())

	gate, err := h.startGate(h.cfg.Repository, branch)
	if err != nil {
		return h.notStarted(ctx, "starting the push gate failed", err)
	}
	defer gate.close() // the agent has ended when run returns
	if err := h.cfg.UseGate(ctx, h.cfg.Workspace, h.cfg.Repository, gate.url); err != nil {
		return h.notStarted(ctx, "pointing the workspace at the push gate failed", err)
	}
	h.gateEnv = gate.env

	srv, err := h.startMCP()
	if err != nil {
		return h.notStarted(ctx, "starting the MCP server failed", err)
	}
	defer srv.close()
	egressProxy, egressURL, err := h.startEgress()
	if err != nil {
		return h.notStarted(ctx, "starting the agent's egress proxy failed", err)
	}
	defer closeEgress(egressProxy)
	h.egressURL = egressURL
	if h.needs.Provider != ProviderNone {
		if h.model, err = h.startModelCalls(); err != nil {
			return h.notStarted(ctx, "starting the agent's model proxy failed", err)
		}
		// The count is reported once the agent has ended, and its token
		// ends with it.
		defer h.model.close()
	}

	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go h.pollInbox(pollCtx)
	defer h.box.stop()

	if h.isSettled() { // cancelled while the workspace was prepared
		return nil
	}
	var cmd *exec.Cmd
	if h.resumed != nil {
		cmd, err = h.resumeCommand(driver, h.resumed, srv.url, srv.secret)
	} else {
		cmd, err = driver.Command(self, srv.url, srv.secret, h.cfg.Workspace)
	}
	if err != nil {
		return h.notStarted(ctx, "building the agent command failed", err)
	}
	if err := h.prepareCommand(cmd); err != nil {
		return h.notStarted(ctx, "refusing the agent command", err)
	}
	// The workspace is galley's until here (Prepare, UseGate); from now on
	// it is the agent's.
	// Whatever path the run takes, the agent's processes are ended
	// before the harness returns (and, where it reports the agent's exit,
	// before that report): endJail is idempotent.
	defer func() {
		if err := h.endJail(ctx, jail); err != nil && retErr == nil {
			retErr = err
		}
		if err := jail.leave(); err != nil {
			h.log.Warn("cleaning up after the confined agent", "err", err)
		}
	}()
	// After galley's last git command in the workspace (the restored
	// files are the agent's), before the agent.
	if err := h.restoreWorktree(ctx, onDisk, jail); err != nil {
		return h.notStarted(ctx, "restoring the worktree failed", err)
	}
	if err := jail.enter(h.cfg.Workspace, cmd.Env, h.cfg.AgentBinDir, h.needs.CLI); err != nil {
		return h.notStarted(ctx, "confining the agent failed", err)
	}
	if err := h.restoreSession(ctx, driver, h.resumed, jail); err != nil {
		return h.notStarted(ctx, "restoring the parked agent failed", err)
	}
	jail.wrap(cmd)
	if jail.mode == ConfineNone && h.cfg.Confine != "" {
		h.log.Warn("the agent is not confined: it can reach whatever this harness's user can", "why", jail.why)
		h.rep.report(workerapi.EventWarning, "the agent is not confined", "mode", string(jail.mode), "why", jail.why)
	} else {
		h.rep.report(workerapi.EventConfinement, "agent confined", "mode", string(jail.mode), "why", jail.why,
			"network", string(h.net.mode))
		h.log.Info("agent confined", "confinement", string(jail.mode), "uid", jail.uid, "why", jail.why, "cgroup", jail.groupDesc(),
			"network", h.net.describe())
	}
	if h.net.mode == NetOpen && h.cfg.Confine != "" {
		h.log.Warn("the agent's network is open: it can connect to any host this machine reaches", "why", h.net.why)
		h.rep.report(workerapi.EventWarning, "the agent's network is open", "why", h.net.why)
	}
	stdout, stdoutW := io.Pipe()
	stderr := &lineLogger{log: h.log}
	h.stderr = stderr
	cmd.Stdout, cmd.Stderr = stdoutW, stderr
	if err := cmd.Start(); err != nil {
		jail.closeGate()
		return h.notStarted(ctx, "starting the agent failed", err)
	}
	if err := jail.started(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return h.notStarted(ctx, "confining the agent failed", err)
	}
	h.log.Info("agent started", "pid", cmd.Process.Pid, "agent", self.Agent.Agent, "mcp", srv.url)
	h.rep.report(workerapi.EventAgentStarted, "agent started", "agent", self.Agent.Agent, "model", self.Agent.Model, "pid", strconv.Itoa(cmd.Process.Pid))
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		driver.Observe(stdout, events{h})
		_, _ = io.Copy(io.Discard, stdout) // a driver that stops early must not stall the agent
	}()
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		stdoutW.Close()
		stderr.flush()
		<-observed
		waited <- err
	}()
	if p, ok := driver.(Parker); ok {
		go h.watchPark(agentCtx, p, jail)
	}

	select {
	case err := <-waited:
		agentGone()
		// Nothing of the agent runs when galley hears that it exited, and
		// its worktree's snapshot is kept.
		endErr := h.endAgent(ctx, jail)
		return errors.Join(h.agentEnded(ctx, cmd.ProcessState, err), endErr)
	case <-h.settled:
		// galley settles a worker on its worker-done, possibly before the
		// agent has the finish result: let a finishing agent exit itself.
		if h.finishing.Load() && h.awaitExit(waited) {
			h.log.Info("agent exited after reporting its outcome", "code", exitCode(cmd.ProcessState))
			return h.endAgent(ctx, jail)
		}
		h.log.Info("the worker was settled; stopping the agent")
		h.stopAgent(cmd, waited)
		return h.endAgent(ctx, jail)
	case <-h.parked:
		// Its parking landed (or galley settled it meanwhile): the agent
		// is stopped and nothing is reported; galley starts a new harness
		// when input comes (docs/parking.md).
		h.stopAgent(cmd, waited)
		return h.endAgent(ctx, jail)
	case err := <-h.fatal:
		h.log.Error("stopping the agent: the inbox cannot be read", "err", err)
		h.stopAgent(cmd, waited)
		_ = h.endAgent(ctx, jail) // its error is the deferred end's too
		return err
	case <-ctx.Done():
		h.log.Info("the harness was stopped; stopping the agent")
		h.stopAgent(cmd, waited)
		endErr := h.endAgent(ctx, jail)
		if h.finished.Load() || h.isSettled() {
			return endErr
		}
		return errors.Join(h.reportExited(ctx, CodeNotStarted, "the worker's harness was stopped before the agent reported an outcome"), endErr)
	}
}

// chooseNet decides the agent's network confinement: Config.Network, with
// auto resolved by ChooseNetwork. An agent without a confinement has an
// open network (or the task's), since nothing would hold it at the gate
// while its namespace is made.
func (h *harness) chooseNet(confine Confinement) (*agentNet, error) {
	mode := h.cfg.Network
	if mode == NetTask {
		return &agentNet{mode: NetTask, why: "the platform confines the task's network"}, nil
	}
	if confine == ConfineNone {
		return &agentNet{mode: NetOpen, why: "the agent is not confined"}, nil
	}
	switch mode {
	case "", NetAuto:
		e := ChooseNetwork()
		return &agentNet{mode: e.Mode, why: e.Why}, nil
	case NetNamespace:
		if err := probeNamespace(); err != nil {
			return nil, fmt.Errorf("namespace network confinement: %w", err)
		}
	case NetLandlock:
		if abi := landlockABI(); abi < landlockNetABI {
			return nil, fmt.Errorf("landlock network confinement needs Landlock ABI %d; the kernel has %d", landlockNetABI, abi)
		}
	case NetOpen:
		return &agentNet{mode: NetOpen, why: "configured open (" + contract.EnvAgentNetwork + ")"}, nil
	default:
		return nil, errors.New("unknown agent network " + string(mode))
	}
	return &agentNet{mode: mode, why: "configured (" + contract.EnvAgentNetwork + ")"}, nil
}
