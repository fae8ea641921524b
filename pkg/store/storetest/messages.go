package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/store"
)

func testMessages(t *testing.T, open func(*testing.T) store.Store) {
	t.Run("Sequence", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		var want []store.Message
		for i := range 5 {
			m := fullMessage(fmt.Sprint("m", i))
			seq, _, err := s.AppendMessage(ctx, "run", m)
			mustOK(t, "append", err)
			if seq != int64(i+1) {
				t.Fatalf("append %d answered sequence %d, want %d", i, seq, i+1)
			}
			m.Seq = seq
			want = append(want, m)
		}
		got, err := s.ListMessages(ctx, "run", 0, 100)
		mustOK(t, "list", err)
		checkSame(t, "messages", got, want)
	})

	t.Run("Pagination", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		for i := range 5 {
			_, _, err := s.AppendMessage(ctx, "run", fullMessage(fmt.Sprint("m", i)))
			mustOK(t, "append", err)
		}
		for _, tc := range []struct {
			after int64
			limit int
			want  []int64
		}{
			{0, 2, []int64{1, 2}},
			{2, 2, []int64{3, 4}},
			{4, 2, []int64{5}},
			{5, 2, nil},
			{9, 2, nil},
			{1, 100, []int64{2, 3, 4, 5}},
			{3, 0, []int64{4, 5}}, // limit <= 0: no limit
			{0, 1, []int64{1}},
		} {
			got, err := s.ListMessages(ctx, "run", tc.after, tc.limit)
			mustOK(t, "list", err)
			if gs := seqs(got); fmt.Sprint(gs) != fmt.Sprint(tc.want) && !(len(gs) == 0 && len(tc.want) == 0) {
				t.Errorf("ListMessages(after %d, limit %d) = %v, want %v", tc.after, tc.limit, gs, tc.want)
			}
			for _, m := range got {
				if want := fmt.Sprint("m", m.Seq-1); m.Row.ID != want {
					t.Errorf("message %d is %q, want %q", m.Seq, m.Row.ID, want)
				}
			}
		}
	})

	t.Run("RunsIndependent", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		for i := range 3 {
			_, _, err := s.AppendMessage(ctx, "run-a", fullMessage(fmt.Sprint("a", i)))
			mustOK(t, "append a", err)
		}
		seq, _, err := s.AppendMessage(ctx, "run-b", fullMessage("b0"))
		mustOK(t, "append b", err)
		if seq != 1 {
			t.Errorf("first message of another run has sequence %d, want 1", seq)
		}
		got, err := s.ListMessages(ctx, "run-b", 0, 10)
		mustOK(t, "list b", err)
		if len(got) != 1 || got[0].Row.ID != "b0" {
			t.Errorf("run-b lists %s", show(got))
		}
		got, err = s.ListMessages(ctx, "no-such-run", 0, 10)
		mustOK(t, "list a run without messages", err)
		if len(got) != 0 {
			t.Errorf("a run without messages lists %d", len(got))
		}
	})

	// 8 writers append 50 messages each while a reader follows the ledger:
	// the sequences are exactly 1..400, each message is stored once, each
	// writer's messages keep its order, and the reader never sees a gap
	// (a message becomes visible only after every earlier one).
	t.Run("ConcurrentAppend", func(t *testing.T) {
		s := open(t)
		const writers, each = 8, 50
		appendSeq := func(ctx context.Context, i int) (int64, string, error) {
			id := fmt.Sprintf("w%d-%02d", i/each, i%each)
			seq, _, err := s.AppendMessage(ctx, "run", fullMessage(id))
			return seq, id, err
		}
		list := func(ctx context.Context, after int64) ([]int64, []string, error) {
			ms, err := s.ListMessages(ctx, "run", after, 100)
			ids := make([]string, len(ms))
			for i, m := range ms {
				ids[i] = m.Row.ID
			}
			return seqs(ms), ids, err
		}
		concurrentAppend(t, writers, each, appendSeq, list)
	})
}

