package ecsrt

import (
	"context"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// ECSAPI is the part of the ECS API the runtime calls; *ecs.Client
// implements it, and a fault-injecting decorator can wrap it.
type ECSAPI interface {
	RunTask(ctx context.Context, in *ecs.RunTaskInput, optFns ...func(*ecs.Options)) (*ecs.RunTaskOutput, error)
	StopTask(ctx context.Context, in *ecs.StopTaskInput, optFns ...func(*ecs.Options)) (*ecs.StopTaskOutput, error)
	DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, optFns ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error)
	ListTasks(ctx context.Context, in *ecs.ListTasksInput, optFns ...func(*ecs.Options)) (*ecs.ListTasksOutput, error)
}

// TaskIndex remembers which task runs a worker, across processes (the lead
// backs it with the worker's store record). It is optional: without it the
// runtime finds a task by its startedBy with ListTasks.
type TaskIndex interface {
	// TaskARN returns the task recorded for handle; ok is false if none.
	TaskARN(ctx context.Context, handle string) (arn string, ok bool, err error)
	// SetTaskARN records handle's task once RunTask has named it.
	SetTaskARN(ctx context.Context, handle, arn string) error
}

// Config says where and how worker tasks run.
type Config struct {
	Cluster        string // cluster name or ARN (required)
	TaskDefinition string // family, family:revision or ARN (required): the default
	// TaskDefinitions are the agent families' own task definitions (each
	// runs its family's image): a launch whose agent has one runs it, any
	// other (the scripted agent) TaskDefinition.
	TaskDefinitions map[string]string
	Container       string   // the worker container's name in the task definition (required)
	Subnets         []string // awsvpc subnets (required: Fargate tasks use awsvpc)
	SecurityGroups  []string
	AssignPublicIP  bool
	// CapacityProvider, when set (FARGATE_SPOT, say), replaces launch type
	// FARGATE with a one-provider strategy.
	CapacityProvider string
	PlatformVersion  string // empty: LATEST

	Endpoint   string // the worker API's base URL, for the harness (required)
	Repository string // the house's repository URL (required); no credentials in it
	House      string // the galley:house tag
}

// Defaults of the options.
const (
	DefaultAttempts = 3
	DefaultBackoff  = 200 * time.Millisecond
	defaultMemo     = 4096
	maxBackoff      = 2 * time.Second
	// stopReason is the StopTask reason ECS shows as stoppedReason.
	stopReason = "galley: worker stopped"
)

// Runtime starts, stops and observes workers as ECS tasks. It is safe for
// concurrent use.
type Runtime struct {
	ecs      ECSAPI
	cfg      Config // TaskDefinitions cloned
	log      *slog.Logger
	index    TaskIndex
	attempts int
	backoff  time.Duration
	memoMax  int

	mu   sync.Mutex
	memo map[string]string // handle -> task ARN: changes only when a resume starts a new task
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runtime) { r.log = l } }

// WithTaskIndex lets the runtime record and find tasks in idx.
func WithTaskIndex(idx TaskIndex) Option { return func(r *Runtime) { r.index = idx } }

// WithRetry sets how many RunTask attempts one Start makes (throttled or of
// unknown outcome; a capacity failure is answered at once) and the first
// pause between them, doubled each time.
func WithRetry(attempts int, backoff time.Duration) Option {
	return func(r *Runtime) { r.attempts, r.backoff = attempts, backoff }
}

// New returns a Runtime over client.
func New(client ECSAPI, cfg Config, opts ...Option) (*Runtime, error) {
	const op = galleyerr.Op("ecsrt.new")
	cfg.TaskDefinitions = maps.Clone(cfg.TaskDefinitions)
	r := &Runtime{
		ecs: client, cfg: cfg, log: slog.New(slog.DiscardHandler),
		attempts: DefaultAttempts, backoff: DefaultBackoff, memoMax: defaultMemo,
		memo: map[string]string{},
	}
	for _, o := range opts {
		o(r)
	}
	switch {
	case client == nil:
		return nil, galleyerr.E(op, galleyerr.Invalid, "no ECS client")
	case cfg.Cluster == "" || cfg.TaskDefinition == "" || cfg.Container == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "cluster, task definition and container are required")
	case slices.Contains(slices.Collect(maps.Values(cfg.TaskDefinitions)), ""):
		return nil, galleyerr.E(op, galleyerr.Invalid, "an agent family's task definition is empty")
	case len(cfg.Subnets) == 0:
		return nil, galleyerr.E(op, galleyerr.Invalid, "Fargate tasks need at least one subnet")
	case cfg.Endpoint == "" || cfg.Repository == "":
		return nil, galleyerr.E(op, galleyerr.Invalid, "the worker endpoint and the repository are required")
	case hasPassword(cfg.Endpoint) || hasPassword(cfg.Repository):
		// Both reach the task overrides, which are not secret.
		return nil, galleyerr.E(op, galleyerr.Invalid, "the worker endpoint and the repository URL must not hold credentials")
	case r.attempts < 1 || r.backoff < 0:
		return nil, galleyerr.E(op, galleyerr.Invalid, "RunTask needs at least one attempt and a non-negative backoff")
	case r.log == nil:
		return nil, galleyerr.E(op, galleyerr.Invalid, "nil logger")
	}
	return r, nil
}

// hasPassword reports whether a URL carries user information.
func hasPassword(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.User != nil
}

// taskDefinition is the task definition a launch of agent runs: its
// family's own, else the default.
func (r *Runtime) taskDefinition(agent string) string {
	if td, ok := r.cfg.TaskDefinitions[agent]; ok {
		return td
	}
	return r.cfg.TaskDefinition
}

// taskFamilies are the task definition families of every worker task this
// runtime may have started, the default's first, each once.
func (r *Runtime) taskFamilies() []string {
	out := []string{taskFamily(r.cfg.TaskDefinition)}
	for _, agent := range slices.Sorted(maps.Keys(r.cfg.TaskDefinitions)) {
		if f := taskFamily(r.cfg.TaskDefinitions[agent]); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}
