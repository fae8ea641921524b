package stack

// Environment variable names the stack sets on the functions and the worker
// task. The function code in functions/ and the harness in worker/ read
// these exact names; docs/deploy.md lists them with their meaning. The infra
// module is separate from the service's module, so the service keeps its
// own copy of these names: keep both in step.
const (
	EnvTable          = "GALLEY_TABLE"            // DynamoDB table name
	EnvHouse          = "GALLEY_HOUSE"            // kitchn house served
	EnvBackend        = "GALLEY_BACKEND"          // backend namespace
	EnvCredential     = "GALLEY_CREDENTIAL"       // credential name kitchn's requests name
	EnvTokenSecretArn = "GALLEY_TOKEN_SECRET_ARN" // bearer token secret (not on workerapi, reconciler)
	EnvQueuePrefix    = "GALLEY_QUEUE_PREFIX"     // doorbell queue prefix "galley-<house>": queues are "<prefix>-<hash>"
	EnvCluster        = "GALLEY_CLUSTER"          // ECS cluster ARN
	EnvTaskDefinition = "GALLEY_TASK_DEFINITION"  // worker task definition ARN
	EnvSubnets        = "GALLEY_SUBNETS"          // comma-separated subnet ids for RunTask
	EnvSecurityGroup  = "GALLEY_SECURITY_GROUP"   // security group id for RunTask
	EnvAwaitCapMs     = "GALLEY_AWAIT_CAP_MS"     // deliveries/await hold cap in ms
	EnvMaxWorkers     = "GALLEY_MAX_WORKERS"      // concurrent worker cap (beyond: not-applied rate-limited)
	EnvAgentFamilies  = "GALLEY_AGENT_FAMILIES"   // comma-separated allowed agent families
	EnvRepository     = "GALLEY_REPOSITORY"       // the house's git repository URL
	EnvWorkerEndpoint = "GALLEY_WORKER_ENDPOINT"  // the API's base URL, for the harness
	EnvQueueIdleHours = "GALLEY_QUEUE_IDLE_HOURS" // reconciler: sweep doorbell queues unused this long (default 24)
	EnvSecretGit      = "GALLEY_SECRET_GIT"       // git credential secret ARN (effects, reads: branches)
	// EnvGitUsername is the user name sent with the git credential (context
	// gitUsername, default x-access-token): on effects, reads and the
	// worker container.
	EnvGitUsername = "GALLEY_GIT_USERNAME"
	// EnvDefaultAgent is the agent for launches that name none; the stack
	// sets it (to script) on the effects function only with context
	// scriptAgent=true, for smoke tests. GALLEY_AGENT_FAMILIES, which the
	// descriptor declares, never includes script.
	EnvDefaultAgent = "GALLEY_DEFAULT_AGENT"

	// Beyond the list above, for RunTask: the container to override, and
	// whether to give the task a public IP. The stack sets DISABLED: the
	// workers' subnets have no route out (the egress proxy, the VPC
	// endpoints and EFS are all they reach).
	EnvWorkerContainer = "GALLEY_WORKER_CONTAINER"
	EnvAssignPublicIP  = "GALLEY_ASSIGN_PUBLIC_IP"
	// The secret that signs worker credentials: effects signs, the worker
	// API verifies; nothing else reads it (pkg/lambdaapp).
	EnvWorkerSecretArn = "GALLEY_WORKER_SECRET_ARN"
	// The role the worker API assumes, with a session policy naming one
	// worker's doorbell queue, to grant that worker's harness its own wait
	// (pkg/doorbell/sqsbell's Granter).
	EnvWakeRoleArn = "GALLEY_WAKE_ROLE_ARN"
	// EnvOperatorTokenSecretArn is the operator token's secret (the
	// operator function only).
	EnvOperatorTokenSecretArn = "GALLEY_OPERATOR_TOKEN_SECRET_ARN"
)

// Secrets of the worker task's container: ECS reads them from Secrets
// Manager with the task's execution role when the task starts and sets
// them in the container's environment (the container definition's
// "secrets", which hold only the secrets' ARNs). The task role, which the
// agent might reach, can read no secret.
const (
	EnvAnthropicAPIKey = "GALLEY_ANTHROPIC_API_KEY" // the anthropic secret
	EnvOpenAIAPIKey    = "GALLEY_OPENAI_API_KEY"    // the openai secret (the harness hands it to Codex as CODEX_API_KEY)
	EnvGitCredential   = "GALLEY_GIT_CREDENTIAL"    // the git-credential secret
)

