package awswire

import "sync"

// Fault is an answer a Service gives instead of serving a call: Err, or,
// when Err is nil, Out with HTTP 200 (as ECS answers a RunTask it could
// not place: no task, a failures entry).
type Fault struct {
	// Op is the operation it answers, such as "RunTask"; empty: any.
	Op  string
	Err *Error
	Out any
	// Times is how many calls it answers; 0 means every call until
	// cleared.
	Times int
}

// Faults is a queue of faults: the first injected that answers a call's
// operation answers it. The zero value is empty and ready.
type Faults struct {
	mu sync.Mutex
	q  []*Fault
}

// Inject adds f behind the faults already queued.
func (fs *Faults) Inject(f Fault) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.q = append(fs.q, &f)
}

// Clear removes every fault.
func (fs *Faults) Clear() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.q = nil
}

// Take returns the fault that answers a call of op, if any, counting the
// call against its Times.
func (fs *Faults) Take(op string) (Fault, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for i, f := range fs.q {
		if f.Op != "" && f.Op != op {
			continue
		}
		answer := *f
		if f.Times > 0 {
			if f.Times--; f.Times == 0 {
				fs.q = append(fs.q[:i:i], fs.q[i+1:]...)
			}
		}
		return answer, true
	}
	return Fault{}, false
}
