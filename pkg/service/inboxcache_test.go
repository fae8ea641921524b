package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/doorbell/localbell"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/boltstore"
	"github.com/galley-run/galley/pkg/store/memstore"
	"github.com/galley-run/galley/pkg/workerapi"
)

// launchOn launches one worker on svc and answers its handle.
func launchOn(tb testing.TB, svc *service.Service, run, key string, now time.Time) string {
	tb.Helper()
	raw, err := svc.Apply(context.Background(), call(run, key, launchBody("")), now)
	if err != nil {
		tb.Fatalf("launch %s: %v", key, err)
	}
	var r protocol.Receipt
	if err := json.Unmarshal(raw, &r); err != nil {
		tb.Fatal(err)
	}
	return r.Created[0].Handle
}

// countingStore records the after argument of every ListInbox call and the
// number of items it answered: the store work an inbox poll costs.
type countingStore struct {
	store.Store
	mu    sync.Mutex
	lists []listCall
}

type listCall struct {
	worker string
	after  int64
	n      int
}

func (c *countingStore) ListInbox(ctx context.Context, worker string, after int64, limit int) ([]store.InboxItem, error) {
	items, err := c.Store.ListInbox(ctx, worker, after, limit)
	c.mu.Lock()
	c.lists = append(c.lists, listCall{worker, after, len(items)})
	c.mu.Unlock()
	return items, err
}

// take answers the calls recorded since the last take.
func (c *countingStore) take() []listCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lists
	c.lists = nil
	return l
}

// inboxRig is one memory store with a service over it, a hand-moved clock,
// and the means to write inboxes and worker records as effects (and their
// retries and deaths) leave them.
type inboxRig struct {
	t     *testing.T
	st    store.Store
	clock *servicetest.ManualClock
	te    *servicetest.Env
	lease time.Duration
}

func newInboxRig(t *testing.T) *inboxRig {
	t.Helper()
	// From the real now on: effects derive real deadlines from the clock.
	clock := servicetest.NewManualClock(time.Now())
	st := memstore.New()
	const lease = 10 * time.Second
	te := servicetest.New(t, func(c *service.Config) { c.Lease = lease }, service.WithStore(st), service.WithClock(clock))
	return &inboxRig{t: t, st: st, clock: clock, te: te, lease: lease}
}

// service answers another service over st, with its own inbox cache: a
// second process, or a second Lambda container.
func (r *inboxRig) service(st store.Store, opts ...service.Option) *service.Service {
	r.t.Helper()
	all := append([]service.Option{service.WithStore(st), service.WithRuntime(r.te.Runtime),
		service.WithGitHost(r.te.Git), service.WithDoorbell(localbell.New()), service.WithClock(r.clock)}, opts...)
	svc, err := service.New(r.te.Config, all...)
	if err != nil {
		r.t.Fatal(err)
	}
	return svc
}

func (r *inboxRig) apply(key, effect string) {
	r.t.Helper()
	if _, err := r.te.Service.Apply(r.t.Context(), call("run-1", key, effect), r.clock.Now()); err != nil {
		r.t.Fatalf("apply %s: %v", key, err)
	}
}

func (r *inboxRig) launch(key string) string {
	r.t.Helper()
	return launchOn(r.t, r.te.Service, "run-1", key, r.clock.Now())
}

// add appends an item as an effect does, stamped now; the same key again is
// a retried effect's second append.
func (r *inboxRig) add(worker string, it store.InboxItem) int64 {
	r.t.Helper()
	it.At = r.clock.Now()
	seq, err := r.st.AppendInbox(r.t.Context(), worker, it)
	if err != nil {
		r.t.Fatal(err)
	}
	return seq
}

func (r *inboxRig) ask(worker string) string {
	r.t.Helper()
	ctx := r.t.Context()
	a, err := r.te.Service.WorkerPost(ctx, worker, workerapi.PostRequest{Kind: protocol.MsgQuestion, Body: "which one?"})
	if err != nil {
		r.t.Fatal(err)
	}
	// A coordinator reads the question, so the worker's unread rows stay
	// below their bound however many it asks.
	res, _, err := r.st.GetResource(ctx, protocol.KindWorker, worker)
	if err != nil {
		r.t.Fatal(err)
	}
	for {
		d, err := r.te.Service.Next(ctx, res.Worker.Run, "coordinator")
		if err != nil {
			r.t.Fatal(err)
		}
		if d.Delivery == nil {
			break
		}
		if _, err := r.te.Service.Acknowledge(ctx, res.Worker.Run, "coordinator", d.Delivery.ID); err != nil {
			r.t.Fatal(err)
		}
	}
	return a.ID
}

