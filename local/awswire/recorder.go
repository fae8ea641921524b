package awswire

import "sync"

// Recorder keeps a stand-in's records of the requests it received, in
// order (its Request type: what a test may assert on, and nothing a
// stand-in must not keep, such as a secret value). The zero value is empty
// and ready.
type Recorder[R any] struct {
	mu sync.Mutex
	rs []R
}

// Add records r after the others.
func (rc *Recorder[R]) Add(r R) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.rs = append(rc.rs, r)
}

// All returns the records keep accepts (every record when keep is nil),
// in order.
func (rc *Recorder[R]) All(keep func(R) bool) []R {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []R
	for _, r := range rc.rs {
		if keep == nil || keep(r) {
			out = append(out, r)
		}
	}
	return out
}
