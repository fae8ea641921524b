package contract

import "strings"

// EnvPrefix begins every variable of galley's. None passes from a
// server's own environment to a worker by name (the server's settings,
// kitchn's token among them, share the prefix), and an agent session
// passes none on to its CLI but EnvMCPSecret.
const EnvPrefix = "GALLEY_"

// The functions' environment. The stack sets these on the Lambda functions
// (docs/deploy.md says which function gets which, and the value), aws-local
// on its functions the same way; package lambdaapp reads them. A missing
// one that a function needs fails its start with an error naming it.
const (
	// EnvTable is the DynamoDB table's name.
	EnvTable = "GALLEY_TABLE"
	// EnvHouse is the kitchn house the deployment serves (on the worker
	// task too).
	EnvHouse = "GALLEY_HOUSE"
	// EnvBackend is the backend namespace kitchn binds the deployment as.
	EnvBackend = "GALLEY_BACKEND"
	// EnvCredential is the credential name kitchn's requests carry
	// (default DefaultCredential).
	EnvCredential = "GALLEY_CREDENTIAL"
	// EnvTokenSecretArn is the Secrets Manager secret of kitchn's bearer
	// token, on the functions kitchn calls (effects, reads, mailbox) only.
	EnvTokenSecretArn = "GALLEY_TOKEN_SECRET_ARN"
	// EnvWorkerSecretArn is the secret that signs worker credentials: the
	// effects function signs, the worker API verifies, nothing else reads
	// it.
	EnvWorkerSecretArn = "GALLEY_WORKER_SECRET_ARN"
	// EnvOperatorTokenSecretArn is the operator token's secret: the
	// operator function's only secret, which no other function reads.
	EnvOperatorTokenSecretArn = "GALLEY_OPERATOR_TOKEN_SECRET_ARN"
	// EnvSecretGit is the git credential's secret (effects, and reads for
	// branches).
	EnvSecretGit = "GALLEY_SECRET_GIT"
	// EnvGitUsername is the user name sent with the git credential
	// (default DefaultGitUsername), on effects, reads and the worker task.
	EnvGitUsername = "GALLEY_GIT_USERNAME"
	// EnvDefaultAgent is the agent of launches that name none: script,
	// claude or codex; unset, the first of EnvAgentFamilies, else script.
	// The stack sets it (to script) on the effects function only with
	// context scriptAgent=true, for smoke tests: EnvAgentFamilies, which
	// the descriptor declares, never includes script.
	EnvDefaultAgent = "GALLEY_DEFAULT_AGENT"
	// EnvAgentFamilies lists the agent families the deployment offers
	// (claude, codex), comma-separated, as the descriptor declares them.
	EnvAgentFamilies = "GALLEY_AGENT_FAMILIES"
	// EnvMaxWorkers caps the live workers: a launch beyond it is
	// not-applied rate-limited. Unset or 0, no cap.
	EnvMaxWorkers = "GALLEY_MAX_WORKERS"
	// EnvAwaitCapMs bounds deliveries/await's hold, in milliseconds
	// (default AwaitCap).
	EnvAwaitCapMs = "GALLEY_AWAIT_CAP_MS"
	// EnvQueuePrefix is the doorbell queues' name prefix, ResourcePrefix
	// of the house: each queue is named QueueName(prefix, hash) (package
	// sqsbell).
	EnvQueuePrefix = "GALLEY_QUEUE_PREFIX"
	// EnvQueueIdleHours: the reconciler's hourly sweep deletes doorbell
	// queues unused this long (default 24; 2 to 8784).
	EnvQueueIdleHours = "GALLEY_QUEUE_IDLE_HOURS"
	// EnvWakeRoleArn is the role the worker API assumes, with a session
	// policy naming one worker's doorbell queue, to let that worker's
	// harness wait on its queue itself (sqsbell.Granter).
	EnvWakeRoleArn = "GALLEY_WAKE_ROLE_ARN"
	// EnvRepository is the house's git repository URL, with no credential
	// in it: on the functions, the worker task, and each worker.
	EnvRepository = "GALLEY_REPOSITORY"
	// EnvWorkerEndpoint is the base URL of the API a worker's harness
	// calls (the worker API's routes are below it): the functions hand it
	// to each worker, and the harness reads it.
	EnvWorkerEndpoint = "GALLEY_WORKER_ENDPOINT"
	// EnvWorkspace is where a worker's workspace is: per worker, its
	// worktree's folder; on the functions and the worker task definition,
	// the fallback (DefaultWorkspace).
	EnvWorkspace = "GALLEY_WORKSPACE"

	// ECS, for RunTask (effects runs and stops tasks, reads describes
	// them): the cluster's and the worker task definition's ARNs (the
	// default's: EnvTaskDefinitionFor names each agent family's), the
	// workers' subnets (comma-separated) and security group, the container
	// the overrides name (default WorkerContainer), and whether a task gets
	// a public IP (ENABLED or DISABLED; the stack sets DISABLED: the
	// workers' subnets have no route out, and the egress proxy, the VPC
	// endpoints and EFS are all they reach).
	EnvCluster         = "GALLEY_CLUSTER"
	EnvTaskDefinition  = "GALLEY_TASK_DEFINITION"
	EnvSubnets         = "GALLEY_SUBNETS"
	EnvSecurityGroup   = "GALLEY_SECURITY_GROUP"
	EnvWorkerContainer = "GALLEY_WORKER_CONTAINER"
	EnvAssignPublicIP  = "GALLEY_ASSIGN_PUBLIC_IP"
)

