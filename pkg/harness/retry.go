package harness

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// SelfPatience bounds how long a starting harness tries to read its launch
// facts while galley is unreachable.
const SelfPatience = 2 * time.Minute

// untilReachable calls f until it succeeds, fails for another reason than
// galley being unreachable (Unavailable: no connection, 5xx), patience has
// passed or ctx ends. The client's own retries span a few seconds; a
// server restarting takes longer, and a harness that gave up on reading its
// launch facts or on its exit report would end without a word that
// anything hears: a runtime that restarted does not watch the harnesses an
// earlier one started, so their worker would stay unsettled.
func (h *harness) untilReachable(ctx context.Context, what string, patience time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(patience)
	for retry := 250 * time.Millisecond; ; retry = min(retry*2, 10*time.Second) {
		err := f(ctx)
		if err == nil || !galleyerr.Is(galleyerr.Unavailable, err) || ctx.Err() != nil || time.Now().Add(retry).After(deadline) {
			return err
		}
		h.log.Warn(what+" failed; retrying", "err", err, "in", retry)
		if sleepCtx(ctx, retry) != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
