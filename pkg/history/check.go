package history

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Violation is one broken invariant, with the ops that show it.
type Violation struct {
	// Invariant is a short name such as "receipt-changed" or
	// "message-lost"; Invariants lists them all.
	Invariant string
	Detail    string
	Ops       []int
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (ops %v)", v.Invariant, v.Detail, v.Ops)
}

// Invariants names what Check checks, with the design invariant each
// stands for.
var Invariants = map[string]string{
	"receipt-changed":     "2: an applied key's receipt is the same in every answer, lookup and resubmission",
	"key-reused-applied":  "4: a key reused with another payload applies nothing",
	"duplicate-worker":    "1: one worker per key",
	"duplicate-branch":    "1: one branch per key",
	"absent-broken":       "3: absent is a promise that no copy that arrived before it applies",
	"not-applied-broken":  "4: not-applied is a promise that nothing happened and nothing will",
	"applied-lost":        "11: a resource an applied launch created stays in the inventory until released",
	"replay-differs":      "5: an unacknowledged batch replays identically",
	"batch-reused":        "5: a batch id is never reused",
	"message-lost":        "5: every message posted is delivered at least once",
	"order":               "5: messages keep the order each worker posted them",
	"fenced-not-enforced": "6: after an adoption every call from a superseded coordinator answers fenced",
	"adopted-back":        "6: a superseded coordinator never adopts back",
	"new-adopter-fenced":  "6: a new coordinator can adopt",
	"cancel-not-settled":  "7: a cancelled worker reads settled on the very next observe",
	"settled-changed":     "7: a settled worker never changes state again",
	"phantom-settled":     "7: no record is never read as settled",
	"worker-done-differs": "7: a worker has at most one worker-done row, and its outcome (and that of an accepted worker-done post) is the settled outcome observe reads",
	"released-revived":    "7: a released worker never changes state again (observe reads missing, the inventory leaves it out)",
	"not-linearizable":    "5, 6: the mailbox history is linearizable against the sequential model",
}

// DefaultLinearizeTimeout bounds the linearizability search. The bound is
// wall-clock (porcupine has no other), so it is set for a busy machine: a
// history that a quiet one checks in seconds took over a minute at a load
// average of 25 on 2 cores. A check that passes returns as soon as it
// has; only a search that would not end waits this long.
const DefaultLinearizeTimeout = 5 * time.Minute

// Options tune Check.
type Options struct {
	// Linearizability runs the porcupine check of the mailbox, bounded by
	// LinearizeTimeout (default DefaultLinearizeTimeout). A check that
	// times out is reported in Report.Unknown, not as a violation.
	Linearizability  bool
	LinearizeTimeout time.Duration
}

// Report is what Check found.
type Report struct {
	Ops        int
	Violations []Violation
	// Checked counts, per invariant, how many facts were checked (answers
	// compared, promises, posts), so a pass over nothing shows as such.
	Checked map[string]int
	// Unknown lists checks that could not conclude (a linearizability
	// check that ran out of time).
	Unknown []string
}

// OK reports whether no invariant was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d ops; %d violations\n", r.Ops, len(r.Violations))
	names := make([]string, 0, len(r.Checked))
	for k := range r.Checked {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "  checked %-20s %d\n", k, r.Checked[k])
	}
	for _, u := range r.Unknown {
		fmt.Fprintf(&b, "  unknown: %s\n", u)
	}
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  ... %d more\n", len(r.Violations)-i)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	return b.String()
}

// Check runs every checker on a history.
func Check(ops []Op, opt Options) Report {
	ix := newIndex(ops)
	r := Report{Ops: len(ops), Checked: map[string]int{}}
	for _, c := range []func(*index, *Report){
		checkReceipts, checkPromises, checkInventory, checkBatches, checkDelivery, checkFencing, checkWorkers,
		checkGone,
		checkWorkerDone,
	} {
		c(ix, &r)
	}
	if opt.Linearizability {
		timeout := opt.LinearizeTimeout
		if timeout <= 0 {
			timeout = DefaultLinearizeTimeout
		}
		res := Linearizable(ops, timeout)
		r.Checked["linearizable"] = res.Ops
		switch {
		case res.Unknown:
			r.Unknown = append(r.Unknown, "linearizability: timed out after "+timeout.String())
		case !res.OK:
			r.Violations = append(r.Violations, Violation{Invariant: "not-linearizable", Detail: res.Detail, Ops: res.Bad})
		}
	}
	return r
}

func (r *Report) add(invariant string, ops []int, format string, args ...any) {
	r.Violations = append(r.Violations, Violation{Invariant: invariant, Detail: fmt.Sprintf(format, args...), Ops: ops})
}