// EnvTaskDefinitionFor names the variable of one agent family's worker
// task definition (GALLEY_TASK_DEFINITION_CLAUDE, _CODEX): each family has
// an image of its own (worker/Dockerfile's targets), and a launch runs
// its agent's. An agent without one (the scripted agent, which every
// image's harness carries) runs EnvTaskDefinition's.
func EnvTaskDefinitionFor(family string) string {
	return EnvTaskDefinition + "_" + strings.ToUpper(family)
}

// The functions' settings the stack leaves at their defaults.
const (
	// EnvTokenCacheSeconds bounds how long a function caches kitchn's
	// bearer token, so that a rotation takes effect within it (default
	// 300).
	EnvTokenCacheSeconds = "GALLEY_TOKEN_CACHE_SECONDS"
	// EnvLogLevel is debug, info (default), warn or error.
	EnvLogLevel = "GALLEY_LOG_LEVEL"
	// For one machine (the aws-local stack), where no Secrets Manager
	// runs: kitchn's token, the worker secret and the operator token from
	// files of mode 600. A function reads each only when the matching ARN
	// is unset.
	EnvTokenFile         = "GALLEY_TOKEN_FILE"
	EnvWorkerSecretFile  = "GALLEY_WORKER_SECRET_FILE"
	EnvOperatorTokenFile = "GALLEY_OPERATOR_TOKEN_FILE"
)

// Secrets of the worker task's container: ECS reads them from Secrets
// Manager with the task's execution role when the task starts and sets them
// in the container's environment (the container definition's "secrets"
// hold only the secrets' ARNs); the task role, which the agent might reach,
// can read no secret. The harness keeps them in memory and the agent holds
// none: its model calls go through the harness's model proxy with a token
// of their own, its pushes through the harness's push gate.
const (
	EnvAnthropicAPIKey = "GALLEY_ANTHROPIC_API_KEY" // the anthropic secret
	EnvOpenAIAPIKey    = "GALLEY_OPENAI_API_KEY"    // the openai secret
	EnvGitCredential   = "GALLEY_GIT_CREDENTIAL"    // the git-credential secret
	// EnvEgressSecret is a secret of both the worker and the egress
	// proxy's container (ECS reads it with each one's execution role): a
	// harness proves itself to the proxy with it, and the agent never
	// holds it.
	EnvEgressSecret = "GALLEY_EGRESS_SECRET"
)

