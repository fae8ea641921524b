package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workspace"
)

// endJail ends whatever of the agent still runs (jail.end), once. A
// failure is an error of the run, logged as one, and keeps the worktree
// out of reuse (workspace.MarkNotReusable): a process of the agent may
// still change it.
func (h *harness) endJail(ctx context.Context, j *jail) error {
	if j.ended {
		return j.endErr
	}
	j.ended = true
	j.endErr = j.end(ctx)
	if j.endErr != nil {
		h.log.Error("the agent's processes could not all be ended; its worktree is kept out of reuse", "err", j.endErr)
		if err := workspace.MarkNotReusable(h.cfg.Workspace, j.endErr.Error()); err != nil {
			h.log.Error("cannot keep the worktree out of reuse", "err", err)
		}
		j.endErr = galleyerr.E(galleyerr.Op("harness.end"), "ending the agent's processes", j.endErr)
	}
	return j.endErr
}

// notStarted reports that the agent never ran, so galley settles the
// worker failed.
// The reason, and what caused it (an error may quote a command line or a
// driver's settings), are redacted of every secret the harness holds and
// anything shaped like a credential before they are logged or reported.
func (h *harness) notStarted(ctx context.Context, reason string, cause error) error {
	msg := reason
	if cause != nil {
		msg += ": " + cause.Error()
	}
	msg = redactSecrets(msg, h.secrets()...)
	h.log.Error("the agent cannot start", "reason", msg)
	h.rep.report(workerapi.EventError, msg)
	if err := h.reportExited(ctx, CodeNotStarted, msg); err != nil {
		return err
	}
	// The caller logs the error: it carries the redacted text, and the
	// cause's kind.
	if cause == nil {
		return galleyerr.E(galleyerr.Op("harness.start"), msg)
	}
	return galleyerr.E(galleyerr.Op("harness.start"), galleyerr.KindOf(cause), msg)
}

// agentEnded handles the agent's exit: nothing to do after finish or a
// settle; otherwise galley hears the code and why.
func (h *harness) agentEnded(ctx context.Context, ps *os.ProcessState, waitErr error) error {
	switch {
	case h.finished.Load():
		h.log.Info("agent exited after reporting its outcome", "code", exitCode(ps))
		return nil
	case h.isSettled():
		h.log.Info("agent exited; the worker was already settled", "code", exitCode(ps))
		return nil
	}
	code := exitCode(ps)
	// The service opens the coordinator's row with the code
	// (service.AgentExitedBody); the reason says what it cannot know.
	var why []string
	if ps == nil {
		why = append(why, fmt.Sprintf("waiting for it failed: %v", waitErr))
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		why = append(why, fmt.Sprintf("it was killed by signal %v", ws.Signal()))
	}
	if tail := h.stderrTail(); tail != "" {
		why = append(why, "its stderr ended with:\n"+tail)
	}
	reason := strings.Join(why, "; ")
	h.log.Warn("agent ended without an outcome", "code", code, "reason", reason)
	return h.reportExited(ctx, code, reason)
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return CodeNotStarted
	}
	return ps.ExitCode()
}

// reportExited tells galley the agent ended without an outcome. It goes
// out even when ctx was cancelled: a runtime stopping the worker signals
// the harness and the agent together, and the report is the last thing the
// harness owes.
func (h *harness) reportExited(ctx context.Context, code int, reason string) error {
	// The usage is final once the worker settles: the model proxy's count
	// goes first.
	h.model.flush()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := h.untilReachable(ctx, "reporting the agent's exit", 30*time.Second, func(ctx context.Context) error {
		return h.api.Exited(ctx, code, reason)
	})
	switch {
	case err == nil:
		return nil
	case galleyerr.Is(galleyerr.Conflict, err):
		// galley takes one exit report: a 409 says it has one already
		// (this report's first attempt, its answer lost), so the harness
		// owes nothing more.
		h.log.Info("the agent's exit was already reported", "err", err)
		return nil
	}
	h.log.Error("cannot report the agent's exit", "err", err)
	return err
}

// awaitExit waits up to the stop grace for the agent to exit by itself.
func (h *harness) awaitExit(waited <-chan error) bool {
	t := time.NewTimer(h.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-waited:
		return true
	case <-t.C:
		return false
	}
}

// stopAgent asks the agent to stop, then kills it after the grace period.
func (h *harness) stopAgent(cmd *exec.Cmd, waited <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(h.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-waited:
	case <-t.C:
		h.log.Warn("the agent ignored SIGTERM; killing it")
		_ = cmd.Process.Kill()
		<-waited
	}
	h.log.Info("agent stopped", "code", exitCode(cmd.ProcessState))
}
