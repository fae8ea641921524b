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
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workspace"
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

	finishing atomic.Bool   // the agent called finish
	finished  atomic.Bool   // the agent's worker-done was posted
	settled   chan struct{} // closed when galley says the worker is settled
	fatal     chan error    // the inbox can no longer be read
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
	cmd, err := driver.Command(self, srv.url, srv.secret, h.cfg.Workspace)
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
	if err := jail.enter(h.cfg.Workspace, cmd.Env, h.cfg.AgentBinDir, h.needs.CLI); err != nil {
		return h.notStarted(ctx, "confining the agent failed", err)
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

	select {
	case err := <-waited:
		agentGone()
		// Nothing of the agent runs when galley hears that it exited.
		endErr := h.endJail(ctx, jail)
		return errors.Join(h.agentEnded(ctx, cmd.ProcessState, err), endErr)
	case <-h.settled:
		// galley settles a worker on its worker-done, possibly before the
		// agent has the finish result: let a finishing agent exit itself.
		if h.finishing.Load() && h.awaitExit(waited) {
			h.log.Info("agent exited after reporting its outcome", "code", exitCode(cmd.ProcessState))
			return nil
		}
		h.log.Info("the worker was settled; stopping the agent")
		h.stopAgent(cmd, waited)
		return nil
	case err := <-h.fatal:
		h.log.Error("stopping the agent: the inbox cannot be read", "err", err)
		h.stopAgent(cmd, waited)
		return err
	case <-ctx.Done():
		h.log.Info("the harness was stopped; stopping the agent")
		h.stopAgent(cmd, waited)
		endErr := h.endJail(ctx, jail)
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

// endJail ends whatever of the agent still runs (jail.end), once. A
// failure is an error of the run, logged as one, and keeps the worktree
// out of reuse (workspace.MarkNotReusable): a process of the agent may
// still change it.
func (h *harness) endJail(ctx context.Context, j *jail) error {
	if j.ended {
		return j.endErr
	}
	j.ended = true
	j.endErr = j.end(ctx)
	if j.endErr != nil {
		h.log.Error("the agent's processes could not all be ended; its worktree is kept out of reuse", "err", j.endErr)
		if err := workspace.MarkNotReusable(h.cfg.Workspace, j.endErr.Error()); err != nil {
			h.log.Error("cannot keep the worktree out of reuse", "err", err)
		}
		j.endErr = galleyerr.E(galleyerr.Op("harness.end"), "ending the agent's processes", j.endErr)
	}
	return j.endErr
}

// notStarted reports that the agent never ran, so galley settles the
// worker failed.
// The reason, and what caused it (an error may quote a command line or a
// driver's settings), are redacted of every secret the harness holds and
// anything shaped like a credential before they are logged or reported.
func (h *harness) notStarted(ctx context.Context, reason string, cause error) error {
	msg := reason
	if cause != nil {
		msg += ": " + cause.Error()
	}
	msg = redactSecrets(msg, h.secrets()...)
	h.log.Error("the agent cannot start", "reason", msg)
	h.rep.report(workerapi.EventError, msg)
	if err := h.reportExited(ctx, CodeNotStarted, msg); err != nil {
		return err
	}
	// The caller logs the error: it carries the redacted text, and the
	// cause's kind.
	if cause == nil {
		return galleyerr.E(galleyerr.Op("harness.start"), msg)
	}
	return galleyerr.E(galleyerr.Op("harness.start"), galleyerr.KindOf(cause), msg)
}

// agentEnded handles the agent's exit: nothing to do after finish or a
// settle; otherwise galley hears the code and why.
func (h *harness) agentEnded(ctx context.Context, ps *os.ProcessState, waitErr error) error {
	switch {
	case h.finished.Load():
		h.log.Info("agent exited after reporting its outcome", "code", exitCode(ps))
		return nil
	case h.isSettled():
		h.log.Info("agent exited; the worker was already settled", "code", exitCode(ps))
		return nil
	}
	code := exitCode(ps)
	// The service opens the coordinator's row with the code
	// (service.AgentExitedBody); the reason says what it cannot know.
	var why []string
	if ps == nil {
		why = append(why, fmt.Sprintf("waiting for it failed: %v", waitErr))
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		why = append(why, fmt.Sprintf("it was killed by signal %v", ws.Signal()))
	}
	if tail := h.stderrTail(); tail != "" {
		why = append(why, "its stderr ended with:\n"+tail)
	}
	reason := strings.Join(why, "; ")
	h.log.Warn("agent ended without an outcome", "code", code, "reason", reason)
	return h.reportExited(ctx, code, reason)
}

// stderrTail is the last lines the agent wrote to stderr, with every
// secret the harness holds, and anything shaped like a credential,
// redacted.
func (h *harness) stderrTail() string {
	if h.stderr == nil {
		return ""
	}
	h.stderr.mu.Lock()
	tail := h.stderr.tail.text()
	h.stderr.mu.Unlock()
	return redactSecrets(tail, h.secrets()...)
}

// namedSecret is a value the harness holds, and what it is.
type namedSecret struct{ what, value string }

// namedSecrets are the values the harness holds that neither the agent
// nor any report or log line may carry: the one list that the agent's
// command is checked against (prepareCommand) and that every report is
// redacted of (secrets). Unset ones are empty.
func (h *harness) namedSecrets() []namedSecret {
	return []namedSecret{{"the worker token", h.cfg.Token}, {"the bootstrap code", h.cfg.Bootstrap},
		{"the git credential", h.cfg.GitCredential}, {"the anthropic key", h.cfg.AnthropicKey},
		{"the openai key", h.cfg.OpenAIKey}, {"the egress service's credential", h.cfg.EgressSecret}}
}

// secrets are the values of namedSecrets.
func (h *harness) secrets() []string {
	var out []string
	for _, s := range h.namedSecrets() {
		out = append(out, s.value)
	}
	return out
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return CodeNotStarted
	}
	return ps.ExitCode()
}

// reportExited tells galley the agent ended without an outcome. It goes
// out even when ctx was cancelled: a runtime stopping the worker signals
// the harness and the agent together, and the report is the last thing the
// harness owes.
func (h *harness) reportExited(ctx context.Context, code int, reason string) error {
	// The usage is final once the worker settles: the model proxy's count
	// goes first.
	h.model.flush()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := h.untilReachable(ctx, "reporting the agent's exit", 30*time.Second, func(ctx context.Context) error {
		return h.api.Exited(ctx, code, reason)
	})
	switch {
	case err == nil:
		return nil
	case galleyerr.Is(galleyerr.Conflict, err):
		// galley takes one exit report: a 409 says it has one already
		// (this report's first attempt, its answer lost), so the harness
		// owes nothing more.
		h.log.Info("the agent's exit was already reported", "err", err)
		return nil
	}
	h.log.Error("cannot report the agent's exit", "err", err)
	return err
}

// providerKey is the harness's key for p.
func (h *harness) providerKey(p Provider) string {
	switch p {
	case ProviderAnthropic:
		return h.cfg.AnthropicKey
	case ProviderOpenAI:
		return h.cfg.OpenAIKey
	}
	return ""
}

// providerBaseURL is the configured base URL for p; empty for the
// provider's public API.
func (h *harness) providerBaseURL(p Provider) string {
	switch p {
	case ProviderAnthropic:
		return h.cfg.AnthropicBaseURL
	case ProviderOpenAI:
		return h.cfg.OpenAIBaseURL
	}
	return ""
}

// missingKey says which secret a family's worker lacks (never a value).
func missingKey(family string, p Provider) string {
	where := map[Provider]string{
		ProviderAnthropic: contract.EnvAnthropicAPIKey + " (the deployment's Anthropic key secret; locally " + EnvAnthropicCLIKey + ")",
		ProviderOpenAI:    contract.EnvOpenAIAPIKey + " (the deployment's OpenAI key secret; locally " + EnvCodexCLIKey + " or " + EnvOpenAICLIKey + ")",
	}[p]
	return fmt.Sprintf("the %s agent needs the %s API key, and this worker has none: set %s", family, p, where)
}

// prepareCommand gives the agent its environment (AgentEnv, its provider
// key, the driver's variables), keeps it in the harness's process group (so
// that stopping the group stops both) and refuses a command that would
// hand the agent a secret it must not hold.
func (h *harness) prepareCommand(cmd *exec.Cmd) error {
	env := AgentEnv(os.Environ(), h.cfg.AgentBinDir)
	if h.model != nil {
		// The agent's key is its model proxy's token, and its provider
		// that proxy: the house's key never leaves the harness.
		if h.needs.KeyEnv != "" {
			env = append(env, h.needs.KeyEnv+"="+h.model.token)
		}
		if h.needs.BaseURLEnv != "" {
			env = append(env, h.needs.BaseURLEnv+"="+h.model.baseURL)
		}
	}
	env = append(env, h.gateEnv...)
	if h.egressURL != "" {
		env = append(env, egressEnv(h.egressURL)...)
	}
	cmd.Env = append(env, cmd.Env...)
	all := slices.Concat([]string{cmd.Path}, cmd.Args, cmd.Env)
	for _, secret := range h.namedSecrets() {
		if secret.value == "" {
			continue
		}
		for _, s := range all {
			if strings.Contains(s, secret.value) {
				return fmt.Errorf("the agent's command line or environment would hold %s", secret.what)
			}
		}
	}
	if h.model != nil {
		for _, s := range slices.Concat([]string{cmd.Path}, cmd.Args) {
			if strings.Contains(s, h.model.token) {
				return errors.New("the agent's command line would hold its model proxy token")
			}
		}
	}
	setProcAttr(cmd)
	// WaitDelay bounds Wait when a grandchild keeps the agent's pipes open.
	cmd.WaitDelay = h.cfg.StopGrace
	return nil
}

// agentEnvNames are the variables of the harness's environment an agent
// inherits: what a process needs to find programs, a home, a locale, a
// terminal, a temporary folder, trusted certificates and a proxy, and the
// CLIs' own settings (their configuration folders and the variables the
// claude supervisor defaults). Nothing else passes: not the task role's
// credentials (AWS_*, ECS_CONTAINER_METADATA_URI*), not a GALLEY_ variable
// (the worker token, the bootstrap code, the secrets), not the git
// credential, not a provider key (the agent's own is added by name).
var agentEnvNames = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "TMPDIR",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
	"CLAUDE_CONFIG_DIR", "CODEX_HOME", "MCP_TOOL_TIMEOUT", "DISABLE_AUTOUPDATER",
	// The operator's MCP idle limit for claude. (A provider's endpoint is
	// not passed through: the harness gives the agent its own provider's,
	// checked, as AgentNeeds.BaseURLEnv.) docs/agents.md.
	"CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT",
	// claude without telemetry or update checks (the operator's choice).
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
}

