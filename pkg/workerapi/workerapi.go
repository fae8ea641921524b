// Package workerapi defines the worker-facing API: the calls a worker's
// harness makes to galley, authenticated by the worker's own credential
// (never kitchn's token). Routes live under /worker/v1/ beside the /v1/
// routes kitchn calls, and every call is a POST with a JSON body and
// "Authorization: Bearer <worker token>".
package workerapi

import (
	"encoding/json"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// Routes, relative to the galley endpoint, below contract.WorkerAPIPrefix.
const (
	PathSelf  = contract.WorkerAPIPrefix + "self"     // SelfRequest -> Self
	PathReady = contract.WorkerAPIPrefix + "ready"    // ReadyRequest -> Ack
	PathPost  = contract.WorkerAPIPrefix + "messages" // PostRequest -> PostAnswer
	PathInbox = contract.WorkerAPIPrefix + "inbox"    // InboxRequest -> InboxAnswer
	// PathWake tells the harness how to wait for its wake-ups without
	// holding a call to galley open (WakeGrant); PathWait is the wait for
	// a deployment whose grant says so (the local server, where holding a
	// call costs nothing).
	PathWake   = contract.WorkerAPIPrefix + "wake"   // WakeRequest -> WakeGrant
	PathWait   = contract.WorkerAPIPrefix + "wait"   // WaitRequest -> Ack (long poll)
	PathUsage  = contract.WorkerAPIPrefix + "usage"  // UsageRequest -> Ack
	PathExited = contract.WorkerAPIPrefix + "exited" // ExitedRequest -> Ack
	// PathPark reports that the harness parked its waiting agent and is
	// ending its compute (docs/parking.md).
	PathPark = contract.WorkerAPIPrefix + "park" // ParkRequest -> Ack
	// PathEvents takes what the harness saw for the worker's event log
	// (docs/operations.md): best effort, never retried once sent.
	PathEvents = contract.WorkerAPIPrefix + "events" // EventsRequest -> Ack
	// PathCredential exchanges a one-time bootstrap code for the worker's
	// credential; it is the one call without a bearer token (the code is
	// the proof). ECS workers receive only the code (docs/runtime-ecs.md).
	PathCredential = contract.PathWorkerCredential // CredentialRequest -> CredentialAnswer
)

// CredentialRequest presents a bootstrap code. Claim is random, drawn once
// per harness and repeated on retries: the first claim of a code is the
// only one ever answered.
type CredentialRequest struct {
	Handle string `json:"handle"`
	Code   string `json:"code"`
	Claim  string `json:"claim"`
}

// CredentialAnswer carries the worker's credential.
type CredentialAnswer struct {
	Token string `json:"token"`
}

// TokenHandle returns the handle part of a worker token "<handle>.<secret>".
// The secret part is random; galley keeps only its hash.
func TokenHandle(token string) (string, bool) {
	for i := len(token) - 1; i >= 0; i-- {
		if token[i] == '.' {
			return token[:i], i > 0
		}
	}
	return "", false
}

// SelfRequest asks for the worker's own launch facts.
type SelfRequest struct{}

// Self is what a harness needs to start its agent.
type Self struct {
	Handle  string                  `json:"handle"`
	Run     string                  `json:"run"`
	Task    string                  `json:"task"`
	Role    string                  `json:"role"`
	Brief   string                  `json:"brief"`
	Branch  string                  `json:"branch,omitempty"`
	Agent   protocol.AgentSelection `json:"agent"` // family always resolved
	State   string                  `json:"state"`
	Outcome string                  `json:"outcome,omitempty"`
	// AgentUID is the uid (and gid) the agent runs under when the harness
	// confines it by uid: the service numbers a house's workers from
	// AgentUIDBase, so no two share one (on AWS their worktrees share one
	// file system, kept apart by ownership alone). 0 for a worker launched
	// before the service allocated uids: the harness then derives one from
	// the handle, in a range below AgentUIDBase.
	AgentUID uint32 `json:"agentUid,omitempty"`
	// ReportEvents asks the harness to send what it sees to PathEvents:
	// only a deployment that keeps an event log asks, so one that keeps
	// none is spared the calls.
	ReportEvents bool `json:"reportEvents,omitempty"`
	// Worktree is the handle of the worker's worktree; WorktreeReused is
	// set when its launch named that worktree as existing (a worktree an
	// earlier worker made). A harness whose workspace does not outlive it
	// restores the worktree's snapshot then (docs/snapshots.md). Empty
	// from a service before snapshots: the harness keeps none.
	Worktree       string `json:"worktree,omitempty"`
	WorktreeReused bool   `json:"worktreeReused,omitempty"`
	// Parked is the number of the worker's latest parking (0: none): a
	// harness whose parking report went unanswered reads here whether it
	// landed.
	Parked int `json:"parked,omitempty"`
	// Resume is set for a harness started to resume a parked worker: the
	// parking it resumes, and what the parked harness kept.
	Resume *Resume `json:"resume,omitempty"`
}

// Resume is what a harness resuming a parked worker gets back: the
// parking's number and the state its harness reported with it.
type Resume struct {
	Parking int             `json:"parking"`
	State   json.RawMessage `json:"state"`
}

// ParkRequest reports a parking (docs/parking.md). Parking is its number:
// 1 for a worker's first, the resumed parking's plus one after. Read is
// the last inbox sequence the harness gave its agent (an item after it
// resumes the worker), and State the harness's own state for the harness
// that resumes it, a JSON object of at most MaxParkState bytes. Reporting
// the same parking again answers as the first report did.
type ParkRequest struct {
	Parking int             `json:"parking"`
	Read    int64           `json:"read"`
	State   json.RawMessage `json:"state"`
}

// MaxParkState bounds ParkRequest.State: what the worker's record can
// hold of it, so it is the record's bound, spelled once in the store.
const MaxParkState = store.MaxParkState

// The agent uids a service allocates: the n-th worker of a house (n from
// 1) gets AgentUIDBase + (offset + n - 1) mod (AgentUIDEnd -
// AgentUIDBase), the offset derived from the deployment's signing key so
// that two deployments on one machine do not share uids; a house has at
// most AgentUIDEnd - AgentUIDBase (2^31 - 2^29, about 1.6 billion)
// workers. The range lies
// above the 16-bit uids distributions allocate and above the range
// [2^28, 2^29) the harness derives from a handle when AgentUID is 0, so a
// worker launched before the service allocated uids never shares one with
// a later worker; and below 2^31, which some tools read as negative.
const (
	AgentUIDBase = 1 << 29
	AgentUIDEnd  = 1 << 31 // exclusive
)

// ReadyRequest reports positive evidence that the agent runs. Evidence says
// what it was (for logs), such as "script started" or "claude init event".
type ReadyRequest struct {
	Evidence string `json:"evidence"`
}

// PostRequest posts one mailbox row for the worker's coordinator. Kind is
// question, worker-done, escalation, heartbeat or status; Outcome only on
// worker-done. ClientID, chosen by the harness once per post, makes the
// row's id: the store appends a row once per id in its run, so a post
// retried after a lost answer (or after a later write failed) finds its
// row instead of repeating it, and never makes a second question.
type PostRequest struct {
	ClientID string `json:"clientId,omitempty"`
	Kind     string `json:"kind"`
	Subject  string `json:"subject,omitempty"`
	Body     string `json:"body,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
}

// PostAnswer gives the message id (a question's id is what a reply names).
type PostAnswer struct {
	ID string `json:"id"`
}

// InboxRequest waits up to WaitMs for items with Seq > After (0: answers
// at once, which is what a harness that waits on its wake grant asks).
type InboxRequest struct {
	After  int64 `json:"after"`
	WaitMs int64 `json:"waitMs"`
}

// WakeRequest asks for the worker's wake grant.
type WakeRequest struct{}

// Wake kinds.
const (
	// WakeSQS: long-poll QueueURL with the grant's credentials; any
	// message received is a ring (delete it, then read the inbox).
	WakeSQS = "sqs"
	// WakeGalley: POST PathWait, which returns when the inbox holds
	// something after the harness's cursor, or at its deadline.
	WakeGalley = "galley"
)

// WakeGrant is how one worker's harness waits for "something for you". On
// AWS it is the worker's own doorbell queue with credentials that can
// receive from that queue and no other (docs/runtime-ecs.md); the harness
// asks again before Expires.
type WakeGrant struct {
	Kind string   `json:"kind"`
	SQS  *SQSWake `json:"sqs,omitempty"`
	// Expires is when the grant stops working (zero: never); the harness
	// renews it before then.
	Expires time.Time `json:"expires,omitzero"`
}

// SQSWake is a grant's queue and the session credentials that may receive
// from it. The credentials are secret: never log them.
type SQSWake struct {
	QueueURL        string `json:"queueUrl"`
	Region          string `json:"region"`
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	SessionToken    string `json:"sessionToken"`
}

// WaitRequest holds up to WaitMs until the inbox has items with Seq >
// After, or the worker is settled.
type WaitRequest struct {
	After  int64 `json:"after"`
	WaitMs int64 `json:"waitMs"`
}

// InboxAnswer lists items in order; Settled tells the harness its worker
// was settled (for example cancelled) and it should stop.
type InboxAnswer struct {
	Items   []InboxItem `json:"items"`
	Settled bool        `json:"settled"`
	Outcome string      `json:"outcome,omitempty"`
}

// InboxItem is a message-worker body or a reply-to-worker answer.
type InboxItem struct {
	Seq      int64  `json:"seq"`
	Kind     string `json:"kind"` // "message" or "reply"
	Question string `json:"question,omitempty"`
	Body     string `json:"body"`
}

// UsageRequest reports the agent's usage; nil fields are unknown.
type UsageRequest struct {
	Report protocol.UsageReport `json:"report"`
}

// ExitedRequest says the agent process ended with Code without a
// worker-done report; galley settles the worker failed with Reason.
type ExitedRequest struct {
	Code   int    `json:"code"`
	Reason string `json:"reason"`
}

// EventsRequest carries up to MaxEventsPerRequest harness events. The
// harness redacts every secret it knows and cuts long text before it
// sends them; galley cuts them again.
type EventsRequest struct {
	Events []HarnessEvent `json:"events"`
}

// MaxEventsPerRequest bounds one EventsRequest.
const MaxEventsPerRequest = 32

// HarnessEvent is one thing the harness saw. Event names it: workspace
// (prepared; field took), confinement (field mode), agent-started, tool
// (fields tool, args, resultBytes), push (fields ref, commit), egress
// (the agent's egress proxy's decisions: egress.Decision's fields and a
// count), warning (among them the model budget reached: field budget),
// error. The model proxy's usage goes to galley as usage reports, not
// events.
type HarnessEvent struct {
	Event  string            `json:"event"`
	At     time.Time         `json:"at,omitzero"`
	Text   string            `json:"text,omitempty"`
	Fields map[string]string `json:"fields,omitempty"`
}

// Harness event names.
const (
	EventWorkspace    = "workspace"
	EventConfinement  = "confinement"
	EventAgentStarted = "agent-started"
	EventTool         = "tool"
	EventPush         = "push"
	EventEgress       = "egress"
	EventWarning      = "warning"
	EventError        = "error"
)

// Ack is the empty answer.
type Ack struct{}

// Inbox item kinds.
const (
	ItemMessage = "message"
	ItemReply   = "reply"
)