// The worker task's plain environment (configuration only), beside
// EnvHouse, EnvRepository, EnvWorkerEndpoint, EnvWorkspace, EnvGitCache
// and EnvGitUsername.
const (
	// EnvAnthropicBaseURL and EnvOpenAIBaseURL are each provider's base
	// URL (an LLM gateway or proxy the operator runs), set only when given
	// (the stack's context anthropicBaseUrl and openaiBaseUrl, galley
	// serve's --anthropic-base-url and --openai-base-url): the harness
	// checks each and gives it only to its own family's CLI.
	EnvAnthropicBaseURL = "GALLEY_ANTHROPIC_BASE_URL"
	EnvOpenAIBaseURL    = "GALLEY_OPENAI_BASE_URL"
	// EnvEgressUpstream is the stack's egress proxy,
	// http://<its Cloud Map name>:EgressPort: the harness sends all its own
	// traffic through it, authenticated by EnvEgressSecret, and chains the
	// agent's proxy to it (the worker has no other way out).
	EnvEgressUpstream = "GALLEY_EGRESS_UPSTREAM"
	// EnvEgressAllow is the house's allowlist for agents: host names and
	// *.domain globs, comma-separated (context egressAllowlist; empty: no
	// host). On the worker the harness's agent-facing proxy enforces it;
	// the egress proxy enforces it again.
	EnvEgressAllow = "GALLEY_EGRESS_ALLOW"
	// EnvAgentNetwork chooses how the agent's network is confined: auto
	// (unset), namespace, landlock, AgentNetworkTask or open. The stack
	// sets AgentNetworkTask; the local runtime passes what galley serve
	// chose.
	EnvAgentNetwork = "GALLEY_AGENT_NETWORK"
	// EnvModelCapTokens and EnvModelCapUSD cap one worker's model use: a
	// whole number of tokens (input, output, cache reads and writes, as
	// the provider counts them), and US dollars (a decimal, at most six
	// places, at galley's price table). Set only when given (context
	// modelCapTokens, modelCapUsd); the harness's model proxy refuses
	// calls past either.
	EnvModelCapTokens = "GALLEY_MODEL_CAP_TOKENS"
	EnvModelCapUSD    = "GALLEY_MODEL_CAP_USD"
	// EnvSnapshotBucket is the S3 bucket the harness keeps each worktree's
	// snapshot in (docs/snapshots.md), under the key
	// snapshot.WorktreeKey(EnvHouse, worktree), whose first segment is
	// the house: the task role may get, put and delete only below it; the
	// effects function deletes a released worktree's.
	EnvSnapshotBucket = "GALLEY_SNAPSHOT_BUCKET"
	// EnvSnapshotDir is the folder the harness keeps the snapshots in
	// instead (galley serve sets none: a local worktree stays on disk).
	EnvSnapshotDir = "GALLEY_SNAPSHOT_DIR"
	// EnvSnapshotMaxBytes and EnvSnapshotMaxEntries bound one snapshot:
	// the bytes of its files and links, and its entries (default
	// snapshot.DefaultLimits). A save past either fails (the earlier
	// snapshot stays), a restore stops before the entry past it.
	EnvSnapshotMaxBytes   = "GALLEY_SNAPSHOT_MAX_BYTES"
	EnvSnapshotMaxEntries = "GALLEY_SNAPSHOT_MAX_ENTRIES"
	// EnvParkAfter is how long an agent waits on its coordinator before
	// its harness parks it (docs/parking.md): a Go duration of at least
	// 1s; unset or 0: never (galley serve --park-after).
	EnvParkAfter = "GALLEY_PARK_AFTER"
	// EnvParkDir is the folder a parking's session archive is kept in
	// (galley serve: parked/ of its data folder); without it the snapshot
	// store (EnvSnapshotBucket) keeps it.
	EnvParkDir = "GALLEY_PARK_DIR"
	// EnvParkMaxBytes and EnvParkMaxEntries bound a parking's session
	// archive (default 256 MiB and 10,000): a save past either fails and
	// the worker is not parked.
	EnvParkMaxBytes   = "GALLEY_PARK_MAX_BYTES"
	EnvParkMaxEntries = "GALLEY_PARK_MAX_ENTRIES"
)