// record writes the answer to question into the worker record, as a reply
// effect does after its append.
func (r *inboxRig) record(worker, question, body string) {
	r.t.Helper()
	ctx := r.t.Context()
	res, v, err := r.st.GetResource(ctx, protocol.KindWorker, worker)
	if err != nil {
		r.t.Fatal(err)
	}
	res.Worker.Questions[question] = store.AnswerDigest(body)
	if _, err := r.st.PutResource(ctx, res, v); err != nil {
		r.t.Fatal(err)
	}
}

// oracle is the inbox read as it was before the cache: the whole inbox
// listed and decided on every call.
func (r *inboxRig) oracle(handle string, after int64) workerapi.InboxAnswer {
	r.t.Helper()
	ctx := r.t.Context()
	res, _, err := r.st.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		r.t.Fatal(err)
	}
	ans := workerapi.InboxAnswer{Items: []workerapi.InboxItem{}}
	if res.Released || res.Worker == nil || res.Worker.State == protocol.StateSettled {
		ans.Settled = true
		if res.Worker != nil {
			ans.Outcome = res.Worker.Outcome
		}
	}
	items, err := r.st.ListInbox(ctx, handle, 0, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	seen := map[string]bool{}
	answered := map[string]bool{}
	for _, it := range items {
		// A message's second copy is left out; every reply copy is decided
		// by the record, which names the one to deliver (or, written before
		// copies were named, delivers the first that matches).
		dup := it.Kind != "reply" && it.Key != "" && seen[it.Key]
		if it.Kind != "reply" {
			seen[it.Key] = true
		}
		if it.Kind == "reply" {
			recorded := ""
			if res.Worker != nil {
				recorded = res.Worker.Questions[it.Question]
			}
			answer, named := service.ParseAnswer(recorded)
			switch {
			case recorded == "" && r.clock.Now().Sub(it.At) < 2*r.lease:
				return ans
			case named > 0 && it.Seq != named:
				dup = true
			case !store.AnswerMatches(answer, it.Body) || answered[it.Question]:
				dup = true
			default:
				answered[it.Question] = true
			}
		}
		if dup || it.Seq <= after {
			continue
		}
		ans.Items = append(ans.Items, workerapi.InboxItem{Seq: it.Seq, Kind: it.Kind, Question: it.Question, Body: it.Body})
	}
	return ans
}

// poll answers svc's inbox for handle after seq after, without waiting.
func (r *inboxRig) poll(svc *service.Service, handle string, after int64) workerapi.InboxAnswer {
	r.t.Helper()
	ans, err := svc.WorkerInbox(r.t.Context(), handle, after, 0)
	if err != nil {
		r.t.Fatalf("inbox of %s after %d: %v", handle, after, err)
	}
	return ans
}

// agree checks that each service answers as the full read does.
func (r *inboxRig) agree(what string, handle string, after int64, svcs ...*service.Service) workerapi.InboxAnswer {
	r.t.Helper()
	want := r.oracle(handle, after)
	for i, svc := range svcs {
		if got := r.poll(svc, handle, after); !reflect.DeepEqual(got, want) {
			r.t.Fatalf("%s: service %d, inbox of %s after %d:\n got %+v\nwant %+v", what, i, handle, after, got, want)
		}
	}
	return want
}

func seqs(a workerapi.InboxAnswer) []int64 {
	out := []int64{}
	for _, it := range a.Items {
		out = append(out, it.Seq)
	}
	return out
}

