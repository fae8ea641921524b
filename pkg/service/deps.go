package service

import (
	"context"
	"errors"
	"time"

	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Store is what the service keeps its records in (see package store for the
// contract and storetest for its checks).
type Store interface {
	store.Effects
	store.Resources
	store.Mailboxes
	store.Inboxes
	store.Counters
	store.Nonces
}

// ErrStartRefused marks a Start error that is a definite refusal: this
// call started nothing and no retry of it would (a configuration the
// platform rejects, a quota). galleyerr.RateLimited from Start is definite
// for the call too, but a later retry may succeed.
var ErrStartRefused = errors.New("the runtime refused to start the worker")

// EventRecorder keeps a worker's event log (package eventlog's
// Recorder). Record must not block nor fail the call that records: the
// service records after its own write committed.
type EventRecorder interface {
	Record(worker string, e store.Event)
}

// Runtime starts and stops workers: local processes, or ECS tasks.
type Runtime interface {
	// Start starts the worker described by spec. It must be idempotent per
	// spec.Handle: a retried Start converges on the same process or task. It
	// returns once the start is requested, never waiting for the agent.
	// An error is uncertain (a task may exist) unless it is RateLimited or
	// wraps ErrStartRefused.
	Start(ctx context.Context, spec WorkerSpec) error
	// Stop stops the worker's compute; stopping a stopped or unknown worker
	// succeeds.
	Stop(ctx context.Context, handle string) error
	// Liveness reports whether the worker's compute runs.
	Liveness(ctx context.Context, handle string) (Liveness, error)
	// Livenesses reports the liveness of many workers at once, for the
	// inventory: its cost must not be a platform call (or a lock, or a
	// file read) per handle. A handle it cannot tell, a malformed one
	// included, reads LivenessUnknown. On error the map holds the handles
	// it could still answer, perhaps none; the caller reads every other
	// one as unverifiable.
	Livenesses(ctx context.Context, handles []string) (map[string]Liveness, error)
	// RemoveWorkspace deletes a worktree's files; never a branch.
	RemoveWorkspace(ctx context.Context, handle, path string) error
}

// WorktreeSnapshots removes a worktree's snapshot (docs/snapshots.md: what
// a worker's harness saves at its end so that a later launch that reuses
// the worktree, on another machine, gets its files back) when the
// worktree is released: snapshot.Worktrees over the store the harnesses
// save to.
type WorktreeSnapshots interface {
	// RemoveSnapshot deletes the worktree's snapshot; a worktree without
	// one is no error.
	RemoveSnapshot(ctx context.Context, worktree string) error
}

// Liveness of a worker's compute.
type Liveness int

const (
	LivenessUnknown Liveness = iota // cannot tell (eventual consistency, no record)
	LivenessLive
	LivenessExited
)

// WorkerSpec is everything a runtime needs to start one worker. The harness
// asks galley's worker API for the rest (brief, role, agent selection).
type WorkerSpec struct {
	Handle string
	// Token is the worker's own credential for the worker API; never
	// kitchn's bearer token. A runtime must not log it.
	Token string
	// IdempotencyToken is derived from the effect key (ECS clientToken).
	IdempotencyToken string
	// Workspace is the worktree handle and Path its location.
	Workspace     string
	WorkspacePath string
	Branch        string
	// Agent is the resolved agent family (script, claude, codex).
	Agent string
	// Run, Task and Key label the compute (ECS tags), for operators.
	Run, Task, Key string
}

// GitHost creates and deletes branches in the house's repository.
type GitHost interface {
	// DefaultHead returns the commit at the head of the default branch.
	DefaultHead(ctx context.Context) (string, error)
	// BranchHead returns the commit a branch points at, or exists=false.
	BranchHead(ctx context.Context, branch string) (commit string, exists bool, err error)
	// ExistingBranches reports which of the named branches exist (true in
	// the map), for the inventory: its cost must not be a request (or a
	// process, or a lock) per name; one reference advertisement for a
	// remote host. A name that is not a branch name (protocol.IsBranchName)
	// is galleyerr.Invalid.
	ExistingBranches(ctx context.Context, branches []string) (map[string]bool, error)
	// CreateBranch creates branch at commit only if it does not exist
	// (an expected-absent ref update); galleyerr.Conflict when it exists.
	CreateBranch(ctx context.Context, branch, commit string) error
	// DeleteBranch deletes branch; deleting a missing branch succeeds.
	DeleteBranch(ctx context.Context, branch string) error
}

// Doorbell wakes waiters on a topic (a run's mailbox, a worker's inbox).
// A ring may be lost or duplicated: the store stays the truth, and a waiter
// re-reads it after every wake and at its deadline.
type Doorbell interface {
	Ring(ctx context.Context, topic string) error
	// Listen starts listening before the caller checks the store, so a ring
	// between the check and the wait is not missed.
	Listen(ctx context.Context, topic string) (Listener, error)
}

// WakeGranter lets a worker's harness wait for the rings of its inbox
// topic itself, so that an idle worker holds no call to galley open: on
// AWS, a receive on the topic's queue with credentials scoped to that
// queue alone. session names the holder (the worker's handle) in the
// credentials. Without one, a harness waits through galley
// (workerapi.WakeGalley), which is free where galley is one process.
type WakeGranter interface {
	GrantWake(ctx context.Context, topic, session string) (workerapi.WakeGrant, error)
}

// Listener waits for rings on one topic.
type Listener interface {
	// Wait returns nil on a ring, or ctx's error at its deadline.
	Wait(ctx context.Context) error
	Close() error
}

// Clock tells time; tests use a fake.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the real clock.
var SystemClock Clock = systemClock{}
