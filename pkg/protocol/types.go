package protocol

import "encoding/json"

// Resource kinds.
const (
	KindWorker   = "worker"
	KindWorktree = "worktree"
	KindTerminal = "terminal"
	KindBranch   = "branch"
	KindSchedule = "schedule"
)

// Effect types of the worker executor.
const (
	OpLaunch  = "launch-worker"
	OpMessage = "message-worker"
	OpReply   = "reply-to-worker"
	OpCancel  = "cancel-worker"
	OpRelease = "release-resource"
)

// ExecutorWorker is the only executor galley serves.
const ExecutorWorker = "worker"

// Worker states answered by observe.
const (
	StateStarting      = "starting"
	StateReady         = "ready"
	StateAwaitingReply = "awaiting-reply"
	StateUserTakeover  = "user-takeover"
	StateSettled       = "settled"
	StateMissing       = "missing"
	StateUnknown       = "unknown"
)

// Outcomes of a settled worker and of worker-done messages.
const (
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
)

// Effect statuses.
const (
	StatusApplied    = "applied"
	StatusNotApplied = "not-applied"
	StatusAbsent     = "absent"
	StatusUnknown    = "unknown"
)

// Not-applied reasons: exactly these five; any other makes the client
// uncertain.
const (
	ReasonRejected       = "rejected"
	ReasonRateLimited    = "rate-limited"
	ReasonUnsupported    = "unsupported"
	ReasonCrossHouse     = "cross-house"
	ReasonForeignBackend = "foreign-backend"
)

// Mailbox message kinds.
const (
	MsgQuestion   = "question"
	MsgWorkerDone = "worker-done"
	MsgEscalation = "escalation"
	MsgHeartbeat  = "heartbeat"
	MsgStatus     = "status"
)

// Mailbox statuses.
const (
	MailEmpty    = "empty"
	MailFenced   = "fenced"
	MailDelivery = "delivery"
)

// Inventory liveness.
const (
	LivenessLive         = "live"
	LivenessExited       = "exited"
	LivenessUnverifiable = "unverifiable"
)

// Resource names one resource in a backend namespace. Its JSON is exactly
// {"kind","backend","handle"}.
type Resource struct {
	Kind    string `json:"kind"`
	Backend string `json:"backend"`
	Handle  string `json:"handle"`
}

// EffectCall is the body of POST /v1/effects and POST /v1/effects/lookup.
type EffectCall struct {
	Run     string        `json:"run"`
	Request EffectRequest `json:"request"`
}

// EffectRequest is the request kitchn persisted before sending it.
type EffectRequest struct {
	House      string       `json:"house"`
	Backend    string       `json:"backend"`
	Credential string       `json:"credential"`
	Task       string       `json:"task"`
	Attempt    int64        `json:"attempt"`
	Key        string       `json:"key"`
	Effect     EffectTarget `json:"effect"`
}

// EffectTarget is {"executor": ..., "effect": {...}}. Body stays raw so that
// an executor galley does not serve can be answered unsupported without
// parsing its effect.
type EffectTarget struct {
	Executor string          `json:"executor"`
	Effect   json.RawMessage `json:"effect"`
}

// WorkerEffect is the effect of the worker executor: one struct for the five
// types, with the fields each type allows.
type WorkerEffect struct {
	Type string `json:"type"`

	// launch-worker
	Role      string          `json:"role,omitempty"`
	Workspace *Workspace      `json:"workspace,omitempty"`
	Brief     *string         `json:"brief,omitempty"`
	Branch    *string         `json:"branch,omitempty"`
	Pinned    *Pinned         `json:"pinned,omitempty"`
	Agent     *AgentSelection `json:"agent,omitempty"`

	// message-worker, reply-to-worker, cancel-worker
	Worker   *Resource `json:"worker,omitempty"`
	Question *string   `json:"question,omitempty"`
	Body     *string   `json:"body,omitempty"`

	// release-resource
	Resource *Resource `json:"resource,omitempty"`
}

// Workspace is {"type":"isolated"} or {"type":"existing","resource":...}.
type Workspace struct {
	Type     string    `json:"type"`
	Resource *Resource `json:"resource,omitempty"`
}

// Pinned pins a launch to a commit; note the snake case the client sends.
type Pinned struct {
	Head       string `json:"head"`
	ReportPath string `json:"report_path"`
}

