package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/galley-run/galley/pkg/store"
)

// DynamoAPI is the part of the DynamoDB client the store uses. The SDK's
// *dynamodb.Client implements it, and so does awsfault's decorator.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	// DeleteItem drops the events beyond a worker's bound (events.go).
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)

	// For EnsureTable only.
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Store is a store.Store on one DynamoDB table.
type Store struct {
	db        DynamoAPI
	table     string
	now       func() time.Time
	retention time.Duration
	// ambiguousRetries is how many times a write whose answer was lost is
	// sent again, unchanged, before the store resolves it or gives up.
	ambiguousRetries int
	backoff          time.Duration
	counters         counterLocks
	eventRetention   time.Duration
	eventLast        eventCursors
}

var _ store.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock used for expiry (tests).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithRetention makes mailbox messages and inbox items expire d after they
// were appended: they carry a TTL attribute, DynamoDB deletes them lazily,
// and the store hides them from the moment they expire. Zero (the default)
// keeps them forever. Pick d far beyond any wait: a message that expires
// unread is lost.
func WithRetention(d time.Duration) Option { return func(s *Store) { s.retention = d } }

// WithRetries sets how often a write with a lost answer is resent before it
// is resolved from the item (default 3), and the base backoff between tries.
func WithRetries(n int, backoff time.Duration) Option {
	return func(s *Store) { s.ambiguousRetries, s.backoff = n, backoff }
}

// New returns a store on table through client. The table must exist
// (EnsureTable creates it).
func New(client DynamoAPI, table string, opts ...Option) *Store {
	s := &Store{db: client, table: table, now: time.Now, ambiguousRetries: 3, backoff: 20 * time.Millisecond}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Table names the store's table.
func (s *Store) Table() string { return s.table }

// Close does nothing: the client is the caller's.
func (s *Store) Close() error { return nil }
