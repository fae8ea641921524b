package harness

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/modelproxy"
	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workspace"
)

// The names of the contract that aws-local and the real-CLI tests
// (local/) take from this package; the harness reads them, and everything
// else, from package contract, which says what each means.
const (
	EnvWorkspace        = contract.EnvWorkspace
	EnvGitUsername      = contract.EnvGitUsername
	EnvGitCache         = contract.EnvGitCache
	EnvAnthropicBaseURL = contract.EnvAnthropicBaseURL
	EnvOpenAIBaseURL    = contract.EnvOpenAIBaseURL
	EnvEgressUpstream   = contract.EnvEgressUpstream
	EnvConfine          = contract.EnvAgentConfine
	EnvLogLimit         = contract.EnvLogLimit
	EnvPushLimit        = contract.EnvPushLimit
	EnvPushBudget       = contract.EnvPushBudget
	DefaultGitUsername  = contract.DefaultGitUsername
)

// Provider keys under the names the CLIs read, which the harness also
// accepts as fallbacks when the GALLEY_ names are unset (the local shape,
// where galley serve passes them through by these names).
const (
	EnvAnthropicCLIKey = "ANTHROPIC_API_KEY"
	EnvCodexCLIKey     = "CODEX_API_KEY"
	EnvOpenAICLIKey    = "OPENAI_API_KEY"
)

// DefaultQuietRead bounds how long an idle harness goes without reading its
// inbox: a ring that was lost (SQS refused the send, the queue was swept)
// delays a message by at most this. Each read is one worker-API call.
const DefaultQuietRead = 5 * time.Minute

// newBell is the bell the harness waits on: the one galley's wake grant
// names.
func (c Config) newBell(api wakeAPI, log *slog.Logger) bell {
	b := newWakeBell(api, log, c.InboxWait, c.SQSEndpoint, c.CABundle)
	b.proxy = c.ownProxy
	return b
}

// DefaultHeartbeat is how often the harness posts a heartbeat while the
// agent runs.
const DefaultHeartbeat = 30 * time.Second

// DefaultProgress is how often a tool call that blocks (ask_coordinator,
// wait_message) sends an MCP progress notification while it waits. Claude
// Code aborts a call that sends nothing for 300 s (its MCP tool idle
// limit), and its HTTP transport has dropped calls silent for 350 to 450 s;
// a notification every 20 s keeps both alive with a wide margin
// (docs/agents.md).
const DefaultProgress = 20 * time.Second

// DefaultGitCacheName is the git object cache's folder, beside the
// workspace, when contract.EnvGitCache is unset.
const DefaultGitCacheName = ".galley-git-cache"

