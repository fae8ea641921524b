package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
)

// Version is a record's version. NoVersion means "the record must not exist"
// when passed as the expected version of a write.
type Version int64

const NoVersion Version = 0

// Effect states.
const (
	// EffectAbsent is a promise that the key was not applied by any request
	// that arrived at or before AbsentSince.
	EffectAbsent = "absent"
	// EffectInFlight is a claim held by Lease until LeaseExpires.
	EffectInFlight = "in-flight"
	// EffectApplied holds the receipt, byte for byte, forever.
	EffectApplied = "applied"
)

// Effect is the claim record of one idempotency key.
type Effect struct {
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"` // hash of the canonical request
	Operation   string `json:"operation"`
	State       string `json:"state"`

	// AbsentSince is the latest instant for which absence was promised (by
	// lookup or by a not-applied answer). A claim by a request that arrived
	// at or before it is refused.
	AbsentSince time.Time `json:"absentSince,omitzero"`

	Lease        string    `json:"lease,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitzero"`
	// Plan records the steps a lease holder decided before acting, so that a
	// later holder converges on the same side effects (same worker handle,
	// same branch base commit).
	Plan json.RawMessage `json:"plan,omitempty"`
	// NotActed is set while no holder of the claim can have begun acting:
	// a claim that starts afresh sets it, a holder clears it in a write
	// (its plan, or that write alone) before its first side effect, and a
	// takeover keeps what it found. A holder that takes over a claim with
	// NotActed set knows nothing happened, so a refusal is still
	// definite. A claim written before the field existed reads as acted.
	NotActed bool `json:"notActed,omitempty"`

	// Receipt is the encoded receipt, replayed byte for byte.
	Receipt json.RawMessage `json:"receipt,omitempty"`

	Updated time.Time `json:"updated"`
}

// Resource is one resource galley manages for the house: a worker, a
// worktree or a branch. Worker is set for kind worker.
type Resource struct {
	Kind    string    `json:"kind"`
	Handle  string    `json:"handle"`
	Owner   string    `json:"owner,omitempty"` // the creating key
	Created time.Time `json:"created"`
	// Released resources are kept (so replays and observe stay honest) but
	// left out of the inventory.
	Released bool    `json:"released,omitempty"`
	Worker   *Worker `json:"worker,omitempty"`
	// Path is where a worktree lives (runtime-specific).
	Path string `json:"path,omitempty"`
	// Cleanup is what galley still owes the platform for this record,
	// kept here until it is done so that housekeeping retries a cleanup
	// that failed and never repeats one that is done: CleanupStop, the
	// task of a worker galley settled (a cancel, a release, a failed
	// start); CleanupWorkspace, a released worktree's files (recorded by
	// earlier versions, whose ECS worktrees were on EFS). "" when nothing
	// is owed.
	Cleanup string `json:"cleanup,omitempty"`
}

// What a record's Cleanup owes.
const (
	CleanupStop      = "stop-compute"
	CleanupWorkspace = "remove-workspace"
)

// Clone answers a deep copy of r that shares no pointer, map or slice with
// it, so a caller may change the copy (a worker's fields, its Questions)
// while r stays as it was: a store that keeps decoded records hands out
// clones. records_test.go walks every field by reflection, so a field added
// here without a copy in Clone fails the test.
func (r Resource) Clone() Resource {
	if r.Worker == nil {
		return r
	}
	// One allocation holds the worker and everything it points to but its
	// map: stores clone on every read, and the allocations were the cost.
	b := new(struct {
		w Worker
		a protocol.AgentSelection
		u protocol.UsageReport
		t protocol.Tokens
		c protocol.Cost
		n [4]int64
		p Park
	})
	b.w = *r.Worker
	w := &b.w
	w.Questions = maps.Clone(w.Questions)
	w.Pending = slices.Clone(w.Pending)
	if w.Park != nil {
		b.p = *w.Park
		b.p.State = slices.Clone(b.p.State)
		w.Park = &b.p
	}
	if w.Agent != nil {
		b.a = *w.Agent
		w.Agent = &b.a
	}
	if w.Usage != nil {
		b.u = *w.Usage
		u := &b.u
		if u.Tokens != nil {
			b.t = *u.Tokens
			t := &b.t
			for i, p := range []**int64{&t.Input, &t.Output, &t.CacheRead, &t.CacheWrite} {
				if *p != nil {
					b.n[i] = **p
					*p = &b.n[i]
				}
			}
			u.Tokens = t
		}
		if u.Cost != nil {
			b.c = *u.Cost
			u.Cost = &b.c
		}
		w.Usage = u
	}
	r.Worker = w
	return r
}

