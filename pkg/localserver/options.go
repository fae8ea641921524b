package localserver

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/galley-run/galley/pkg/connlimit"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/store"
)

// Options are the server's settings; zero values take the defaults.
type Options struct {
	Listen     string // default 127.0.0.1:8080
	House      string // default "local"
	Backend    string // default contract.DefaultBackend
	Credential string // default contract.DefaultCredential
	TokenFile  string // default <data>/private/token
	// OperatorTokenFile holds the operator token (the operator API and
	// console, package operator); default <data>/private/operator-token.
	OperatorTokenFile string
	Data              string // default .galley
	Repository        string // default a bare repository under <data>/repository.git
	DefaultAgent      string // script, claude or codex; default script
	WorkerBin         string // the galley-worker binary; default beside this executable or on PATH
	AwaitCap          time.Duration
	MaxWorkers        int

	// Store and Doorbell, when set, replace the embedded store and the
	// in-process doorbell (galley serve --store dynamodb --doorbell sqs).
	Store    store.Store
	Doorbell service.Doorbell
	// Families are the agent families declared in workerSelection; empty
	// means the families whose CLI is found (in AgentBinDir or on PATH).
	Families []string
	// AgentBinDir is where the claude and codex CLIs are looked up first.
	AgentBinDir string
	// AnthropicBaseURL and OpenAIBaseURL, when set, are where claude and
	// codex workers send their model calls (an LLM gateway or proxy): the
	// harness checks them (harness.ValidateBaseURL) and gives each to its
	// own family's CLI.
	AnthropicBaseURL string
	OpenAIBaseURL    string
	// EgressAllow is the house's allowlist (comma-separated host names or
	// *.domain): what each agent may reach through its egress proxy;
	// empty, no host. EgressResolver is a DNS server (host:port) the
	// proxies resolve names with instead of the system's.
	EgressAllow    string
	EgressResolver string
	// ModelCapTokens and ModelCapUSD cap each worker's model calls at its
	// model proxy: tokens as the provider counts them, and dollars (a
	// decimal) at galley's price table; zero and empty for no cap.
	ModelCapTokens int64
	ModelCapUSD    string
	// Limits of the HTTP server; zero values take the Default* constants.
	// BodyTimeout is how long a request's body may take to arrive after
	// its headers; MaxUnauthenticated bounds the unauthenticated requests
	// (the credential exchange) served at once. See newHTTPServer.
	ReadHeaderTimeout  time.Duration
	BodyTimeout        time.Duration
	IdleTimeout        time.Duration
	MaxHeaderBytes     int
	MaxUnauthenticated int
	// NoEventLog records nothing in the workers' event log: only for
	// measuring what the log costs the worker's calls.
	NoEventLog bool
	// Conns bounds the connections held per peer and in all; kitchn's
	// connections (once a call on one carried its token) are reserved
	// capacity outside the counts (pkg/connlimit).
	Conns connlimit.Limits
	// WorkerLogLimit is each worker's log budget in bytes (default
	// harness.DefaultLogLimit, 16 MiB): <data>/workers/<handle>/harness.log.
	WorkerLogLimit int64
	// PushLimit and PushBudget bound each worker's pushes, bytes per push
	// and in all (0: harness.DefaultPushLimit, 100 MiB, and
	// harness.DefaultPushBudget, 512 MiB).
	PushLimit, PushBudget int64
	// ParkAfter parks a worker whose agent has waited on its coordinator
	// this long (docs/parking.md); 0: never. Parked agents' session files
	// are kept in <data>/parked.
	ParkAfter time.Duration
	// Logger receives the request log; default JSON on stderr, buffered
	// (pkg/logbuf) and written out at least every 100 ms.
	Logger *slog.Logger
}

// Defaults fills in the defaults of unset options.
func (o *Options) Defaults() {
	set := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	set(&o.Listen, "127.0.0.1:8080")
	set(&o.House, "local")
	set(&o.Backend, contract.DefaultBackend)
	set(&o.Credential, contract.DefaultCredential)
	set(&o.Data, ".galley")
	set(&o.DefaultAgent, "script")
	if o.TokenFile == "" {
		o.TokenFile = filepath.Join(o.Data, PrivateDir, "token")
	}
	if o.OperatorTokenFile == "" {
		o.OperatorTokenFile = filepath.Join(o.Data, PrivateDir, "operator-token")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	o.limits()
}

// modelCapEnv is o's model cap as the harness reads it.
func (o Options) modelCapEnv() func(string) string {
	return func(name string) string {
		switch {
		case name == contract.EnvModelCapTokens && o.ModelCapTokens != 0:
			return strconv.FormatInt(o.ModelCapTokens, 10)
		case name == contract.EnvModelCapUSD:
			return o.ModelCapUSD
		}
		return ""
	}
}

// baseURLs are the providers' base URLs of o, each with the variable the
// harness reads it from.
func baseURLs(o Options) []struct{ what, env, v string } {
	return []struct{ what, env, v string }{
		{"Anthropic base URL (--anthropic-base-url)", contract.EnvAnthropicBaseURL, o.AnthropicBaseURL},
		{"OpenAI base URL (--openai-base-url)", contract.EnvOpenAIBaseURL, o.OpenAIBaseURL},
	}
}