// testRepeatedIDs checks that AppendMessage is idempotent by the row's id
// within a run: a repeat appends nothing and answers the first sequence.
func testRepeatedIDs(t *testing.T, open func(*testing.T) store.Store) {
	appendOK := func(t *testing.T, s store.Store, run string, m store.Message, wantSeq int64, wantExisted bool) {
		t.Helper()
		seq, existed, err := s.AppendMessage(t.Context(), run, m)
		mustOK(t, "append "+m.Row.ID, err)
		if seq != wantSeq || existed != wantExisted {
			t.Errorf("append %s to %s answered (%d, existed %v), want (%d, %v)", m.Row.ID, run, seq, existed, wantSeq, wantExisted)
		}
	}
	listed := func(t *testing.T, s store.Store, run string) []string {
		t.Helper()
		ms, err := s.ListMessages(t.Context(), run, 0, 0)
		mustOK(t, "list "+run, err)
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.Row.ID
		}
		return ids
	}

	t.Run("Repeat", func(t *testing.T) {
		s := open(t)
		appendOK(t, s, "run", fullMessage("a"), 1, false)
		appendOK(t, s, "run", fullMessage("b"), 2, false)
		again := fullMessage("a")
		again.Row.Body = "a different body"
		appendOK(t, s, "run", again, 1, true)
		appendOK(t, s, "run", fullMessage("b"), 2, true)
		appendOK(t, s, "run", fullMessage("c"), 3, false)
		ms, err := s.ListMessages(t.Context(), "run", 0, 0)
		mustOK(t, "list", err)
		want := []store.Message{fullMessage("a"), fullMessage("b"), fullMessage("c")}
		for i := range want {
			want[i].Seq = int64(i + 1)
		}
		checkSame(t, "messages after repeats (the first copy stays)", ms, want)
	})

	t.Run("PerRun", func(t *testing.T) {
		s := open(t)
		appendOK(t, s, "run-a", fullMessage("x"), 1, false)
		appendOK(t, s, "run-b", fullMessage("b0"), 1, false)
		appendOK(t, s, "run-b", fullMessage("x"), 2, false)
		appendOK(t, s, "run-a", fullMessage("x"), 1, true)
		appendOK(t, s, "run-b", fullMessage("x"), 2, true)
		if got := fmt.Sprint(listed(t, s, "run-a"), listed(t, s, "run-b")); got != "[x] [b0 x]" {
			t.Errorf("runs list %s, want [x] [b0 x]", got)
		}
	})

	t.Run("EmptyIDAppendsEachTime", func(t *testing.T) {
		s := open(t)
		appendOK(t, s, "run", fullMessage(""), 1, false)
		appendOK(t, s, "run", fullMessage(""), 2, false)
	})

	// Rounds of 6 writers appending the same id at once, beside a writer
	// of fresh ids: each id is stored once, every writer of it answers its
	// one sequence, and exactly one of them appended it.
	t.Run("ConcurrentRepeats", func(t *testing.T) {
		s, ctx := open(t), t.Context()
		const rounds, writers = 5, 6
		var want []string
		for r := range rounds {
			id := fmt.Sprint("same-", r)
			seqOf := make([]int64, writers)
			existed := make([]bool, writers)
			var fresh string
			race(writers+1, func(i int) {
				if i == writers {
					fresh = fmt.Sprint("fresh-", r)
					_, _, err := s.AppendMessage(ctx, "run", fullMessage(fresh))
					mustOK(t, "append "+fresh, err)
					return
				}
				var err error
				seqOf[i], existed[i], err = s.AppendMessage(ctx, "run", fullMessage(id))
				mustOK(t, "append "+id, err)
			})
			if t.Failed() {
				return
			}
			appended := 0
			for i := range writers {
				if seqOf[i] != seqOf[0] {
					t.Errorf("round %d: writers answered sequences %v", r, seqOf)
					break
				}
				if !existed[i] {
					appended++
				}
			}
			if appended != 1 {
				t.Errorf("round %d: %d writers say they appended %s, want 1", r, appended, id)
			}
			want = append(want, id, fresh)
		}
		got := listed(t, s, "run")
		if len(got) != len(want) {
			t.Fatalf("the run lists %d messages %v, want %d", len(got), got, len(want))
		}
		count := map[string]int{}
		for _, id := range got {
			count[id]++
		}
		for _, id := range want {
			if count[id] != 1 {
				t.Errorf("%s is listed %d times, want once", id, count[id])
			}
		}
	})
}

