package history

import (
	"fmt"
	"slices"
	"testing"
)

func TestWorkerDoneAgreesWithObserve(t *testing.T) {
	done := func(id, worker, outcome string) string {
		return fmt.Sprintf(`{"id":%q,"kind":"worker-done","worker":{"kind":"worker","backend":"galley","handle":%q},"outcome":%q,"body":"done"}`, id, worker, outcome)
	}
	batch := func(id string, rows ...string) string {
		out := fmt.Sprintf(`{"status":"delivery","delivery":{"id":%q,"messages":[`, id)
		for i, r := range rows {
			if i > 0 {
				out += ","
			}
			out += r
		}
		return out + `],"unreadable":0}}`
	}
	settled := func(outcome string) string { return fmt.Sprintf(`{"state":"settled","outcome":%q}`, outcome) }
	postDone := func(b *builder, worker, outcome string, call, ret int64) *builder {
		b.op(worker, Post, fmt.Sprintf(`{"kind":"worker-done","outcome":%q,"body":"done"}`, outcome), 200, `{"id":"m-d"}`, call, ret)
		b.ops[len(b.ops)-1].Run = "run-1"
		return b
	}
	for _, tc := range []struct {
		name string
		b    *builder
		want []string
	}{
		{"one row, agreeing, replayed", postDone(new(builder), "w-a", "succeeded", 1, 2).
			op("c", Next, mailBody("run-1", "c"), 200, batch("d-1", done("m-d", "w-a", "succeeded")), 3, 4).
			op("c", Next, mailBody("run-1", "c"), 200, batch("d-1", done("m-d", "w-a", "succeeded")), 5, 6).
			op("c", Observe, observeBody("w-a"), 200, settled("succeeded"), 7, 8), nil},
		{"the row says succeeded, observe cancelled", new(builder).
			op("c", Observe, observeBody("w-a"), 200, settled("cancelled"), 1, 2).
			op("c", Next, mailBody("run-1", "c"), 200, batch("d-1", done("m-d", "w-a", "succeeded")), 3, 4),
			[]string{"worker-done-differs"}},
		{"two rows", new(builder).
			op("c", Next, mailBody("run-1", "c"), 200, batch("d-1", done("m-d", "w-a", "failed"), done("m-e", "w-a", "failed")), 1, 2),
			[]string{"worker-done-differs"}},
		{"settled by a cancel, no row", new(builder).
			op("c", Observe, observeBody("w-a"), 200, settled("cancelled"), 1, 2).
			op("c", Observe, observeBody("w-a"), 200, settled("cancelled"), 5, 6), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.b.ops, Options{})
			var got []string
			for _, v := range r.Violations {
				if v.Invariant == "worker-done-differs" && !slices.Contains(got, v.Invariant) {
					got = append(got, v.Invariant)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v\n%s", got, tc.want, r)
			}
		})
	}
	// An accepted worker-done post that contradicts observe.
	b := postDone(new(builder), "w-a", "succeeded", 3, 4).
		op("c", Observe, observeBody("w-a"), 200, settled("cancelled"), 1, 2)
	r := Check(b.ops, Options{})
	if !slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Invariant == "worker-done-differs" }) {
		t.Fatalf("accepted post against observe: %s", r)
	}
}
