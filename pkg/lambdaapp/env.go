package lambdaapp

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/service"
)

// Function names one of galley's Lambda functions; each serves one route
// group with a role of its own (docs/architecture.md).
type Function string

const (
	Effects    Function = contract.FnEffects
	Reads      Function = contract.FnReads
	Mailbox    Function = contract.FnMailbox
	WorkerAPI  Function = contract.FnWorkerAPI
	Reconciler Function = contract.FnReconciler
	// Operator serves the operator API and console (package operator)
	// under /operator/, with the operator token.
	Operator Function = contract.FnOperator
)

// Functions lists every function, in the stack's order.
var Functions = func() []Function {
	fs := make([]Function, len(contract.FunctionNames))
	for i, n := range contract.FunctionNames {
		fs[i] = Function(n)
	}
	return fs
}()

// servesKitchn reports whether kitchn calls the function (it checks the
// bearer token).
func (f Function) servesKitchn() bool { return f == Effects || f == Reads || f == Mailbox }

// signsWorkers reports whether the function needs the worker secret: the
// effects function signs worker credentials, the worker API verifies them.
// The reconciler signs too: it starts a parked worker's owed resume
// (docs/parking.md), whose task's bootstrap code is the new credential's.
func (f Function) signsWorkers() bool { return f == Effects || f == WorkerAPI || f == Reconciler }

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

// forgetsParked reports whether the function deletes a settled worker's
// session archive (docs/parking.md): the ones whose settles may come after
// the worker's last compute ended (a cancel or release of a parked worker:
// effects, operator), and the reconciler, which sees each compute's end
// after a settle (the worker API's settles are followed by one).
func (f Function) forgetsParked() bool { return f == Effects || f == Operator || f == Reconciler }

// Defaults.
const (
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
)

