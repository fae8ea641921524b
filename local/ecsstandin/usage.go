package ecsstandin

import "time"

// TaskUsage is what Fargate bills of the stand-in's tasks so far.
type TaskUsage struct {
	// Started counts the tasks created (RunTask), Running those not yet
	// stopped.
	Started, Running int
	// TaskSeconds is the tasks' billed time up to now: from when each
	// began pulling its image (created, for one not launched yet) to when
	// it stopped, or to now. Fargate rounds each task up to the second
	// with a one-minute minimum; the sum here is exact, so that a window's
	// share is the difference of two readings.
	TaskSeconds float64
}

// Usage reports the tasks' counts and billed time up to now.
func (s *Server) Usage() TaskUsage {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var u TaskUsage
	for _, t := range s.order {
		u.Started++
		from, to := t.pullStartedAt, t.stoppedAt
		if from.IsZero() {
			from = t.createdAt
		}
		if to.IsZero() {
			u.Running++
			to = now
		}
		if to.After(from) {
			u.TaskSeconds += to.Sub(from).Seconds()
		}
	}
	return u
}
