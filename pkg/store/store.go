package store

import (
	"context"
	"time"
)

// The contract below is what storetest checks. Errors carry galleyerr
// kinds: NotFound when a Get finds nothing, Conflict when a conditional write
// loses its condition (the record changed or exists), Unavailable for a
// transient failure after which the write may or may not have happened.

// Effects keeps effect claims by key.
type Effects interface {
	GetEffect(ctx context.Context, key string) (Effect, Version, error)
	// PutEffect writes e if the stored version equals prev (NoVersion: no
	// record exists) and returns the new version.
	PutEffect(ctx context.Context, e Effect, prev Version) (Version, error)
}

// Resources keeps workers, worktrees and branches by kind and handle.
type Resources interface {
	GetResource(ctx context.Context, kind, handle string) (Resource, Version, error)
	PutResource(ctx context.Context, r Resource, prev Version) (Version, error)
	// ListResources lists every resource, released or not, in creation order.
	ListResources(ctx context.Context) ([]Resource, error)
}

// Mailboxes keeps each run's mailbox head and its append-only messages.
type Mailboxes interface {
	// GetMailbox returns the head, or a zero head (Run set) with NoVersion.
	GetMailbox(ctx context.Context, run string) (Mailbox, Version, error)
	PutMailbox(ctx context.Context, m Mailbox, prev Version) (Version, error)
	// AppendMessage gives m the run's next sequence (1, 2, ...) and stores it
	// atomically: messages become visible in sequence order, without gaps.
	//
	// It is idempotent by m.Row.ID within the run: when a message with that
	// id was appended to run before, it appends nothing and answers that
	// message's sequence with existed true. The check is part of the append
	// (one transaction), so concurrent appends of one id append it once, and
	// a caller may retry an append whose answer was lost (Unavailable)
	// without ever storing the row twice. Different runs may share an id. An
	// empty id is never deduplicated. A store that lets messages expire
	// forgets their ids with them.
	AppendMessage(ctx context.Context, run string, m Message) (seq int64, existed bool, err error)
	// ListMessages returns up to limit messages with Seq > after, in order.
	ListMessages(ctx context.Context, run string, after int64, limit int) ([]Message, error)
}

// Inboxes keeps what kitchn sent each worker.
type Inboxes interface {
	// AppendInbox gives item the worker's next sequence (1, 2, ...).
	AppendInbox(ctx context.Context, worker string, item InboxItem) (int64, error)
	// ListInbox returns up to limit items (all when limit <= 0) with Seq >
	// after, in order.
	ListInbox(ctx context.Context, worker string, after int64, limit int) ([]InboxItem, error)
}

// Counters keeps the house's named counters.
type Counters interface {
	// NextCount adds one to the named counter (an absent one is 0) in one
	// atomic write and answers the new value. No two calls, concurrent or
	// not, from any process, answer the same value of one counter, and
	// values only grow. They may skip (a write whose answer was lost may
	// have applied before its resend), so a counter hands out unique
	// numbers, not a gap-free sequence. After Unavailable the count may or
	// may not have moved; calling again is always safe.
	NextCount(ctx context.Context, name string) (int64, error)
}

// Nonces remembers single-use values (the ids of workers' DPoP proofs)
// until they expire.
type Nonces interface {
	// UseNonce records key until expires and answers true, or answers
	// false when key is recorded and has not expired: of any number of
	// calls with one key, concurrent or not, from any process, one answers
	// true while the key lives. An expired key may be used again (and may
	// be forgotten at any time). After Unavailable the key may or may not
	// be recorded: a caller uses a fresh key rather than resend.
	UseNonce(ctx context.Context, key string, expires time.Time) (bool, error)
}

// Sessions keeps the operator console's sessions (package operator) by
// the hash of their id, never the id, until they expire. Every process
// that serves the operator reads the same sessions, so a logout in one
// ends the session in all.
type Sessions interface {
	// PutSession stores s under s.IDHash, unless a session lives there
	// (Conflict). A session must expire (Invalid without Expires).
	PutSession(ctx context.Context, s Session) error
	// GetSession answers the session stored under idHash, or NotFound when
	// there is none or it has expired (by the store's clock; the caller
	// checks Expires against its own as well).
	GetSession(ctx context.Context, idHash string) (Session, error)
	// DeleteSession forgets the session stored under idHash; one that is
	// not there is not an error, so a repeated logout succeeds.
	DeleteSession(ctx context.Context, idHash string) error
}

// Tallies counts events in windows that expire (the operator's login
// attempts, per client address and in all, per minute): a rate that all
// of a house's processes see.
type Tallies interface {
	// AddTally adds one to the tally named key in one atomic write and
	// answers its new count. An absent tally starts at 0 and lives until
	// expires, the expiry its first add gave it (later adds keep it); once
	// that has passed, the tally is absent again (and may be forgotten at
	// any time). Of concurrent adds to one live tally, from any process,
	// no two answer one count. After Unavailable the add may or may not
	// have counted; an add resent after a lost answer may count twice, which
	// errs on the side of a limit.
	AddTally(ctx context.Context, key string, expires time.Time) (int64, error)
}

// CounterAgentUID is the counter that numbers the house's agent uids
// (Worker.AgentUID).
const CounterAgentUID = "agent-uid"

// Store is all of it, as one implementation provides it.
type Store interface {
	Effects
	Resources
	Mailboxes
	Inboxes
	Counters
	Nonces
	Sessions
	Tallies
	Close() error
}