// Config is what Run needs. ConfigFromEnv fills it from the environment;
// the zero values of the optional fields take the defaults.
type Config struct {
	Endpoint string
	// Token is the worker's own credential for the worker API. It goes only
	// into the client's Authorization header: never into a log line, an
	// error or the agent's environment.
	Token string
	// Bootstrap, when Token is empty, is exchanged for it at start; Handle
	// names the worker the code belongs to.
	Bootstrap   string
	Handle      string
	Workspace   string
	Repository  string
	Branch      string // empty: the branch galley names in Self
	AgentBinDir string
	// PushLimit and PushBudget bound what the agent's pushes bring through
	// the push gate: bytes per push and in all (contract.EnvPushLimit,
	// contract.EnvPushBudget; zero: DefaultPushLimit, DefaultPushBudget).
	PushLimit, PushBudget int64
	// Budgets bound what the harness holds for the agent at its MCP
	// server and push gate (budgets.go; zero values: the defaults).
	Budgets Budgets
	// GitCache is the shared git object cache's folder; empty for none.
	// ConfigFromEnv reads contract.EnvGitCache.
	GitCache string

	// AnthropicKey and OpenAIKey are the model providers' keys; an agent
	// gets its own family's only (see AgentNeeds). GitCredential (with
	// GitUsername) authenticates the harness to the house repository; the
	// agent never gets it. None of them is ever logged: Config's String,
	// GoString and LogValue redact them.
	AnthropicKey  string
	OpenAIKey     string
	GitCredential string
	GitUsername   string // default contract.DefaultGitUsername with a GitCredential
	// AnthropicBaseURL and OpenAIBaseURL, when set, are where the agent
	// family of that provider sends its model calls (ValidateBaseURL).
	AnthropicBaseURL string
	OpenAIBaseURL    string

	Heartbeat time.Duration // default DefaultHeartbeat
	Progress  time.Duration // MCP progress while a tool call blocks; default DefaultProgress
	InboxWait time.Duration // one wait through galley (WakeGalley); default client.MaxInboxWait
	// SQSEndpoint and CABundle are where a wake grant's queue is reached
	// and the PEM file of extra CAs to trust there: from the task's
	// AWS_ENDPOINT_URL_SQS and AWS_CA_BUNDLE (aws-local sets them; on AWS
	// both are empty).
	SQSEndpoint string
	CABundle    string
	// QuietRead is how long the harness goes without reading its inbox
	// when nothing rang; default DefaultQuietRead.
	QuietRead time.Duration
	StopGrace time.Duration // SIGTERM to SIGKILL when stopping the agent; default 10 s

	// Confine is how the agent is confined (see Confinement): ConfineAuto
	// picks the strongest the platform allows; empty is ConfineNone (the
	// in-process tests'). ConfigFromEnv reads contract.EnvAgentConfine,
	// default auto.
	Confine Confinement
	// ConfineExe is the galley-worker whose agent-exec starts a confined
	// agent; empty means this executable.
	ConfineExe string
	// Network is how the agent's network is confined (see AgentNetwork);
	// empty is NetAuto. ConfigFromEnv reads contract.EnvAgentNetwork.
	Network AgentNetwork
	// EgressAllow is the house's allowlist for the agent's egress proxy
	// (contract.EnvEgressAllow; empty: the agent reaches no host).
	EgressAllow egress.HostList
	// EgressUpstream and EgressSecret name the stack's egress service and
	// the harness's credential there (contract.EnvEgressUpstream,
	// contract.EnvEgressSecret): set, every call of the harness's own goes through
	// it. EgressSecret is a secret: redacted like the keys.
	EgressUpstream, EgressSecret string
	// EgressResolver is the DNS server the agent's egress proxy asks
	// (contract.EnvEgressResolver); empty: the system's.
	EgressResolver string
	// Snapshots keeps the worktree's snapshot where the workspace does not
	// outlive the worker (a task's own storage): saved when the agent
	// has ended, restored at a launch that reuses the worktree
	// (docs/snapshots.md). nil: none. ConfigFromEnv makes it from
	// contract.EnvSnapshotBucket or contract.EnvSnapshotDir.
	Snapshots SnapshotStore
	// House is the first segment of the snapshot's key
	// (contract.EnvHouse).
	House string
	// SnapshotLimits bound one snapshot (contract.EnvSnapshotMaxBytes,
	// contract.EnvSnapshotMaxEntries; zero: snapshot.DefaultLimits).
	SnapshotLimits snapshot.Limits
	// ParkAfter parks the agent once it has waited on its coordinator
	// this long (docs/parking.md); zero: never (contract.EnvParkAfter).
	ParkAfter time.Duration
	// Parks keeps a parking's session archive (contract.EnvParkDir, else
	// Snapshots), and ParkLimits bound it (zero: DefaultParkLimits).
	Parks      SnapshotStore
	ParkLimits snapshot.Limits
	// ModelBudget caps the worker's model calls at its model proxy
	// (contract.EnvModelCapTokens, contract.EnvModelCapUSD); zero: no cap.
	ModelBudget modelproxy.Budget

	// Drivers maps an agent family to its driver; nil means DefaultDrivers.
	Drivers map[string]Driver
	// Prepare prepares the workspace; nil means workspace.Prepare, with
	// the git credential when one is set.
	Prepare func(ctx context.Context, repoURL, branch, dir string) error
	// UseGate makes the clone at dir fetch and push repoURL through the
	// agent's push gate at gateURL; nil means workspace.UseGate.
	UseGate func(ctx context.Context, dir, repoURL, gateURL string) error
	// ClientOptions tune the worker-API client (tests shorten retries).
	ClientOptions []client.Option

	Logger *slog.Logger // default: JSON lines on stderr

	// ownProxy is the egress service as the harness (EgressUpstream with
	// EgressSecret), which every call of the harness's own goes through;
	// nil for none. setDefaults makes it.
	ownProxy *url.URL
}

const redacted = "[redacted]"

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// redactedCopy is c with every secret replaced.
func (c Config) redactedCopy() configView {
	return configView{
		Endpoint: c.Endpoint, Token: redact(c.Token), Bootstrap: redact(c.Bootstrap), Handle: c.Handle,
		Workspace: c.Workspace, Repository: c.Repository, Branch: c.Branch, AgentBinDir: c.AgentBinDir, GitCache: c.GitCache,
		AnthropicKey: redact(c.AnthropicKey), OpenAIKey: redact(c.OpenAIKey),
		GitCredential: redact(c.GitCredential), GitUsername: c.GitUsername,
		AnthropicBaseURL: c.AnthropicBaseURL, OpenAIBaseURL: c.OpenAIBaseURL,
		EgressAllow: c.EgressAllow.String(), EgressUpstream: c.EgressUpstream, EgressSecret: redact(c.EgressSecret),
		Heartbeat: c.Heartbeat, Progress: c.Progress, InboxWait: c.InboxWait, StopGrace: c.StopGrace,
	}
}