// AgentSelection names the agent family and optionally model and effort.
type AgentSelection struct {
	Agent  string `json:"agent"`
	Model  string `json:"model,omitempty"`
	Effort string `json:"effort,omitempty"`
}

// Receipt is what an applied effect answers. All three fields are always
// present; created and touched are never null.
type Receipt struct {
	Reference string     `json:"reference"`
	Created   []Resource `json:"created"`
	Touched   []Resource `json:"touched"`
}

// EffectOutcome is the answer of POST /v1/effects.
type EffectOutcome struct {
	Status            string   `json:"status"`
	Receipt           *Receipt `json:"receipt,omitempty"`
	Reason            string   `json:"reason,omitempty"`
	RetryAfterSeconds int      `json:"retryAfterSeconds,omitempty"`
	Capability        string   `json:"capability,omitempty"`
}

// LookupAnswer is the answer of POST /v1/effects/lookup: applied with the
// receipt, absent or unknown.
type LookupAnswer struct {
	Status  string   `json:"status"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// WorkerCall is the body of observe and usage.
type WorkerCall struct {
	Worker Resource `json:"worker"`
}

// Observation answers observe.
type Observation struct {
	State   string `json:"state"`
	Outcome string `json:"outcome,omitempty"`
}

// Inventory answers GET /v1/inventory.
type Inventory struct {
	Resources []InventoryRow `json:"resources"`
}

// InventoryRow is one managed resource. Owner is the creating key or null.
type InventoryRow struct {
	Resource Resource `json:"resource"`
	Owner    *string  `json:"owner"`
	Liveness string   `json:"liveness"`
}

// UsageAnswer answers workers/usage.
type UsageAnswer struct {
	Status string       `json:"status"`
	Report *UsageReport `json:"report,omitempty"`
}

// UsageReport leaves out what is unknown.
type UsageReport struct {
	Source string  `json:"source"`
	Agent  string  `json:"agent,omitempty"`
	Model  string  `json:"model,omitempty"`
	Tokens *Tokens `json:"tokens,omitempty"`
	Cost   *Cost   `json:"cost,omitempty"`
}

// Tokens counts; a nil field is unknown.
type Tokens struct {
	Input      *int64 `json:"input,omitempty"`
	Output     *int64 `json:"output,omitempty"`
	CacheRead  *int64 `json:"cacheRead,omitempty"`
	CacheWrite *int64 `json:"cacheWrite,omitempty"`
}

// Cost is in millionths of a US dollar.
type Cost struct {
	Amount int64  `json:"amount"`
	Basis  string `json:"basis"`
}

// MailboxCall is the body of every mailbox call.
type MailboxCall struct {
	Run         string `json:"run"`
	Coordinator string `json:"coordinator"`
	Delivery    string `json:"delivery,omitempty"` // acknowledge
	WaitMs      *int64 `json:"waitMs,omitempty"`   // await
}

// MailboxAnswer is empty, fenced or a delivery.
type MailboxAnswer struct {
	Status   string    `json:"status"`
	Delivery *Delivery `json:"delivery,omitempty"`
}

// Delivery is one batch: replays are identical in every field.
type Delivery struct {
	ID         string        `json:"id"`
	Messages   []MailMessage `json:"messages"`
	Unreadable int           `json:"unreadable"`
}

// MailMessage is one mailbox row. Every row carries Worker.
type MailMessage struct {
	ID      string    `json:"id"`
	Kind    string    `json:"kind"`
	Worker  *Resource `json:"worker,omitempty"`
	Outcome string    `json:"outcome,omitempty"`
	Subject string    `json:"subject,omitempty"`
	Body    string    `json:"body,omitempty"`
}

// Descriptor answers GET /v1/descriptor.
type Descriptor struct {
	Backend         string            `json:"backend"`
	House           string            `json:"house"`
	Capabilities    map[string]string `json:"capabilities"`
	WorkerSelection *WorkerSelection  `json:"workerSelection,omitempty"`
}

// WorkerSelection says what a launch can honour of an agent selection.
type WorkerSelection struct {
	Families []string `json:"families"`
	Model    bool     `json:"model"`
	Effort   string   `json:"effort"` // unsupported, with-model, always
}
