package conformance

import (
	"fmt"
	"time"
)

// Status of one check.
type Status string

const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Result is one check's outcome.
type Result struct {
	Name    string
	Effects bool
	Status  Status
	Reason  string // why it failed or was skipped
	Elapsed time.Duration
}

// String is the result's output line: "PASS name (12ms)", "FAIL name:
// reason" or "SKIP name: reason".
func (r Result) String() string {
	if r.Status == Pass {
		return fmt.Sprintf("PASS %s (%s)", r.Name, r.Elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s %s: %s", r.Status, r.Name, r.Reason)
}

// Report is a whole run.
type Report struct {
	Results []Result
	// Notes are facts worth an operator's attention that are no check's
	// result, such as a worker the clean-up could not cancel.
	Notes []string
	// Err is set when the run could not start (a bad Config).
	Err error
}

// Counts tallies the results.
func (r Report) Counts() (passed, failed, skipped int) {
	for _, x := range r.Results {
		switch x.Status {
		case Pass:
			passed++
		case Fail:
			failed++
		case Skip:
			skipped++
		}
	}
	return
}

// Summary is the closing line: "N passed, N failed", plus ", N skipped"
// when any were.
func (r Report) Summary() string {
	p, f, s := r.Counts()
	out := fmt.Sprintf("%d passed, %d failed", p, f)
	if s > 0 {
		out += fmt.Sprintf(", %d skipped", s)
	}
	return out
}

// OK reports whether the run started and no check failed.
func (r Report) OK() bool {
	_, f, _ := r.Counts()
	return r.Err == nil && f == 0
}
