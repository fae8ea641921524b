package lambdaapp

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Environment variable names. The first group is a copy of
// infra/stack/envnames.go (the CDK app is its own module): keep both in step.
const (
	EnvTable          = "GALLEY_TABLE"
	EnvHouse          = "GALLEY_HOUSE"
	EnvBackend        = "GALLEY_BACKEND"
	EnvCredential     = "GALLEY_CREDENTIAL"
	EnvTokenSecretArn = "GALLEY_TOKEN_SECRET_ARN"
	EnvQueuePrefix    = "GALLEY_QUEUE_PREFIX"
	EnvCluster        = "GALLEY_CLUSTER"
	EnvTaskDefinition = "GALLEY_TASK_DEFINITION"
	EnvSubnets        = "GALLEY_SUBNETS"
	EnvSecurityGroup  = "GALLEY_SECURITY_GROUP"
	EnvAwaitCapMs     = "GALLEY_AWAIT_CAP_MS"
	EnvMaxWorkers     = "GALLEY_MAX_WORKERS"
	EnvAgentFamilies  = "GALLEY_AGENT_FAMILIES"
	EnvRepository     = "GALLEY_REPOSITORY"
	EnvWorkerEndpoint = "GALLEY_WORKER_ENDPOINT"
	EnvQueueIdleHours = "GALLEY_QUEUE_IDLE_HOURS"

	EnvWorkerContainer = "GALLEY_WORKER_CONTAINER"
	EnvAssignPublicIP  = "GALLEY_ASSIGN_PUBLIC_IP"
	EnvSecretGit       = "GALLEY_SECRET_GIT"
	// EnvGitUsername is the user name sent with the git credential
	// (default x-access-token, which GitHub accepts with any token).
	EnvGitUsername = "GALLEY_GIT_USERNAME"
	EnvWorkspace   = "GALLEY_WORKSPACE"
	// EnvWorkspaceRoot is where the shared file system (EFS) is mounted in
	// the worker container: every worktree lives below it and outlives its
	// task. Unset, workspaces live in each task's ephemeral storage.
	EnvWorkspaceRoot = "GALLEY_WORKSPACE_ROOT"
	// EnvWakeRoleArn is the role the worker-API function assumes, with a
	// session policy naming one worker's doorbell queue, to let that
	// worker's harness wait on its queue itself (sqsbell.Granter).
	EnvWakeRoleArn = "GALLEY_WAKE_ROLE_ARN"
	// EnvOperatorTokenSecretArn names the operator token's secret: the
	// operator function's only secret, which no other function reads.
	EnvOperatorTokenSecretArn = "GALLEY_OPERATOR_TOKEN_SECRET_ARN"
)

// Names this package adds (not yet in infra/stack/envnames.go).
const (
	// EnvWorkerSecretArn names the Secrets Manager secret that signs worker
	// credentials. Only the effects function (which signs) and the worker
	// API function (which verifies) read it.
	EnvWorkerSecretArn = "GALLEY_WORKER_SECRET_ARN"
	// EnvDefaultAgent is the agent for launches that name none (script,
	// claude or codex); default: the first of GALLEY_AGENT_FAMILIES, else
	// script.
	EnvDefaultAgent = "GALLEY_DEFAULT_AGENT"
	// EnvTokenCacheSeconds bounds how long the bearer token is cached, so a
	// rotation takes effect within it (default 300).
	EnvTokenCacheSeconds = "GALLEY_TOKEN_CACHE_SECONDS"
	// EnvLogLevel is debug, info (default), warn or error.
	EnvLogLevel = "GALLEY_LOG_LEVEL"

	// Stand-in settings for one machine (the aws-local stack), where no
	// Secrets Manager runs: the bearer token and the worker secret come from
	// files of mode 600. A function uses them only when the corresponding
	// ARN is unset.
	EnvTokenFile         = "GALLEY_TOKEN_FILE"
	EnvWorkerSecretFile  = "GALLEY_WORKER_SECRET_FILE"
	EnvOperatorTokenFile = "GALLEY_OPERATOR_TOKEN_FILE"
)

// Function names one of galley's Lambda functions; each serves one route
// group with a role of its own (docs/architecture.md).
type Function string

const (
	Effects    Function = "effects"
	Reads      Function = "reads"
	Mailbox    Function = "mailbox"
	WorkerAPI  Function = "workerapi"
	Reconciler Function = "reconciler"
	// Operator serves the operator API and console (package operator)
	// under /operator/, with the operator token.
	Operator Function = "operator"
)

// Functions lists every function.
var Functions = []Function{Effects, Reads, Mailbox, WorkerAPI, Reconciler, Operator}

// servesKitchn reports whether kitchn calls the function (it checks the
// bearer token).
func (f Function) servesKitchn() bool { return f == Effects || f == Reads || f == Mailbox }

// signsWorkers reports whether the function needs the worker secret: the
// effects function signs worker credentials, the worker API verifies them.
func (f Function) signsWorkers() bool { return f == Effects || f == WorkerAPI }