// Worker is the state of one worker.
type Worker struct {
	Run      string                   `json:"run"`
	Task     string                   `json:"task"`
	Role     string                   `json:"role"`
	Branch   string                   `json:"branch,omitempty"`
	Worktree string                   `json:"worktree,omitempty"` // worktree handle
	Brief    string                   `json:"brief"`
	Agent    *protocol.AgentSelection `json:"agent,omitempty"`
	State    string                   `json:"state"` // protocol state: starting, ready, awaiting-reply, settled
	Outcome  string                   `json:"outcome,omitempty"`
	// Questions maps a question's message id to the digest of its answer
	// (AnswerDigest; records written before digests hold the answer
	// itself); "" while unanswered. The answers live in the worker's inbox,
	// so a question costs the record a few dozen bytes whatever kitchn
	// replies, and the service keeps at most MaxQuestions.
	Questions map[string]string     `json:"questions,omitempty"`
	Usage     *protocol.UsageReport `json:"usage,omitempty"`
	// Pending lists the worker's mailbox rows the coordinator has not yet
	// consumed (worker-done excepted), so that the service can bound them
	// (MaxPendingNoise, MaxPendingAttention). A row leaves once the run's
	// acknowledged sequence passes it.
	Pending []PendingRow `json:"pending,omitempty"`
	// CredentialClaim is the hex SHA-256 of the claim that exchanged the
	// worker's bootstrap code; no other claim is ever answered.
	CredentialClaim string `json:"credentialClaim,omitempty"`
	// CredentialJKT is the thumbprint of the key the worker's harness
	// holds (pkg/dpop): once set, the credential serves only calls that
	// carry a proof signed by that key.
	CredentialJKT string `json:"credentialJkt,omitempty"`
	// CredentialNonce enters the MAC of the worker's credential: replacing
	// it revokes that one credential. "" on records made before nonces,
	// whose credential is the MAC of the handle alone.
	CredentialNonce string `json:"credentialNonce,omitempty"`
	// FinalReportUntil is set when the worker settles by its own
	// worker-done: until then it may still send one usage report (the
	// agent's last turn ends after its finish). Zero once that report came,
	// and for a worker settled any other way.
	FinalReportUntil time.Time `json:"finalReportUntil,omitzero"`
	// AgentUID is the uid (and gid) the worker's agent runs under when
	// its harness confines it by uid: allocated from the house's
	// CounterAgentUID when the record is first written, so no two workers
	// of a house share one. 0 on records made before it existed, whose
	// harness falls back to a hash of the handle.
	AgentUID uint32 `json:"agentUid,omitempty"`
	// Exited is set once the runtime saw the process or task end.
	Exited bool `json:"exited,omitempty"`
	// TaskARN is the ECS task that runs the worker, once RunTask named it
	// (ecsrt's task index): any function finds the task by it, where
	// ListTasks lags behind a launch.
	TaskARN string `json:"taskArn,omitempty"`
	// Parks counts the worker's parkings (docs/parking.md): parking n is
	// resumed by the worker's n-th new compute (the launch's is the 0th).
	Parks int `json:"parks,omitempty"`
	// Park is the latest parking, kept until the worker settles; nil for
	// a worker that never parked.
	Park    *Park     `json:"park,omitempty"`
	Updated time.Time `json:"updated"`
}

