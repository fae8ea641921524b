package dynamostore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// instances returns n stores on one fresh table, as n processes (or Lambda
// containers) would have: nothing shared but DynamoDB.
func instances(t *testing.T, n int) []*dynamostore.Store {
	c := client(t)
	first := newTable(t, c)
	out := []*dynamostore.Store{first}
	for range n - 1 {
		out = append(out, dynamostore.New(c, first.Table()))
	}
	return out
}

// Appends from several processes to one run: the conditions alone (no
// in-process lock spans processes) keep the sequence gap-free and unique,
// and each process's messages keep their order.
func TestAppendsAcrossProcesses(t *testing.T) {
	ss := instances(t, 4)
	ctx := t.Context()
	const each = 25
	seqs := make([][]int64, len(ss))
	var wg sync.WaitGroup
	for p, s := range ss {
		wg.Go(func() {
			for i := range each {
				seq, _, err := s.AppendMessage(ctx, "run", msg(fmt.Sprintf("p%d-%02d", p, i)))
				if err != nil {
					t.Errorf("process %d: %v", p, err)
					return
				}
				seqs[p] = append(seqs[p], seq)
			}
		})
	}
	wg.Wait()
	ms, err := ss[0].ListMessages(ctx, "run", 0, 0)
	mustOK(t, "list", err)
	if len(ms) != len(ss)*each {
		t.Fatalf("%d messages, want %d", len(ms), len(ss)*each)
	}
	for i, m := range ms {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has sequence %d", i+1, m.Seq)
		}
	}
	for p := range ss {
		for i, seq := range seqs[p] {
			if want := fmt.Sprintf("p%d-%02d", p, i); ms[seq-1].Row.ID != want {
				t.Errorf("sequence %d holds %s, answered to %s", seq, ms[seq-1].Row.ID, want)
			}
			if i > 0 && seq <= seqs[p][i-1] {
				t.Errorf("process %d: sequence %d after %d", p, seq, seqs[p][i-1])
			}
		}
	}
}

// Concurrent creations of one resource from several processes: one wins,
// the others answer Conflict, and the creation ordinals stay unique (the
// listing holds each resource once, in creation order).
func TestCreatesAcrossProcesses(t *testing.T) {
	ss := instances(t, 4)
	ctx := t.Context()
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := make([]int, 6)
	for p, s := range ss {
		wg.Go(func() {
			for h := range wins {
				_, err := s.PutResource(ctx, store.Resource{Kind: "worker", Handle: fmt.Sprint("w-", h), Owner: fmt.Sprint(p)}, store.NoVersion)
				switch {
				case err == nil:
					mu.Lock()
					wins[h]++ // one winner per handle; checked below
					mu.Unlock()
				case !galleyerr.Is(galleyerr.Conflict, err):
					t.Errorf("process %d, w-%d: %v", p, h, err)
				}
			}
		})
	}
	wg.Wait()
	for h, n := range wins {
		if n != 1 {
			t.Errorf("w-%d created %d times", h, n)
		}
	}
	list, err := ss[0].ListResources(ctx)
	mustOK(t, "list", err)
	if len(list) != len(wins) {
		t.Errorf("%d resources listed, want %d", len(list), len(wins))
	}
}