func seqs(ms []store.Message) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

// concurrentAppend runs writers×each appends (append(i) for item i, which
// writer i/each makes in order) while a reader follows with list, and
// checks the sequences: exactly 1..n, one item each, every writer's items in
// its order, no gap ever visible to the reader, and the full listing equal
// to what the appends answered.
func concurrentAppend(t *testing.T, writers, each int,
	appendOne func(ctx context.Context, i int) (seq int64, id string, err error),
	list func(ctx context.Context, after int64) ([]int64, []string, error),
) {
	t.Helper()
	ctx := t.Context()
	n := writers * each
	ids := make([]string, n)  // item i's id
	seqOf := make([]int64, n) // the sequence append(i) answered
	var done atomic.Bool
	readerErr := make(chan error, 1)
	go func() {
		readerErr <- follow(ctx, int64(n), &done, list)
	}()
	race(writers, func(w int) {
		for j := range each {
			i := w*each + j
			seq, id, err := appendOne(ctx, i)
			if err != nil {
				t.Errorf("append %s: %v", id, err)
				return
			}
			if seq < 1 || seq > int64(n) {
				t.Errorf("append %s answered sequence %d, want 1..%d", id, seq, n)
				continue
			}
			ids[i], seqOf[i] = id, seq
		}
	})
	done.Store(true)
	if err := <-readerErr; err != nil {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	owner := make([]int, n+1) // 1 + the item that each sequence was answered to
	for i, seq := range seqOf {
		if owner[seq] != 0 {
			t.Fatalf("sequence %d answered twice (%s and %s)", seq, ids[owner[seq]-1], ids[i])
		}
		owner[seq] = i + 1
		if j := i % each; j > 0 && seqOf[i-1] >= seq {
			t.Errorf("writer %d: item %d got sequence %d after %d", i/each, j, seq, seqOf[i-1])
		}
	}
	// The full listing, paged: item ids in answered order.
	var all []string
	var after int64
	for {
		ss, ids, err := list(ctx, after)
		mustOK(t, "list", err)
		if len(ss) == 0 {
			break
		}
		for k, seq := range ss {
			if seq != after+1 {
				t.Fatalf("listing after %d returned sequence %d", after, seq)
			}
			after = seq
			all = append(all, ids[k])
		}
	}
	if len(all) != n {
		t.Fatalf("listed %d items, want %d", len(all), n)
	}
	for k, id := range all {
		if want := ids[owner[k+1]-1]; id != want {
			t.Errorf("sequence %d holds %s, but it was answered to %s", k+1, id, want)
		}
	}
}

// follow reads with list from the start until it has seen n items, checking
// that every read continues exactly where the last one ended. After done is
// set, a read that brings nothing new ends it.
func follow(ctx context.Context, n int64, done *atomic.Bool,
	list func(ctx context.Context, after int64) ([]int64, []string, error),
) error {
	var last int64
	for last < n {
		finished := done.Load()
		ss, _, err := list(ctx, last)
		if err != nil {
			return fmt.Errorf("reader: list after %d: %v", last, err)
		}
		for _, seq := range ss {
			if seq != last+1 {
				return fmt.Errorf("reader: after %d saw sequence %d: a gap was visible", last, seq)
			}
			last = seq
		}
		if len(ss) == 0 && finished {
			return fmt.Errorf("reader: saw %d of %d items", last, n)
		}
		if len(ss) == 0 {
			// Pace the idle reads, so that a remote store sees a few
			// hundred calls here, not thousands.
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}