// Park is one parking of a worker: its harness saved what its agent needs
// to go on and ended its compute while the agent waited on its
// coordinator. The worker is parked while Resume is zero; a reply or a
// message sets Resume, and the compute is started again.
type Park struct {
	// Gen is the parking's number (the worker's Parks when it was made).
	Gen int `json:"gen"`
	// Since is when the harness reported the parking.
	Since time.Time `json:"since"`
	// Read is the harness's inbox cursor when it froze its inbox: an item
	// after it is input the agent never saw, and resumes the worker.
	Read int64 `json:"read"`
	// State is the harness's own state (a JSON object, opaque to galley,
	// at most MaxParkState bytes), handed to the harness that resumes the
	// worker. Kept as JSON, not as a string of it, so that it costs the
	// record its own size whatever it holds (a string would be escaped).
	State json.RawMessage `json:"state,omitempty"`
	// Resume is when input arrived and the resume began; zero while
	// parked.
	Resume time.Time `json:"resume,omitzero"`
	// Started is set once the runtime accepted the resumed compute's
	// start; until then the start is owed.
	Started bool `json:"started,omitempty"`
}

// MaxParkState bounds a parking's harness state, so that the worker's
// record stays under its bound (storetest's LargestWorker holds one); the
// worker API's bound is this (workerapi.MaxParkState).
const MaxParkState = 16 << 10

// Parked reports whether w is parked: its compute ended at its harness's
// parking and no input has resumed it yet.
func (w *Worker) Parked() bool {
	return w != nil && w.Park != nil && w.Park.Resume.IsZero() && w.State != protocol.StateSettled
}

// ResumeOwed reports whether w's resumed compute is still to be started.
func (w *Worker) ResumeOwed() bool {
	return w != nil && w.Park != nil && !w.Park.Resume.IsZero() && !w.Park.Started && w.State != protocol.StateSettled
}

// PendingRow is one of a worker's mailbox rows not yet consumed. Seq is 0
// between the reservation and the append; a reservation whose append never
// came is dropped after a while (the service's lease, twice).
type PendingRow struct {
	ID    string    `json:"id"`
	Kind  string    `json:"kind"`
	Seq   int64     `json:"seq,omitempty"`
	Bytes int       `json:"bytes,omitempty"`
	At    time.Time `json:"at"`
}

// Bounds the service keeps a worker record within, whatever the worker or
// kitchn posts: with a brief of 64 KiB the record stays under 200 KB, far
// below DynamoDB's 400 KB item limit (storetest checks the largest one).
const (
	// MaxQuestions is how many questions a worker may ask in its life.
	MaxQuestions = 512
	// MaxPendingNoise bounds a worker's unconsumed status and heartbeat
	// rows, and MaxPendingNoiseBytes their bodies and subjects together.
	MaxPendingNoise      = 16
	MaxPendingNoiseBytes = 256 << 10
	// MaxPendingAttention bounds a worker's unconsumed questions and
	// escalations.
	MaxPendingAttention = 8
)

// AnswerDigest is what a worker record keeps of a reply's body.
func AnswerDigest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return "sha256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// AnswerMatches reports whether recorded (a Questions value) is the answer
// body: its digest, or the body itself in a record written before digests.
func AnswerMatches(recorded, body string) bool {
	return recorded != "" && (recorded == AnswerDigest(body) || recorded == body)
}