// Processes appending the same row id at once (a retried post served by
// another Lambda instance): the id's item decides, so the row is stored
// once and every process answers its sequence.
func TestRepeatsAcrossProcesses(t *testing.T) {
	ss := instances(t, 4)
	ctx := t.Context()
	const rounds = 8
	for r := range rounds {
		id := fmt.Sprint("same-", r)
		seqs := make([]int64, len(ss))
		existed := make([]bool, len(ss))
		var wg sync.WaitGroup
		for p, s := range ss {
			wg.Go(func() {
				var err error
				if seqs[p], existed[p], err = s.AppendMessage(ctx, "run", msg(id)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		appended := 0
		for p := range ss {
			if seqs[p] != int64(r+1) {
				t.Errorf("round %d: process %d answered %d, want %d", r, p, seqs[p], r+1)
			}
			if !existed[p] {
				appended++
			}
		}
		if appended != 1 {
			t.Errorf("round %d: %d processes appended %s, want 1", r, appended, id)
		}
	}
	ms, err := ss[0].ListMessages(ctx, "run", 0, 0)
	mustOK(t, "list", err)
	if len(ms) != rounds {
		t.Errorf("%d messages stored, want %d", len(ms), rounds)
	}
}

// Appends never move the head, so a coordinator's conditional head write
// races only other head writes, whatever the workers append meanwhile.
func TestHeadWritesRaceOnlyHeadWrites(t *testing.T) {
	ss := instances(t, 2)
	ctx := t.Context()
	v, err := ss[0].PutMailbox(ctx, store.Mailbox{Run: "run", Reader: "c-1", Epoch: 1}, store.NoVersion)
	mustOK(t, "create head", err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 20 {
			if _, _, err := ss[1].AppendMessage(ctx, "run", msg(fmt.Sprint("m", i))); err != nil {
				t.Error(err)
			}
		}
	})
	for i := range 20 {
		nv, err := ss[0].PutMailbox(ctx, store.Mailbox{Run: "run", Reader: "c-1", Epoch: 1, Acked: int64(i)}, v)
		if err != nil {
			t.Fatalf("head write %d lost to an append: %v", i, err)
		}
		v = nv
	}
	wg.Wait()
}

// TTL: expired messages and inbox items disappear from reads at once,
// before DynamoDB deletes them; EnsureTable turned TTL on.
func TestRetention(t *testing.T) {
	c := client(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s := newTable(t, c, dynamostore.WithRetention(time.Hour), dynamostore.WithClock(clock))
	ctx := t.Context()

	ttl, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(s.Table())})
	mustOK(t, "describe TTL", err)
	if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "expires" {
		t.Errorf("TTL not enabled on expires: %+v", d)
	}

	_, _, err = s.AppendMessage(ctx, "run", msg("old"))
	mustOK(t, "append", err)
	_, err = s.AppendInbox(ctx, "w", store.InboxItem{Key: "k-old", Kind: "message", Body: "old"})
	mustOK(t, "append inbox", err)
	advance(45 * time.Minute)
	seq, _, err := s.AppendMessage(ctx, "run", msg("new"))
	mustOK(t, "append", err)
	if seq != 2 {
		t.Errorf("seq %d, want 2", seq)
	}
	checkMessages(t, s, "run", "old", "new")
	advance(30 * time.Minute) // old expired, new not yet
	ms, err := s.ListMessages(ctx, "run", 0, 0)
	mustOK(t, "list", err)
	if len(ms) != 1 || ms[0].Row.ID != "new" || ms[0].Seq != 2 {
		t.Errorf("after expiry: %+v, want only new at 2", ms)
	}
	items, err := s.ListInbox(ctx, "w", 0, 0)
	mustOK(t, "list inbox", err)
	if len(items) != 0 {
		t.Errorf("an expired inbox item is listed")
	}
	// An id lives as long as its message: new's is remembered, old's is
	// forgotten with it.
	seq, existed, err := s.AppendMessage(ctx, "run", msg("new"))
	if err != nil || seq != 2 || !existed {
		t.Errorf("repeat of new: (%d, existed %v, %v), want (2, true)", seq, existed, err)
	}
	seq, existed, err = s.AppendMessage(ctx, "run", msg("old"))
	if err != nil || seq != 3 || existed {
		t.Errorf("old again after it expired: (%d, existed %v, %v), want (3, false)", seq, existed, err)
	}
	// The counter never expires: sequences are never reused.
	advance(2 * time.Hour)
	seq, _, err = s.AppendMessage(ctx, "run", msg("later"))
	mustOK(t, "append", err)
	if seq != 4 {
		t.Errorf("seq %d after expiry, want 4", seq)
	}
}

// EnsureTable is idempotent and safe to race.
func TestEnsureTableConcurrent(t *testing.T) {
	c := client(t)
	s := newTable(t, c) // creates and cleans up a name
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := dynamostore.New(c, s.Table()).EnsureTable(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	name := s.Table() + "-race"
	t.Cleanup(func() { c.DeleteTable(t.Context(), &dynamodb.DeleteTableInput{TableName: aws.String(name)}) })
	for range 3 {
		wg.Go(func() {
			if err := dynamostore.New(c, name).EnsureTable(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// A record beyond DynamoDB's item limit is refused as TooLarge, and
// nothing is written.
func TestTooLarge(t *testing.T) {
	s := newTable(t, client(t))
	ctx := t.Context()
	// Random, so that gzip cannot bring it under the limit.
	b := make([]byte, 400<<10)
	rand.NewChaCha8([32]byte{1}).Read(b)
	big := store.Resource{Kind: "worker", Handle: "w", Worker: &store.Worker{Brief: fmt.Sprintf("%x", b)}}
	_, err := s.PutResource(ctx, big, store.NoVersion)
	wantKind(t, "create", err, galleyerr.TooLarge)
	_, _, err = s.GetResource(ctx, "worker", "w")
	wantKind(t, "get", err, galleyerr.NotFound)
	_, err = s.PutEffect(ctx, store.Effect{Key: "k", Receipt: b[:0:0]}, store.NoVersion)
	mustOK(t, "small effect", err)
	_, err = s.PutEffect(ctx, store.Effect{Key: "k", Receipt: append(b, b...)}, 1)
	wantKind(t, "update", err, galleyerr.TooLarge)
}