// Config is one function's configuration, read from its environment.
type Config struct {
	Function Function

	Table       string
	House       string
	Backend     string
	Credential  string
	QueuePrefix string
	// WakeRoleArn: see contract.EnvWakeRoleArn (worker-API function).
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
	Cluster        string
	TaskDefinition string
	// TaskDefinitions are the agent families' own task definitions
	// (contract.EnvTaskDefinitionFor of each of Families that is set).
	TaskDefinitions map[string]string
	Subnets         []string
	SecurityGroups  []string
	WorkerContainer string
	AssignPublicIP  bool
	WorkerEndpoint  string

	Repository   string
	GitSecretArn string
	GitUsername  string
	// WorkspaceRoot is where worktrees are made (service.Config), on the
	// worker task's own storage: GALLEY_WORKSPACE, else /workspace.
	WorkspaceRoot string
	// SnapshotBucket is GALLEY_SNAPSHOT_BUCKET, the worktrees' snapshots'
	// bucket (the worker task's too): the effects function deletes a
	// worktree's snapshot there when it releases the worktree, and the
	// functions that settle parked workers their session archives
	// (Function.forgetsParked). S3PathStyle
	// addresses it by path, for an endpoint of its own
	// (AWS_ENDPOINT_URL_S3: aws-local's stand-in).
	SnapshotBucket string
	S3PathStyle    bool

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
		Table:                  getenv(contract.EnvTable),
		House:                  getenv(contract.EnvHouse),
		Backend:                getenv(contract.EnvBackend),
		Credential:             getenv(contract.EnvCredential),
		QueuePrefix:            getenv(contract.EnvQueuePrefix),
		WakeRoleArn:            getenv(contract.EnvWakeRoleArn),
		TokenSecretArn:         getenv(contract.EnvTokenSecretArn),
		TokenFile:              getenv(contract.EnvTokenFile),
		WorkerSecretArn:        getenv(contract.EnvWorkerSecretArn),
		OperatorTokenSecretArn: getenv(contract.EnvOperatorTokenSecretArn),
		OperatorTokenFile:      getenv(contract.EnvOperatorTokenFile),
		WorkerSecretFile:       getenv(contract.EnvWorkerSecretFile),
		Cluster:                getenv(contract.EnvCluster),
		TaskDefinition:         getenv(contract.EnvTaskDefinition),
		Subnets:                list(getenv(contract.EnvSubnets)),
		SecurityGroups:         list(getenv(contract.EnvSecurityGroup)),
		WorkerContainer:        getenv(contract.EnvWorkerContainer),
		WorkerEndpoint:         getenv(contract.EnvWorkerEndpoint),
		Repository:             getenv(contract.EnvRepository),
		GitSecretArn:           getenv(contract.EnvSecretGit),
		GitUsername:            getenv(contract.EnvGitUsername),
		WorkspaceRoot:          getenv(contract.EnvWorkspace),
		SnapshotBucket:         getenv(contract.EnvSnapshotBucket),
		S3PathStyle:            getenv("AWS_ENDPOINT_URL_S3") != "" || getenv("AWS_ENDPOINT_URL") != "",
		Families:               list(getenv(contract.EnvAgentFamilies)),
		TaskDefinitions:        map[string]string{},
		DefaultAgent:           getenv(contract.EnvDefaultAgent),
		LogLevel:               getenv(contract.EnvLogLevel),
		AwaitCap:               contract.AwaitCap,
		TokenCache:             DefaultTokenCache,
		QueueIdle:              DefaultQueueIdle,
	}
	for _, f := range c.Families {
		if td := getenv(contract.EnvTaskDefinitionFor(f)); td != "" {
			c.TaskDefinitions[f] = td
		}
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
	need(contract.EnvTable, c.Table)
	need(contract.EnvHouse, c.House)
	need(contract.EnvBackend, c.Backend)
	need(contract.EnvQueuePrefix, c.QueuePrefix)
	if fn.servesKitchn() && c.TokenSecretArn == "" && c.TokenFile == "" {
		missing = append(missing, contract.EnvTokenSecretArn)
	}
	if fn == Operator && c.OperatorTokenSecretArn == "" && c.OperatorTokenFile == "" {
		missing = append(missing, contract.EnvOperatorTokenSecretArn)
	}
	if fn.signsWorkers() && c.WorkerSecretArn == "" && c.WorkerSecretFile == "" {
		missing = append(missing, contract.EnvWorkerSecretArn)
	}
	if fn.startsTasks() {
		need(contract.EnvCluster, c.Cluster)
		need(contract.EnvTaskDefinition, c.TaskDefinition)
		need(contract.EnvSubnets, strings.Join(c.Subnets, ","))
		need(contract.EnvWorkerEndpoint, c.WorkerEndpoint)
		need(contract.EnvRepository, c.Repository)
	}
	if len(missing) > 0 {
		return c, galleyerr.E(op, galleyerr.Invalid, "missing environment variable "+strings.Join(missing, ", "))
	}

	if c.Credential == "" {
		c.Credential = contract.DefaultCredential
	}
	if c.WorkerContainer == "" {
		c.WorkerContainer = contract.WorkerContainer
	}
	if c.WorkspaceRoot == "" {
		c.WorkspaceRoot = contract.DefaultWorkspace
	}
	if v := getenv(contract.EnvAssignPublicIP); v != "" {
		switch strings.ToUpper(v) {
		case "ENABLED", "TRUE", "1":
			c.AssignPublicIP = true
		case "DISABLED", "FALSE", "0":
		default:
			return c, galleyerr.E(op, galleyerr.Invalid, contract.EnvAssignPublicIP+" must be ENABLED or DISABLED")
		}
	}
	var err error
	if c.AwaitCap, err = millis(getenv, contract.EnvAwaitCapMs, contract.AwaitCap); err != nil {
		return c, galleyerr.E(op, err)
	}
	if v := getenv(contract.EnvTokenCacheSeconds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, galleyerr.E(op, galleyerr.Invalid, contract.EnvTokenCacheSeconds+" must be a whole number of seconds")
		}
		c.TokenCache = time.Duration(n) * time.Second
	}
	if v := getenv(contract.EnvQueueIdleHours); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < int(minQueueIdle/time.Hour) || n > maxQueueIdleHours {
			return c, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s must be a whole number of hours from %d to %d",
				contract.EnvQueueIdleHours, int(minQueueIdle/time.Hour), maxQueueIdleHours))
		}
		c.QueueIdle = time.Duration(n) * time.Hour
	}
	if v := getenv(contract.EnvMaxWorkers); v != "" {
		if c.MaxWorkers, err = strconv.Atoi(v); err != nil || c.MaxWorkers < 0 {
			return c, galleyerr.E(op, galleyerr.Invalid, contract.EnvMaxWorkers+" must be a whole number")
		}
	}
	for _, f := range c.Families {
		if f != "claude" && f != "codex" {
			return c, galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s: unknown agent family %q (claude, codex)", contract.EnvAgentFamilies, f))
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
		return c, galleyerr.E(op, galleyerr.Invalid, contract.EnvDefaultAgent+" must be script, claude or codex")
	}
	switch strings.ToLower(c.LogLevel) {
	case "", "debug", "info", "warn", "error":
	default:
		return c, galleyerr.E(op, galleyerr.Invalid, contract.EnvLogLevel+" must be debug, info, warn or error")
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