// One worker's facts, which its runtime gives its harness (on ECS the
// RunTask overrides, locally package localproc) on top of the task's
// environment, beside EnvWorkerEndpoint, EnvRepository and EnvWorkspace.
// Nothing here is a secret but EnvWorkerToken, which no runtime sets.
const (
	EnvWorkerHandle = "GALLEY_WORKER_HANDLE" // the worker's handle
	EnvBranch       = "GALLEY_BRANCH"        // the worker's branch
	EnvAgent        = "GALLEY_AGENT"         // the agent the launch chose (ECS)
	// EnvParking is the parking a resumed worker's task resumes (ECS
	// overrides; docs/parking.md): the harness reads its resume from the
	// worker API, and the runtime reads this back from a task to know
	// which parking it resumes (unset: the launch's task).
	EnvParking = "GALLEY_PARKING"
	// EnvWorkerBootstrap carries a one-time code the harness exchanges for
	// its credential (ECS workers, whose overrides must hold no secret).
	EnvWorkerBootstrap = "GALLEY_WORKER_BOOTSTRAP"
	// EnvWorkerTokenFile names the file of mode 600 holding the worker's
	// credential (the local runtime); the harness prefers it to
	// EnvWorkerToken, the credential itself.
	EnvWorkerTokenFile = "GALLEY_WORKER_TOKEN_FILE"
	EnvWorkerToken     = "GALLEY_WORKER_TOKEN"
	// EnvAgentConfine chooses how the agent is confined (auto, uid,
	// landlock or none); unset is auto. The local runtime sets the mode
	// galley serve chose and reported at start.
	EnvAgentConfine = "GALLEY_AGENT_CONFINE"
	// EnvLogLimit is the worker's log budget in bytes: everything the
	// harness writes to its stderr (its own lines and its agent's output).
	// Locally that is the worker's harness.log; on AWS what reaches
	// CloudWatch Logs.
	EnvLogLimit = "GALLEY_LOG_LIMIT"
)

// The harness's settings, each with a default (package harness;
// docs/security.md, "Budgets", gives each bound and what happens at it).
const (
	// EnvAgentBinDir is where the agent CLIs are looked for first; then
	// PATH.
	EnvAgentBinDir = "GALLEY_AGENT_BIN_DIR"
	// EnvHeartbeatInterval overrides the heartbeat interval (a Go
	// duration).
	EnvHeartbeatInterval = "GALLEY_HEARTBEAT_INTERVAL"
	// EnvGitCache names the folder of the shared git object cache the
	// workspace is cloned through: an absolute path, or "off" for none.
	// Unset, it is a folder beside the workspace (in the data directory's
	// workspaces/ locally), so every worker of a machine shares one cache;
	// the stack sets GitCacheMount, on EFS, shared by every worker task.
	EnvGitCache = "GALLEY_GIT_CACHE"
	// EnvMCPProgressInterval overrides the interval of the MCP progress
	// notifications a blocking tool call sends (a Go duration; tests
	// shorten it).
	EnvMCPProgressInterval = "GALLEY_MCP_PROGRESS_INTERVAL"
	// The harness's MCP server: live sessions; how long a session without
	// a request in flight lives (a Go duration); the bytes of one request's
	// body, and how long it may take to arrive (a Go duration); requests
	// (and tool calls) in flight at once.
	EnvMCPSessions    = "GALLEY_MCP_SESSIONS"
	EnvMCPSessionIdle = "GALLEY_MCP_SESSION_IDLE"
	EnvMCPMaxBody     = "GALLEY_MCP_MAX_BODY"
	EnvMCPBodyTimeout = "GALLEY_MCP_BODY_TIMEOUT"
	EnvMCPRequests    = "GALLEY_MCP_REQUESTS"
	// The push gate: the bytes of one push's pack, and of all of a
	// worker's pushes (each pack stays in the house repository until git
	// collects it); how long a push's (or fetch's) body may take to arrive
	// (a Go duration); pushes served at once.
	EnvPushLimit      = "GALLEY_PUSH_LIMIT"
	EnvPushBudget     = "GALLEY_PUSH_BUDGET"
	EnvPushTimeout    = "GALLEY_PUSH_TIMEOUT"
	EnvPushesInFlight = "GALLEY_PUSHES_IN_FLIGHT"
	// The agent's memory in bytes (its cgroup's, where the harness makes
	// one), and how many processes (threads, as the kernel counts them) it
	// may run at once (its RLIMIT_NPROC).
	EnvAgentMaxMemory = "GALLEY_AGENT_MAX_MEMORY"
	EnvAgentMaxProcs  = "GALLEY_AGENT_MAX_PROCS"
	// EnvEgressResolver is a DNS server (host:port) an egress proxy (the
	// harness's agent-facing one, the stack's service) resolves names
	// with; unset, the system's resolver.
	EnvEgressResolver = "GALLEY_EGRESS_RESOLVER"
)

