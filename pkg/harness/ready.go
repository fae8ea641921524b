package harness

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// ensureReady reports ready once, on the first evidence that the agent
// runs. A failure is logged; the next evidence tries again.
func (h *harness) ensureReady(ctx context.Context, evidence string) bool {
	h.readyMu.Lock()
	defer h.readyMu.Unlock()
	if h.ready {
		return true
	}
	if err := h.api.Ready(ctx, evidence); err != nil {
		h.log.Error("cannot report ready", "evidence", evidence, "err", err)
		return false
	}
	h.ready = true
	h.log.Info("ready reported", "evidence", evidence)
	go h.heartbeats(h.ctx)
	return true
}

// heartbeats posts a heartbeat every interval until ctx ends.
func (h *harness) heartbeats(ctx context.Context) {
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := h.api.Post(ctx, workerapi.PostRequest{Kind: protocol.MsgHeartbeat}); err != nil && ctx.Err() == nil {
				h.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}