// recordsEvents reports whether the function keeps the workers' event logs
// (package eventlog): the ones whose calls change workers and may ring
// doorbells. The reads function writes nothing; the mailbox's calls change
// no worker's state, and its role may not ring.
func (f Function) recordsEvents() bool {
	return f == Effects || f == WorkerAPI || f == Reconciler || f == Operator
}

// startsTasks reports whether the function talks to ECS: effects runs and
// stops tasks, reads describes them for liveness.
func (f Function) startsTasks() bool { return f == Effects || f == Reads }

// Defaults.
const (
	// DefaultAwaitCap is below API Gateway's 30 s integration limit, with
	// room for the read after the hold.
	DefaultAwaitCap   = 25 * time.Second
	DefaultTokenCache = 5 * time.Minute
	// DefaultClockSkew is the margin between API Gateway's clock (which
	// stamps arrivals) and a function's (which stamps lookup promises); see
	// docs/architecture.md.
	DefaultClockSkew = service.DefaultClockSkew
	// DefaultQueueIdle is how long a doorbell queue may go unused before
	// the reconciler's hourly sweep deletes it (GALLEY_QUEUE_IDLE_HOURS).
	DefaultQueueIdle = 24 * time.Hour
	// minQueueIdle is twice the doorbell's hourly touch: sqsbell's Sweep
	// refuses less, as it could take a queue in use.
	minQueueIdle      = 2 * time.Hour
	maxQueueIdleHours = 24 * 366
	// DefaultWorkspace is where the worker task's workspaces live.
	DefaultWorkspace = "/workspace"
	defaultContainer = "worker"
)

// Config is one function's configuration, read from its environment.
type Config struct {
	Function Function

	Table       string
	House       string
	Backend     string
	Credential  string
	QueuePrefix string
	// WakeRoleArn: see EnvWakeRoleArn (worker-API function).
	WakeRoleArn string
	// QueueIdle: the reconciler sweeps doorbell queues unused for longer.
	QueueIdle time.Duration

	// Kitchn's bearer token: a Secrets Manager ARN, or (aws-local) a file.
	TokenSecretArn string
	TokenFile      string
	TokenCache     time.Duration

	// The operator token (the operator function): an ARN, or (aws-local)
	// a file.
	OperatorTokenSecretArn string
	OperatorTokenFile      string

	// The worker-credential secret: an ARN, or (aws-local) a file.
	WorkerSecretArn  string
	WorkerSecretFile string

	// ECS (effects and reads).
	Cluster         string
	TaskDefinition  string
	Subnets         []string
	SecurityGroups  []string
	WorkerContainer string
	AssignPublicIP  bool
	WorkerEndpoint  string

	Repository   string
	GitSecretArn string
	GitUsername  string
	// WorkspaceRoot is where worktrees are made (service.Config): the
	// shared root when set, else GALLEY_WORKSPACE, else /workspace.
	WorkspaceRoot string
	// SharedWorkspaceRoot is GALLEY_WORKSPACE_ROOT: the shared file
	// system's mount in the worker container, which the ECS runtime keeps
	// workspaces under and removes them from with a cleanup task.
	SharedWorkspaceRoot string

	AwaitCap     time.Duration
	MaxWorkers   int
	Families     []string
	DefaultAgent string
	LogLevel     string
}

