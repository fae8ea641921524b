package sqsbell

import "time"

// WithAfter replaces the bell's pauses (after a failure, between looks at
// a queue holding only rings already woken on) so that tests fire them.
func WithAfter(after func(time.Duration) <-chan time.Time) Option {
	return func(b *Bell) { b.after = after }
}