// What the harness gives its agent, with EnvWorkspace: the agent gets no
// other galley variable, in particular never the worker's credential.
const (
	// EnvMCPURL and EnvMCPSecret are the harness's MCP server and the
	// bearer token it takes (codex reads the token from this variable by
	// name).
	EnvMCPURL    = "GALLEY_MCP_URL"
	EnvMCPSecret = "GALLEY_MCP_SECRET"
	// EnvBrief carries the brief to the scripted agent (at most 64 KiB,
	// within the kernel's limit for one environment string).
	EnvBrief = "GALLEY_BRIEF"
	// EnvScriptResume tells a resumed scripted agent the line of the
	// directive it was parked in: it starts there (docs/parking.md).
	EnvScriptResume = "GALLEY_SCRIPT_RESUME"
)

// What a CLI's driver gives the session supervisor it starts
// (AgentSessionCommand, package agents) beside what the agent gets: the
// family, the CLI's path, the model and effort chosen, and the
// instructions.
const (
	EnvAgentFamily       = "GALLEY_AGENT_FAMILY"
	EnvAgentCLI          = "GALLEY_AGENT_CLI"
	EnvAgentModel        = "GALLEY_AGENT_MODEL"
	EnvAgentEffort       = "GALLEY_AGENT_EFFORT"
	EnvAgentInstructions = "GALLEY_AGENT_INSTRUCTIONS"
	// EnvAgentResume names the CLI session a resumed supervisor goes on
	// with (a parked worker's: docs/parking.md).
	EnvAgentResume = "GALLEY_AGENT_RESUME"
)

// The egress proxy service's environment (EgressProxyCommand), beside
// EnvEgressAllow, EnvEgressSecret and EnvEgressResolver.
const (
	// EnvEgressListen is the address it listens on (default: every
	// address, at EgressPort).
	EnvEgressListen = "GALLEY_EGRESS_LISTEN"
	// EnvEgressHarnessAllow is the deployment's own destinations, which
	// only a harness holding EnvEgressSecret may reach: the API's host,
	// the git host, the model providers' hosts and SQS's regional host,
	// comma-separated; derived by the stack, not configured.
	EnvEgressHarnessAllow = "GALLEY_EGRESS_HARNESS_ALLOW"
	// EnvEgressPorts is the destination ports, comma-separated (default:
	// the egress package's DefaultPorts).
	EnvEgressPorts = "GALLEY_EGRESS_PORTS"
)