// TestWorkerInboxAgreesWithFullRead drives two workers' inboxes through a
// seeded mix of messages, retried effects' duplicates, questions, replies
// appended before their record, records, deaths outlived by two leases, and
// a settle, and after every step compares each service's answer for a range
// of cursors with the full read: a warm cache, one that holds one worker
// (the two evict each other), one whose byte bound drops an inbox, and a
// cold one made afresh for each check.
func TestWorkerInboxAgreesWithFullRead(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			r := newInboxRig(t)
			warm := r.te.Service
			oneWorker := r.service(r.st, service.WithInboxCache(1, 1<<20))
			fewBytes := r.service(r.st, service.WithInboxCache(8, 6<<10))
			workers := []string{r.launch("k-launch-a"), r.launch("k-launch-b")}
			rng := rand.New(rand.NewPCG(seed, 7))
			sent := map[string][]store.InboxItem{} // what each inbox was sent, to resend
			asked := map[string][]string{}
			last := map[string]int64{}
			n := 0
			key := func() string { n++; return fmt.Sprint("k-", n) }
			body := func() string { return []string{"yes", "no", strings.Repeat("long ", 40)}[rng.IntN(3)] }
			check := func(what string) {
				cold := r.service(r.st)
				for _, w := range workers {
					afters := []int64{-1, 0, rng.Int64N(last[w] + 1), last[w] - 1, last[w], last[w] + 2}
					for _, after := range afters {
						r.agree(what, w, after, warm, oneWorker, fewBytes, cold)
					}
				}
			}
			for step := range 300 {
				w := workers[rng.IntN(len(workers))]
				var what string
				switch op := rng.IntN(20); {
				case op < 7:
					what = "message"
					it := store.InboxItem{Key: key(), Kind: "message", Body: body()}
					sent[w] = append(sent[w], it)
					last[w] = r.add(w, it)
				case op < 10 && len(sent[w]) > 0:
					// A retried effect appends its item again, maybe
					// long after the first copy was read.
					what = "duplicate"
					last[w] = r.add(w, sent[w][rng.IntN(len(sent[w]))])
				case op < 12:
					what = "question"
					asked[w] = append(asked[w], r.ask(w))
				case op < 15:
					// A reply appended, its record not (yet) written; now
					// and then to a question never asked.
					what = "reply appended"
					q := "msg-never"
					if len(asked[w]) > 0 && rng.IntN(8) > 0 {
						q = asked[w][rng.IntN(len(asked[w]))]
					}
					it := store.InboxItem{Key: key(), Kind: "reply", Question: q, Body: body()}
					sent[w] = append(sent[w], it)
					last[w] = r.add(w, it)
				case op < 17 && len(asked[w]) > 0:
					// Now and then over an earlier record, which the
					// service never does: the cache must not rely on it.
					what = "reply recorded"
					r.record(w, asked[w][rng.IntN(len(asked[w]))], body())
				case op < 18 && len(asked[w]) > 0:
					// The whole reply effect, append and record.
					what = "reply effect"
					q := asked[w][rng.IntN(len(asked[w]))]
					_, err := r.te.Service.Apply(t.Context(), call("run-1", key(),
						`{"type":"reply-to-worker","worker":`+workerRef(w)+`,"question":"`+q+`","body":"yes"}`), r.clock.Now())
					if err == nil {
						last[w] = max(last[w], r.oracleLast(w))
					}
				default:
					what = "clock"
					r.clock.Advance(r.lease * 3 / 4)
				}
				check(fmt.Sprintf("step %d (%s)", step, what))
			}
			// A settled worker: still answered, and what is appended after
			// too, as before.
			r.apply("k-cancel", `{"type":"cancel-worker","worker":`+workerRef(workers[0])+`}`)
			check("settled")
			last[workers[0]] = r.add(workers[0], store.InboxItem{Key: key(), Kind: "message", Body: "late"})
			check("settled, appended")
			r.apply("k-release", `{"type":"release-resource","resource":`+workerRef(workers[0])+`}`)
			check("released")
		})
	}
}

