package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workspace"
)

// Environment variables the harness reads.
const (
	EnvEndpoint  = "GALLEY_WORKER_ENDPOINT"
	EnvTokenFile = "GALLEY_WORKER_TOKEN_FILE" // preferred: a file of mode 600
	EnvToken     = "GALLEY_WORKER_TOKEN"
	// EnvBootstrap carries a one-time code the harness exchanges for its
	// token (ECS workers, whose overrides must hold no secret).
	EnvBootstrap   = "GALLEY_WORKER_BOOTSTRAP"
	EnvWorkspace   = "GALLEY_WORKSPACE"
	EnvRepository  = "GALLEY_REPOSITORY"
	EnvBranch      = "GALLEY_BRANCH"
	EnvHandle      = "GALLEY_WORKER_HANDLE"
	EnvAgentBinDir = "GALLEY_AGENT_BIN_DIR"
	// EnvHeartbeat overrides the heartbeat interval (Go duration).
	EnvHeartbeat = "GALLEY_HEARTBEAT_INTERVAL"
)

// Environment variables the harness gives the agent, with GALLEY_WORKSPACE
// (and, for the scripted agent, GALLEY_BRIEF). The agent gets no other
// GALLEY_ variable: in particular never the worker token or its file.
const (
	EnvMCPURL    = "GALLEY_MCP_URL"
	EnvMCPSecret = "GALLEY_MCP_SECRET"
)

// DefaultHeartbeat is how often the harness posts a heartbeat while the
// agent runs.
const DefaultHeartbeat = 30 * time.Second

// maxTokenFile bounds the token file, as kitchn bounds its credentials.
const maxTokenFile = 16 << 10

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

	Heartbeat time.Duration // default DefaultHeartbeat
	InboxWait time.Duration // one long poll; default client.MaxInboxWait
	StopGrace time.Duration // SIGTERM to SIGKILL when stopping the agent; default 10 s

	// Drivers maps an agent family to its driver; nil means DefaultDrivers.
	Drivers map[string]Driver
	// Prepare prepares the workspace; nil means workspace.Prepare.
	Prepare func(ctx context.Context, repoURL, branch, dir string) error
	// ClientOptions tune the worker-API client (tests shorten retries).
	ClientOptions []client.Option
	// AppendMessages, for agents that cannot block in wait_message, appends
	// the messages waiting at the time of any tool result to that result.
	AppendMessages bool

	Logger *slog.Logger // default: JSON lines on stderr
}

// ConfigFromEnv reads a Config from the environment through getenv.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	op := galleyerr.Op("harness.config")
	cfg := Config{
		Endpoint:    getenv(EnvEndpoint),
		Workspace:   getenv(EnvWorkspace),
		Repository:  getenv(EnvRepository),
		Branch:      getenv(EnvBranch),
		AgentBinDir: getenv(EnvAgentBinDir),
	}
	if _, err := client.ParseEndpoint(cfg.Endpoint); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, EnvEndpoint+" is not a valid endpoint", err)
	}
	switch path := getenv(EnvTokenFile); {
	case path != "":
		tok, err := readTokenFile(path)
		if err != nil {
			return cfg, galleyerr.E(op, err)
		}
		cfg.Token = tok
	case getenv(EnvToken) != "":
		cfg.Token = string(bytes.TrimSpace([]byte(getenv(EnvToken))))
	case getenv(EnvBootstrap) != "":
		cfg.Bootstrap, cfg.Handle = getenv(EnvBootstrap), getenv(EnvHandle)
		if cfg.Handle == "" {
			return cfg, galleyerr.E(op, galleyerr.Invalid, EnvBootstrap+" needs "+EnvHandle)
		}
	default:
		return cfg, galleyerr.E(op, galleyerr.Invalid, "set "+EnvTokenFile+", "+EnvToken+" or "+EnvBootstrap)
	}
	if cfg.Workspace == "" {
		return cfg, galleyerr.E(op, galleyerr.Invalid, EnvWorkspace+" is required")
	}
	if cfg.Repository == "" {
		return cfg, galleyerr.E(op, galleyerr.Invalid, EnvRepository+" is required")
	}
	if s := getenv(EnvHeartbeat); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return cfg, galleyerr.E(op, galleyerr.Invalid, EnvHeartbeat+" must be a positive Go duration")
		}
		cfg.Heartbeat = d
	}
	return cfg, nil
}

// readTokenFile reads the worker token from a regular file that only its
// owner can read, without following a link. Errors never quote the file.
func readTokenFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot open the token file", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot stat the token file", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return "", galleyerr.E(galleyerr.Invalid, fmt.Sprintf("the token file must be a regular file of mode 600, not %v", st.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot read the token file", err)
	}
	if len(data) > maxTokenFile {
		return "", galleyerr.E(galleyerr.Invalid, "the token file is larger than 16 KiB")
	}
	tok := string(bytes.TrimSpace(data))
	if tok == "" {
		return "", galleyerr.E(galleyerr.Invalid, "the token file is empty")
	}
	return tok, nil
}

func (c *Config) setDefaults() {
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.InboxWait <= 0 {
		c.InboxWait = client.MaxInboxWait
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.Drivers == nil {
		c.Drivers = DefaultDrivers()
	}
	if c.Prepare == nil {
		c.Prepare = workspace.Prepare
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
}
