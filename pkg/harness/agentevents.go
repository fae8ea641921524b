package harness

import (
	"context"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
)

// UsageEvents is implemented by the Events the harness gives a driver. A
// driver that reads usage from the agent's own report (rather than from
// the report_usage tool) type-asserts its Events to it and reports there.
type UsageEvents interface {
	Events
	// Usage reports the agent's usage so far; galley keeps the latest. The
	// harness sets Source (the worker handle) and, for claude and codex,
	// Agent; Model defaults to the launch's model. Tokens and Cost are the
	// driver's; what it does not know it leaves nil.
	Usage(rep protocol.UsageReport)
	// Agent is the launch's agent selection (family resolved).
	Agent() protocol.AgentSelection
}

// events is the harness's side of a driver's Events.
type events struct{ h *harness }

// Started reports ready, and on failure retries in the background until it
// is reported or the run ends, so the driver keeps reading the agent's
// output.
func (e events) Started(evidence string) {
	if e.h.ensureReady(e.h.ctx, evidence) {
		return
	}
	go func() {
		retry := time.Second
		for !e.h.ensureReady(e.h.ctx, evidence) {
			if sleepCtx(e.h.ctx, retry) != nil {
				return
			}
			retry = min(retry*2, 30*time.Second)
		}
	}()
}

func (e events) Note(msg string, args ...any) {
	e.h.log.Info(msg, append([]any{"source", "agent"}, args...)...)
}

// Agent implements UsageEvents.
func (e events) Agent() protocol.AgentSelection { return e.h.self.Agent }

// Usage implements UsageEvents. A report galley would refuse is logged and
// dropped; a failed call is logged (the client has retried).
func (e events) Usage(rep protocol.UsageReport) {
	h := e.h
	if h.model != nil {
		// The model proxy counts what the provider says; the CLI's own
		// count is not what galley reports.
		h.log.Debug("the CLI's usage report, not reported (the model proxy counts)", "usage", rep)
		return
	}
	rep.Source = h.self.Handle
	rep.Agent = ""
	if fam := h.self.Agent.Agent; fam == "claude" || fam == "codex" {
		rep.Agent = fam
		if rep.Model == "" {
			rep.Model = h.self.Agent.Model
		}
	} else {
		rep.Model = ""
	}
	if err := protocol.ValidUsageReport(rep); err != nil {
		h.log.Warn("dropping an invalid usage report", "err", err)
		return
	}
	// The agent's final report often comes as it exits, when the run's
	// context may already be ending: the report is still owed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), 30*time.Second)
	defer cancel()
	if err := h.api.Usage(ctx, rep); err != nil {
		h.log.Error("cannot report usage", "err", err)
		return
	}
	h.log.Info("usage reported", "usage", rep)
}