// Plain environment of the worker task's container (set in the task
// definition; configuration only). The runtime adds the worker's own
// identity and bootstrap code per task at RunTask.
const (
	EnvWorkspace = "GALLEY_WORKSPACE" // workspace root inside the task
	// EnvWorkspaceRoot is the workspaces file system's mount in the worker
	// container (WorkspaceMount): set on the effects function, which makes
	// every worktree below it, and on the container, whose remove-workspace
	// command deletes only below it.
	EnvWorkspaceRoot = "GALLEY_WORKSPACE_ROOT"
	// Each provider's base URL (an LLM gateway or proxy), from context
	// anthropicBaseUrl and openaiBaseUrl, set only when given: the harness
	// hands each to its own family's CLI (pkg/harness).
	EnvAnthropicBaseURL = "GALLEY_ANTHROPIC_BASE_URL"
	EnvOpenAIBaseURL    = "GALLEY_OPENAI_BASE_URL"

	// EnvEgressUpstream is the egress proxy the harness sends all its own
	// traffic through and forwards the agent's allowed connections to:
	// http://<the proxy's Cloud Map name>:3128 (the worker has no other
	// way out).
	EnvEgressUpstream = "GALLEY_EGRESS_UPSTREAM"
	// EnvEgressAllow is the house's allowlist for agents, comma-separated
	// host names and *.domain globs (context egressAllowlist; empty: no
	// host). On the worker the harness's agent-facing proxy enforces it
	// first; the egress proxy enforces it again.
	EnvEgressAllow = "GALLEY_EGRESS_ALLOW"
	// EnvAgentNetwork says how the agent's network is confined: "task" on
	// Fargate, where the platform confines the task's network (isolated
	// subnets, the security group) and the harness makes no namespace.
	EnvAgentNetwork = "GALLEY_AGENT_NETWORK"
	// EnvModelCapTokens and EnvModelCapUSD cap one worker's model use
	// (context modelCapTokens, a whole number of tokens, and modelCapUsd,
	// decimal dollars), set only when given: the harness's model proxy
	// refuses calls past either.
	EnvModelCapTokens = "GALLEY_MODEL_CAP_TOKENS"
	EnvModelCapUSD    = "GALLEY_MODEL_CAP_USD"
)

// Plain environment of the egress proxy's container (the worker image run
// as `galley-worker egress-proxy`).
const (
	// EnvEgressListen is the proxy's listen address, ":3128".
	EnvEgressListen = "GALLEY_EGRESS_LISTEN"
	// EnvEgressHarnessAllow is the deployment's own destinations, which
	// only a harness (holding GALLEY_EGRESS_SECRET) may reach: the API's
	// host, the git host, the model providers' hosts and SQS's regional
	// host, comma-separated; derived by the stack, not configured.
	EnvEgressHarnessAllow = "GALLEY_EGRESS_HARNESS_ALLOW"
	// GALLEY_EGRESS_ALLOW (EnvEgressAllow) as on the worker.
)

// EnvEgressSecret is a container secret of both the egress proxy and the
// worker (ECS reads it with each one's execution role): the secret a
// harness proves itself to the proxy with, which the agent never holds.
const EnvEgressSecret = "GALLEY_EGRESS_SECRET"

// WorkerContainerName is the worker task definition's only container.
const WorkerContainerName = "worker"

// Metrics in namespace galley with dimension House=<house>. The
// reconciler emits the two gauges as CloudWatch embedded metric format in
// its log on every housekeeping tick (every five minutes): StuckWorkers,
// the live workers whose last heartbeat is older than the service's
// staleness bound; LiveWorkers, the live (unsettled) workers, which the
// launch cap counts. AwaitFailures comes from a metric filter on the API's
// access log.
const (
	MetricNamespace     = "galley"
	MetricStuckWorkers  = "StuckWorkers"
	MetricLiveWorkers   = "LiveWorkers"
	MetricAwaitFailures = "AwaitFailures"
	MetricDimHouse      = "House"
)