// ConfigFromEnv reads fn's configuration through getenv. A missing required
// variable is an Invalid error that names it.
func ConfigFromEnv(fn Function, getenv func(string) string) (Config, error) {
	const op = galleyerr.Op("lambdaapp.config")
	c := Config{
		Function:               fn,
		Table:                  getenv(EnvTable),
		House:                  getenv(EnvHouse),
		Backend:                getenv(EnvBackend),
		Credential:             getenv(EnvCredential),
		QueuePrefix:            getenv(EnvQueuePrefix),
		WakeRoleArn:            getenv(EnvWakeRoleArn),
		TokenSecretArn:         getenv(EnvTokenSecretArn),
		TokenFile:              getenv(EnvTokenFile),
		WorkerSecretArn:        getenv(EnvWorkerSecretArn),
		OperatorTokenSecretArn: getenv(EnvOperatorTokenSecretArn),
		OperatorTokenFile:      getenv(EnvOperatorTokenFile),
		WorkerSecretFile:       getenv(EnvWorkerSecretFile),
		Cluster:                getenv(EnvCluster),
		TaskDefinition:         getenv(EnvTaskDefinition),
		Subnets:                list(getenv(EnvSubnets)),
		SecurityGroups:         list(getenv(EnvSecurityGroup)),
		WorkerContainer:        getenv(EnvWorkerContainer),
		WorkerEndpoint:         getenv(EnvWorkerEndpoint),
		Repository:             getenv(EnvRepository),
		GitSecretArn:           getenv(EnvSecretGit),
		GitUsername:            getenv(EnvGitUsername),
		WorkspaceRoot:          getenv(EnvWorkspace),
		SharedWorkspaceRoot:    getenv(EnvWorkspaceRoot),
		Families:               list(getenv(EnvAgentFamilies)),
		DefaultAgent:           getenv(EnvDefaultAgent),
		LogLevel:               getenv(EnvLogLevel),
		AwaitCap:               DefaultAwaitCap,
		TokenCache:             DefaultTokenCache,
		QueueIdle:              DefaultQueueIdle,
	}
	switch fn {
	case Effects, Reads, Mailbox, WorkerAPI, Reconciler, Operator:
	default:
		return c, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("unknown function %q", fn))
	}
	var missing []string
	need := func(name, v string) {
		if v == "" {
			missing = append(missing, name)
		}
	}
	need(EnvTable, c.Table)
	need(EnvHouse, c.House)
	need(EnvBackend, c.Backend)
	need(EnvQueuePrefix, c.QueuePrefix)
	if fn.servesKitchn() && c.TokenSecretArn == "" && c.TokenFile == "" {
		missing = append(missing, EnvTokenSecretArn)
	}
	if fn == Operator && c.OperatorTokenSecretArn == "" && c.OperatorTokenFile == "" {
		missing = append(missing, EnvOperatorTokenSecretArn)
	}
	if fn.signsWorkers() && c.WorkerSecretArn == "" && c.WorkerSecretFile == "" {
		missing = append(missing, EnvWorkerSecretArn)
	}
	if fn.startsTasks() {
		need(EnvCluster, c.Cluster)
		need(EnvTaskDefinition, c.TaskDefinition)
		need(EnvSubnets, strings.Join(c.Subnets, ","))
		need(EnvWorkerEndpoint, c.WorkerEndpoint)
		need(EnvRepository, c.Repository)
	}
	if len(missing) > 0 {
		return c, galleyerr.E(op, galleyerr.Invalid, "missing environment variable "+strings.Join(missing, ", "))
	}

	if c.Credential == "" {
		c.Credential = "galley-token"
	}
	if c.WorkerContainer == "" {
		c.WorkerContainer = defaultContainer
	}
	if r := c.SharedWorkspaceRoot; r != "" {
		if !path.IsAbs(r) || path.Clean(r) == "/" {
			return c, galleyerr.E(op, galleyerr.Invalid, EnvWorkspaceRoot+" must be an absolute path below /")
		}
		c.SharedWorkspaceRoot = path.Clean(r)
		c.WorkspaceRoot = c.SharedWorkspaceRoot
	}
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = DefaultWorkspace
	}
	if v := getenv(EnvAssignPublicIP); v != "" {
		switch strings.ToUpper(v) {
		case "ENABLED", "TRUE", "1":
			c.AssignPublicIP = true
		case "DISABLED", "FALSE", "0":
		default:
			return c, galleyerr.E(op, galleyerr.Invalid, EnvAssignPublicIP+" must be ENABLED or DISABLED")
		}
	}
	var err error
	if c.AwaitCap, err = millis(getenv, EnvAwaitCapMs, DefaultAwaitCap); err != nil {
		return c, galleyerr.E(op, err)
	}
	if v := getenv(EnvTokenCacheSeconds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, galleyerr.E(op, galleyerr.Invalid, EnvTokenCacheSeconds+" must be a whole number of seconds")
		}
		c.TokenCache = time.Duration(n) * time.Second
	}
	if v := getenv(EnvQueueIdleHours); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < int(minQueueIdle/time.Hour) || n > maxQueueIdleHours {
			return c, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s must be a whole number of hours from %d to %d",
				EnvQueueIdleHours, int(minQueueIdle/time.Hour), maxQueueIdleHours))
		}
		c.QueueIdle = time.Duration(n) * time.Hour
	}
	if v := getenv(EnvMaxWorkers); v != "" {
		if c.MaxWorkers, err = strconv.Atoi(v); err != nil || c.MaxWorkers < 0 {
			return c, galleyerr.E(op, galleyerr.Invalid, EnvMaxWorkers+" must be a whole number")
		}
	}
	for _, f := range c.Families {
		if f != "claude" && f != "codex" {
			return c, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s: unknown agent family %q (claude, codex)", EnvAgentFamilies, f))
		}
	}
	if c.DefaultAgent == "" {
		c.DefaultAgent = "script"
		if len(c.Families) > 0 {
			c.DefaultAgent = c.Families[0]
		}
	}
	switch c.DefaultAgent {
	case "script", "claude", "codex":
	default:
		return c, galleyerr.E(op, galleyerr.Invalid, EnvDefaultAgent+" must be script, claude or codex")
	}
	switch strings.ToLower(c.LogLevel) {
	case "", "debug", "info", "warn", "error":
	default:
		return c, galleyerr.E(op, galleyerr.Invalid, EnvLogLevel+" must be debug, info, warn or error")
	}
	return c, nil
}

func millis(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, galleyerr.Errorf(galleyerr.Invalid, "%s must be a positive number of milliseconds", name)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// list splits a comma-separated value, dropping empty items.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