// agentEnvPrefixes are allowed families of variables: the locale's and
// Node's (the CLIs run on Node: NODE_OPTIONS, NODE_EXTRA_CA_CERTS).
var agentEnvPrefixes = []string{"LC_", "NODE_"}

// AgentEnv is the part of the harness's environment an agent inherits (see
// agentEnvNames), with binDir, when set, first on PATH. The harness adds
// the agent's provider key and the driver's own variables.
func AgentEnv(environ []string, binDir string) []string {
	var out []string
	path := ""
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			path = v
		case slices.Contains(agentEnvNames, k):
			out = append(out, kv)
		default:
			for _, p := range agentEnvPrefixes {
				if strings.HasPrefix(k, p) {
					out = append(out, kv)
					break
				}
			}
		}
	}
	switch {
	case binDir != "" && path != "":
		path = binDir + string(os.PathListSeparator) + path
	case binDir != "":
		path = binDir // never a trailing separator: that would search the working directory
	}
	if path != "" {
		out = append(out, "PATH="+path)
	}
	return out
}

// awaitExit waits up to the stop grace for the agent to exit by itself.
func (h *harness) awaitExit(waited <-chan error) bool {
	t := time.NewTimer(h.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-waited:
		return true
	case <-t.C:
		return false
	}
}