// Mailbox is the head of one run's mailbox ledger.
type Mailbox struct {
	Run string `json:"run"`
	// Reader is the coordinator that adopted the run; "" before any adoption,
	// when every coordinator reads.
	Reader string `json:"reader,omitempty"`
	// Epoch increases with every adoption.
	Epoch int64 `json:"epoch"`
	// Seen lists the coordinators that read the run before its first
	// adoption; adoption supersedes them.
	Seen []string `json:"seen,omitempty"`
	// Superseded lists coordinators that an adoption replaced; they are
	// fenced for good and can never adopt back.
	Superseded []string `json:"superseded,omitempty"`
	// Acked is the sequence of the last consumed message.
	Acked int64 `json:"acked"`
	// Batch is the sealed, unacknowledged batch, if any.
	Batch *Batch `json:"batch,omitempty"`
	// Batches counts sealed batches, so that an id is never reused.
	Batches int64 `json:"batches"`
}

// Batch is a sealed range of message sequences (From..To inclusive).
type Batch struct {
	ID   string `json:"id"`
	From int64  `json:"from"`
	To   int64  `json:"to"`
}

// Message is one mailbox row with its per-run sequence.
type Message struct {
	Seq int64                `json:"seq"`
	Row protocol.MailMessage `json:"row"`
	At  time.Time            `json:"at"`
}

// InboxItem is something kitchn sent a worker: a message or a reply.
type InboxItem struct {
	Seq int64 `json:"seq"`
	// Key is the effect key that sent the item; a retried effect may append
	// twice, and readers skip an item whose key they already saw.
	Key      string    `json:"key"`
	Kind     string    `json:"kind"` // "message" or "reply"
	Question string    `json:"question,omitempty"`
	Body     string    `json:"body"`
	At       time.Time `json:"at"`
}

// Session is an operator console session as a store keeps it. The
// session's id (the cookie's value) is never stored, only its hash: who
// reads the store cannot log in with what it finds.
type Session struct {
	IDHash string `json:"idHash"` // hex SHA-256 of the session id: the key
	// TokenFingerprint names the operator token the session was issued
	// under (a MAC made with it, never the token): after a rotation the
	// session no longer opens anything.
	TokenFingerprint string    `json:"tokenFingerprint"`
	Created          time.Time `json:"created"`
	Expires          time.Time `json:"expires"` // the session's end, whatever the browser keeps
}

// Event is one entry of a worker's event log: what happened to the worker,
// for its operator (docs/operations.md). Seq numbers a worker's events 1,
// 2, ... in the order the store committed them. Events never hold a
// secret: their writers redact and cut what they record.
type Event struct {
	Seq  int64     `json:"seq"`
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// Text is one line, cut at MaxEventText bytes.
	Text string `json:"text,omitempty"`
	// Fields are short facts (an id, a state, a ref), each value cut at
	// MaxEventText bytes.
	Fields map[string]string `json:"fields,omitempty"`
}

// Bounds of a worker's event log. A store keeps at most MaxEvents events
// per worker, dropping the oldest, and refuses an event whose JSON exceeds
// MaxEventBytes, so a worker's log holds at most MaxEvents × MaxEventBytes
// (2 MiB) whatever it does.
const (
	MaxEvents     = 1000
	MaxEventBytes = 2 << 10
	MaxEventText  = 240
)

// EventLog keeps each worker's event log (storetest.RunEvents checks it).
//
// AppendEvent gives e the worker's next sequence and stores it, dropping
// the worker's oldest events beyond MaxEvents; an event whose JSON exceeds
// MaxEventBytes is Invalid. Sequences are never reused and never skip: the
// events a store retains are always one unbroken run ending at the latest.
// ListEvents returns up to limit (all when limit <= 0) retained events
// with Seq > after, in order; a reader whose first event is not after+1
// knows the events between were dropped. LastEvent answers the worker's
// latest retained event, ok false when it has none.
type EventLog interface {
	AppendEvent(ctx context.Context, worker string, e Event) (int64, error)
	ListEvents(ctx context.Context, worker string, after int64, limit int) ([]Event, error)
	LastEvent(ctx context.Context, worker string) (e Event, ok bool, err error)
}