// configView is what may be shown of a Config.
type configView struct {
	Endpoint, Token, Bootstrap, Handle, Workspace, Repository, Branch, AgentBinDir, GitCache string
	AnthropicKey, OpenAIKey, GitCredential, GitUsername                                      string
	AnthropicBaseURL, OpenAIBaseURL                                                          string
	EgressAllow, EgressUpstream, EgressSecret                                                string
	Heartbeat, Progress, InboxWait, StopGrace                                                time.Duration
}

// String shows the configuration with its secrets redacted.
func (c Config) String() string { return fmt.Sprintf("%+v", c.redactedCopy()) }

// GoString is String, so %#v redacts too.
func (c Config) GoString() string { return "harness.Config" + c.String() }

// LogValue logs the configuration with its secrets redacted.
func (c Config) LogValue() slog.Value {
	v := c.redactedCopy()
	return slog.GroupValue(
		slog.String("endpoint", v.Endpoint), slog.String("token", v.Token), slog.String("bootstrap", v.Bootstrap),
		slog.String("handle", v.Handle), slog.String("workspace", v.Workspace), slog.String("repository", v.Repository),
		slog.String("branch", v.Branch), slog.String("agentBinDir", v.AgentBinDir), slog.String("gitCache", v.GitCache),
		slog.String("anthropicKey", v.AnthropicKey), slog.String("openaiKey", v.OpenAIKey),
		slog.String("gitCredential", v.GitCredential), slog.String("gitUsername", v.GitUsername),
		slog.String("anthropicBaseURL", v.AnthropicBaseURL), slog.String("openaiBaseURL", v.OpenAIBaseURL),
		slog.String("egressAllow", v.EgressAllow), slog.String("egressUpstream", v.EgressUpstream), slog.String("egressSecret", v.EgressSecret),
		slog.Duration("heartbeat", v.Heartbeat), slog.Duration("progress", v.Progress), slog.Duration("inboxWait", v.InboxWait), slog.Duration("stopGrace", v.StopGrace),
	)
}

// prepareWith is workspace.Prepare, presenting the git credential when one
// is set (in git's environment only: never in the clone's config), and
// cloning through the git object cache when there is one.
func prepareWith(user, credential, cache string, proxy *url.URL, log *slog.Logger) func(ctx context.Context, repoURL, branch, dir string) error {
	var opts []workspace.Option
	if credential != "" {
		opts = append(opts, workspace.WithCredential(user, credential))
	}
	if proxy != nil {
		opts = append(opts, workspace.WithProxy(proxy.String()))
	}
	if cache != "" {
		opts = append(opts, workspace.WithCache(cache, log))
	}
	return func(ctx context.Context, repoURL, branch, dir string) error {
		return workspace.Prepare(ctx, repoURL, branch, dir, opts...)
	}
}

func (c *Config) setDefaults() {
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Progress <= 0 {
		c.Progress = DefaultProgress
	}
	if c.InboxWait <= 0 {
		c.InboxWait = client.MaxInboxWait
	}
	if c.QuietRead <= 0 {
		c.QuietRead = DefaultQuietRead
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.Drivers == nil {
		c.Drivers = DefaultDrivers()
	}
	if c.GitCredential != "" && c.GitUsername == "" {
		c.GitUsername = contract.DefaultGitUsername
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if c.PushLimit <= 0 {
		c.PushLimit = DefaultPushLimit
	}
	if c.PushBudget <= 0 {
		c.PushBudget = DefaultPushBudget
	}
	c.Budgets = c.Budgets.withDefaults()
	if c.EgressUpstream != "" && c.ownProxy == nil {
		// ConfigFromEnv checked it; a Config made in code is checked here.
		if u, err := egress.HarnessProxyURL(c.EgressUpstream, c.EgressSecret); err == nil {
			c.ownProxy = u
		} else {
			c.Logger.Error("the egress service cannot be used: the harness's own calls go direct", "err", err)
		}
	}
	if c.Prepare == nil {
		c.Prepare = prepareWith(c.GitUsername, c.GitCredential, c.GitCache, c.ownProxy, c.Logger)
	}
	if c.UseGate == nil {
		c.UseGate = workspace.UseGate
	}
}
