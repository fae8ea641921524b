package contract

import "time"

// AwaitCap is the longest galley holds a long poll open (deliveries/await
// by default, a harness's inbox and wait, the operator's events): below
// API Gateway's 30 s limit on an HTTP API request, with room for the read
// after the hold.
const AwaitCap = 25 * time.Second

// The worker image's entrypoint is galley-worker; the stack and the ECS
// runtime start it with these subcommands.
const (
	// EgressProxyCommand runs the egress proxy service, the stack's task
	// of the worker image.
	EgressProxyCommand = "egress-proxy"
)

// The worker task.
const (
	// WorkerContainer is the worker task definition's only container,
	// the one RunTask's overrides name.
	WorkerContainer = "worker"
	// DefaultWorkspace is the folder of the worktrees on ECS: the task's
	// own (ephemeral) storage, each worktree a folder below it, kept
	// across tasks by its snapshot.
	DefaultWorkspace = "/workspace"
	// GitCacheMount is where the stack mounts the git object cache's file
	// system (EFS) in the worker container: the folder EnvGitCache names,
	// one cache shared by every worker task of the house.
	GitCacheMount = "/mnt/git-cache"
	// AgentNetworkTask is EnvAgentNetwork on Fargate: the platform
	// confines the task's network (isolated subnets, the security group),
	// so the harness makes no namespace.
	AgentNetworkTask = "task"
)

// EgressPort is the egress proxy's port, on every address of its task.
const EgressPort = 3128

// Defaults of a deployment's binding with kitchn, and of its git
// credential.
const (
	DefaultBackend    = "galley"
	DefaultCredential = "galley-token"
	// DefaultGitUsername is the user name sent with the git credential,
	// which GitHub takes with an installation or fine-grained token.
	DefaultGitUsername = "x-access-token"
)

// ResourcePrefix names a house's own resources, "galley-<house>": its
// doorbell queues' prefix (EnvQueuePrefix), its dashboard and alarms, and
// galley serve's table in DynamoDB.
func ResourcePrefix(house string) string { return "galley-" + house }

// QueueNamePrefix begins the name of every doorbell queue of prefix: a
// queue is QueueNamePrefix(prefix) and a hash of its topic.
func QueueNamePrefix(prefix string) string { return prefix + "-" }

// TagHouse is the tag key naming the house on every resource of the stack
// and on every task the ECS runtime starts.
const TagHouse = "galley:house"

// galley's CloudWatch metrics (package metrics writes them, the stack's
// alarms read them): the namespace, its one dimension (the house), and
// the gauges the reconciler emits on every housekeeping tick: the live
// (unsettled) workers, which the launch cap counts, and the live workers
// without a sign of life within the service's staleness bound.
const (
	MetricNamespace    = "galley"
	MetricDimHouse     = "House"
	MetricLiveWorkers  = "LiveWorkers"
	MetricStuckWorkers = "StuckWorkers"
)