// oracleLast answers the highest sequence in the worker's inbox.
func (r *inboxRig) oracleLast(worker string) int64 {
	r.t.Helper()
	items, err := r.st.ListInbox(r.t.Context(), worker, 0, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(items) == 0 {
		return 0
	}
	return items[len(items)-1].Seq
}

// TestWorkerInboxListsOnlyNewItems proves the store work of a poll: each
// lists from the highest sequence its process read, so every item is listed
// once per process, and a process that starts cold reads the inbox once.
func TestWorkerInboxListsOnlyNewItems(t *testing.T) {
	r := newInboxRig(t)
	counted := &countingStore{Store: r.st}
	svc := r.service(counted)
	w := r.launch("k-launch")
	var last int64
	for round := range 12 {
		k := round%3 + 1
		for i := range k {
			last = r.add(w, store.InboxItem{Key: fmt.Sprint("k-", round, "-", i), Kind: "message", Body: "hi"})
		}
		prev := last - int64(k)
		ans := r.poll(svc, w, prev)
		if len(ans.Items) != k {
			t.Fatalf("round %d: %d items, want %d", round, len(ans.Items), k)
		}
		// The doorbell wakes a poll that already has what it wants.
		r.poll(svc, w, last)
		got := counted.take()
		want := []listCall{{w, prev, k}, {w, last, 0}}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: ListInbox calls %+v, want %+v", round, got, want)
		}
	}
	// A harness that restarts from 0 costs no more.
	if ans := r.poll(svc, w, 0); int64(len(ans.Items)) != last {
		t.Fatalf("from 0: %d items, want %d", len(ans.Items), last)
	}
	if got, want := counted.take(), []listCall{{w, last, 0}}; !slices.Equal(got, want) {
		t.Fatalf("restarted harness: ListInbox calls %+v, want %+v", got, want)
	}
	// Another process, cold: one full read, then only what is new.
	other := r.service(counted)
	r.agree("cold", w, last, other)
	r.add(w, store.InboxItem{Key: "k-new", Kind: "message", Body: "hi"})
	r.agree("cold, then warm", w, last, other)
	if got, want := counted.take(), []listCall{{w, 0, int(last)}, {w, last, 1}}; !slices.Equal(got, want) {
		t.Fatalf("second process: ListInbox calls %+v, want %+v", got, want)
	}
	// The first process is behind by one item: one short read catches up.
	r.agree("behind", w, last, svc)
	if got, want := counted.take(), []listCall{{w, last, 1}}; !slices.Equal(got, want) {
		t.Fatalf("process behind: ListInbox calls %+v, want %+v", got, want)
	}
}

// TestWorkerInboxDuplicateInLaterRead: a retried effect's second copy
// arrives after the first was read and delivered; it is never delivered,
// by a warm process or a cold one.
func TestWorkerInboxDuplicateInLaterRead(t *testing.T) {
	r := newInboxRig(t)
	svc := r.service(r.st)
	w := r.launch("k-launch")
	m := store.InboxItem{Key: "k-msg", Kind: "message", Body: "rebase please"}
	r.add(w, m)
	if got := seqs(r.agree("first copy", w, 0, svc)); !slices.Equal(got, []int64{1}) {
		t.Fatalf("first copy: seqs %v", got)
	}
	r.add(w, m)
	r.add(w, store.InboxItem{Key: "k-msg-2", Kind: "message", Body: "and then test"})
	r.add(w, m)
	for _, after := range []int64{0, 1, 2} {
		want := []int64{1, 3}[min(after, 1):]
		if got := seqs(r.agree("later copies", w, after, svc, r.service(r.st))); !slices.Equal(got, want) {
			t.Fatalf("after %d: seqs %v, want %v", after, got, want)
		}
	}
}