// stopAgent asks the agent to stop, then kills it after the grace period.
func (h *harness) stopAgent(cmd *exec.Cmd, waited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(h.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-waited:
	case <-t.C:
		h.log.Warn("the agent ignored SIGTERM; killing it")
		_ = cmd.Process.Kill()
		<-waited
	}
	h.log.Info("agent stopped", "code", exitCode(cmd.ProcessState))
}

func (h *harness) isSettled() bool {
	select {
	case <-h.settled:
		return true
	default:
		return false
	}
}

// ensureReady reports ready once, on the first evidence that the agent
// runs. A failure is logged; the next evidence tries again.
func (h *harness) ensureReady(ctx context.Context, evidence string) bool {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	if h.ready {
		return true
	}
	if err := h.api.Ready(ctx, evidence); err != nil {
		h.log.Error("cannot report ready", "evidence", evidence, "err", err)
		return false
	}
	h.ready = true
	h.log.Info("ready reported", "evidence", evidence)
	go h.heartbeats(h.ctx)
	return true
}

// heartbeats posts a heartbeat every interval until ctx ends.
func (h *harness) heartbeats(ctx context.Context) {
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := h.api.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgHeartbeat}); err != nil && ctx.Err() == nil {
				h.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// pollInbox reads the inbox when the worker's bell says it may hold
// something new, and at least every QuietRead whatever the bell says (a
// lost ring costs latency, not a message), until the worker is settled or
// ctx ends.
func (h *harness) pollInbox(ctx context.Context) {
	var after int64
	retry := time.Second
	bell := h.cfg.newBell(h.api, h.log)
	read, lastRead := true, time.Now()
	for {
		if !read && time.Since(lastRead) < h.cfg.QuietRead {
			read = bell.wait(ctx, after)
			if ctx.Err() != nil {
				return
			}
			continue
		}
		ans, err := h.api.Inbox(ctx, after, 0)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if galleyerr.Is(galleyerr.Unauthorized, err) {
				h.fatal <- err // galley no longer knows this worker's token
				return
			}
			h.log.Warn("reading the inbox failed; retrying", "err", err, "in", retry)
			if sleepCtx(ctx, retry) != nil {
				return
			}
			retry = min(retry*2, 30*time.Second)
			continue
		}
		retry, read, lastRead = time.Second, false, time.Now()
		for _, it := range ans.Items {
			if it.Seq <= after {
				continue
			}
			after = it.Seq
			h.log.Info("inbox item", "seq", it.Seq, "kind", it.Kind, "question", it.Question)
			h.box.add(it)
		}
		if ans.Settled {
			h.log.Info("galley settled the worker", "outcome", ans.Outcome)
			close(h.settled)
			return
		}
	}
}