// TestWorkerInboxReplyHeldAcrossCalls: a reply appended but not recorded
// holds back what follows it on every call, until its record comes or two
// leases pass; a record that comes later still delivers it.
func TestWorkerInboxReplyHeldAcrossCalls(t *testing.T) {
	r := newInboxRig(t)
	svc := r.service(r.st)
	w := r.launch("k-launch")
	q := r.ask(w)
	r.add(w, store.InboxItem{Key: "k-m1", Kind: "message", Body: "before"})
	r.agree("before the reply", w, 0, svc)
	r.add(w, store.InboxItem{Key: "k-reply", Kind: "reply", Question: q, Body: "yes"})
	r.add(w, store.InboxItem{Key: "k-m2", Kind: "message", Body: "after"})
	for i := range 2 {
		if got := seqs(r.agree("held", w, 0, svc, r.service(r.st))); !slices.Equal(got, []int64{1}) {
			t.Fatalf("call %d: seqs %v, want the message before the reply only", i, got)
		}
		if got := seqs(r.agree("held", w, 1, svc)); len(got) != 0 {
			t.Fatalf("call %d after the message: seqs %v, want none", i, got)
		}
	}
	// The effect died: after two leases the reply is not delivered, and no
	// longer holds back what follows.
	r.clock.Advance(2 * r.lease)
	if got := seqs(r.agree("outlived", w, 1, svc, r.service(r.st))); !slices.Equal(got, []int64{3}) {
		t.Fatalf("outlived: seqs %v, want [3]", got)
	}
	// Its retry appends again (a duplicate) and records as a record written
	// before copies were named (the digest alone): the first copy is the
	// one delivered. (The service now names the copy; see
	// TestReplyAppliedReachesTheAgentOnce.)
	r.add(w, store.InboxItem{Key: "k-reply", Kind: "reply", Question: q, Body: "yes"})
	r.record(w, q, "yes")
	if got := seqs(r.agree("recorded", w, 0, svc, r.service(r.st))); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("recorded: seqs %v, want [1 2 3]", got)
	}
	// A reply of a losing body, recorded otherwise, is never delivered;
	// one held by a passed reply holds everything after the cursor too.
	q2 := r.ask(w)
	r.add(w, store.InboxItem{Key: "k-reply-2", Kind: "reply", Question: q2, Body: "no"})
	r.add(w, store.InboxItem{Key: "k-m3", Kind: "message", Body: "later"})
	if got := seqs(r.agree("held by a passed reply", w, 5, svc, r.service(r.st))); len(got) != 0 {
		t.Fatalf("held by a passed reply: seqs %v, want none", got)
	}
	r.record(w, q2, "yes")
	if got := seqs(r.agree("lost the race", w, 3, svc, r.service(r.st))); !slices.Equal(got, []int64{6}) {
		t.Fatalf("lost the race: seqs %v, want [6]", got)
	}
}

// TestWorkerInboxCacheBounds: the cache holds at most its workers and about
// its bytes, forgets settled workers, and an evicted worker is read in full
// once more, answering the same.
func TestWorkerInboxCacheBounds(t *testing.T) {
	r := newInboxRig(t)
	counted := &countingStore{Store: r.st}
	a, b := r.launch("k-launch-a"), r.launch("k-launch-b")
	for i := range 3 {
		r.add(a, store.InboxItem{Key: fmt.Sprint("k-a", i), Kind: "message", Body: "for a"})
		r.add(b, store.InboxItem{Key: fmt.Sprint("k-b", i), Kind: "message", Body: "for b"})
	}

	one := r.service(counted, service.WithInboxCache(1, 1<<20))
	for range 2 {
		r.agree("one worker", a, 0, one)
		r.agree("one worker", b, 0, one)
	}
	if got, want := counted.take(), []listCall{{a, 0, 3}, {b, 0, 3}, {a, 0, 3}, {b, 0, 3}}; !slices.Equal(got, want) {
		t.Fatalf("alternating workers: ListInbox calls %+v, want %+v", got, want)
	}
	if n, _ := service.InboxCacheLen(one); n != 1 {
		t.Fatalf("cache of one holds %d workers", n)
	}

	small := r.service(counted, service.WithInboxCache(8, 200))
	for range 2 {
		r.agree("few bytes", a, 0, small)
	}
	if got, want := counted.take(), []listCall{{a, 0, 3}, {a, 0, 3}}; !slices.Equal(got, want) {
		t.Fatalf("inbox beyond the byte bound: ListInbox calls %+v, want %+v", got, want)
	}
	if n, bytes := service.InboxCacheLen(small); n != 0 || bytes != 0 {
		t.Fatalf("cache holds %d workers, %d bytes, beyond its bound", n, bytes)
	}

	// An inbox alone beyond the bound goes alone: the others stay cached.
	big := r.launch("k-launch-big")
	r.add(big, store.InboxItem{Key: "k-big", Kind: "message", Body: strings.Repeat("x", 2000)})
	mixed := r.service(counted, service.WithInboxCache(8, 1000))
	r.agree("small beside big", b, 0, mixed)
	r.agree("big", big, 0, mixed)
	if n, _ := service.InboxCacheLen(mixed); n != 1 {
		t.Fatalf("after an oversized inbox the cache holds %d workers, want the small one", n)
	}
	counted.take()
	r.agree("small beside big", b, 3, mixed)
	if got, want := counted.take(), []listCall{{b, 3, 0}}; !slices.Equal(got, want) {
		t.Fatalf("the small inbox was evicted with the big one: ListInbox calls %+v, want %+v", got, want)
	}

	off := r.service(counted, service.WithInboxCache(0, 0))
	r.agree("off", a, 0, off)
	r.agree("off", a, 0, off)
	if got, want := counted.take(), []listCall{{a, 0, 3}, {a, 0, 3}}; !slices.Equal(got, want) {
		t.Fatalf("cache off: ListInbox calls %+v, want %+v", got, want)
	}

	warm := r.service(counted)
	r.agree("warm", a, 0, warm)
	r.agree("warm", b, 0, warm)
	if n, bytes := service.InboxCacheLen(warm); n != 2 || bytes <= 0 {
		t.Fatalf("warm cache holds %d workers, %d bytes", n, bytes)
	}
	r.apply("k-cancel", `{"type":"cancel-worker","worker":`+workerRef(a)+`}`)
	if ans := r.agree("settled", a, 0, warm); !ans.Settled {
		t.Fatalf("settled worker answered %+v", ans)
	}
	if n, _ := service.InboxCacheLen(warm); n != 1 {
		t.Fatalf("cache holds %d workers after one settled, want 1", n)
	}
}

// TestWorkerInboxConcurrentPolls polls one worker from several goroutines
// of one process while items, duplicates among them, are appended: every
// answer is in order, without a duplicate key, and the last one is the
// full read's.
func TestWorkerInboxConcurrentPolls(t *testing.T) {
	r := newInboxRig(t)
	svc := r.service(r.st, service.WithInboxCache(2, 1<<20))
	w, other := r.launch("k-launch"), r.launch("k-launch-other")
	const pollers, items = 4, 60
	var wg sync.WaitGroup
	errs := make(chan error, pollers)
	for p := range pollers {
		wg.Go(func() {
			var after int64
			for after < items/2 {
				h := w
				if p == 0 {
					h = other // to evict w now and then
				}
				ans, err := svc.WorkerInbox(context.Background(), h, after, 0)
				if err != nil {
					errs <- err
					return
				}
				keys := map[string]bool{}
				for i, it := range ans.Items {
					if it.Seq <= after || (i > 0 && it.Seq <= ans.Items[i-1].Seq) || keys[it.Body] {
						errs <- fmt.Errorf("poll after %d answered %+v", after, ans.Items)
						return
					}
					keys[it.Body] = true
				}
				if h == w && len(ans.Items) > 0 {
					after = ans.Items[len(ans.Items)-1].Seq
				}
				if h == other {
					after++
				}
			}
		})
	}
	for i := range items {
		// Every third append repeats the one before: a retried effect.
		k := i - i%3/2
		r.add(w, store.InboxItem{Key: fmt.Sprint("k-", k), Kind: "message", Body: fmt.Sprint("body ", k)})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	r.agree("after the race", w, 0, svc)
}

// BenchmarkWorkerInbox measures a harness's poll of a worker whose inbox
// holds n messages, the last of them new to the harness: the steady state
// of a message-heavy run.
func BenchmarkWorkerInbox(b *testing.B) {
	open := map[string]func(b *testing.B) store.Store{
		"mem": func(*testing.B) store.Store { return memstore.New() },
		"bolt": func(b *testing.B) store.Store {
			s, err := boltstore.Open(filepath.Join(b.TempDir(), "galley.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			return s
		},
	}
	for _, kind := range []string{"mem", "bolt"} {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("%s/items=%d", kind, n), func(b *testing.B) {
				st := open[kind](b)
				svc := servicetest.New(b, nil, service.WithStore(st)).Service
				ctx := b.Context()
				w := launchOn(b, svc, "run-1", "k-launch", time.Now())
				body := strings.Repeat("please look at the failing test again; ", 5)
				for i := range n {
					it := store.InboxItem{Key: fmt.Sprint("k-msg-", i), Kind: "message", Body: body, At: time.Now()}
					if _, err := st.AppendInbox(ctx, w, it); err != nil {
						b.Fatal(err)
					}
				}
				for b.Loop() {
					ans, err := svc.WorkerInbox(ctx, w, int64(n-1), 0)
					if err != nil || len(ans.Items) != 1 {
						b.Fatalf("inbox = %+v, %v", ans, err)
					}
				}
			})
		}
	}
}