// SelfPatience bounds how long a starting harness tries to read its launch
// facts while galley is unreachable.
const SelfPatience = 2 * time.Minute

// untilReachable calls f until it succeeds, fails for another reason than
// galley being unreachable (Unavailable: no connection, 5xx), patience has
// passed or ctx ends. The client's own retries span a few seconds; a
// server restarting takes longer, and a harness that gave up on reading its
// launch facts or on its exit report would end without a word that
// anything hears: a runtime that restarted does not watch the harnesses an
// earlier one started, so their worker would stay unsettled.
func (h *harness) untilReachable(ctx context.Context, what string, patience time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(patience)
	for retry := 250 * time.Millisecond; ; retry = min(retry*2, 10*time.Second) {
		err := f(ctx)
		if err == nil || !galleyerr.Is(galleyerr.Unavailable, err) || ctx.Err() != nil || time.Now().Add(retry).After(deadline) {
			return err
		}
		h.log.Warn(what+" failed; retrying", "err", err, "in", retry)
		if sleepCtx(ctx, retry) != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// events is the harness's side of a driver's Events.
type events struct{ h *harness }

// Started reports ready, and on failure retries in the background until it
// is reported or the run ends, so the driver keeps reading the agent's
// output.
func (e events) Started(evidence string) {
	if e.h.ensureReady(e.h.ctx, evidence) {
		return
	}
	go func() {
		retry := time.Second
		for !e.h.ensureReady(e.h.ctx, evidence) {
			if sleepCtx(e.h.ctx, retry) != nil {
				return
			}
			retry = min(retry*2, 30*time.Second)
		}
	}()
}

func (e events) Note(msg string, args ...any) {
	e.h.log.Info(msg, append([]any{"source", "agent"}, args...)...)
}

// lineLogger logs the agent's stderr one line at a time, so that the
// harness's own stderr stays JSON lines.
type lineLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	buf  []byte
	tail tailLines // the last lines, for the reason of an exit without an outcome
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	if len(l.buf) > 64<<10 {
		l.emit(l.buf)
		l.buf = nil
	}
	return len(p), nil
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

func (l *lineLogger) emit(line []byte) {
	s := truncate(string(bytes.TrimRight(line, "\r")), 4096)
	l.tail.add(s)
	l.log.Info("agent stderr", "line", s)
}
