package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/galley-run/galley/pkg/snapshot"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Resuming a parked worker (docs/parking.md): galley started this harness
// because input came for a worker an earlier harness parked. Self's
// Resume holds that harness's state: the driver's resume fact, the
// question the agent waited on, the inbox cursor and the session archive.

// ResumeEvents is an Events that takes a driver's resume fact: where its
// agent is (the scripted agent's line, a CLI's session id), which a
// parking keeps and ResumeCommand is given back. A driver tells it with
// TellResumable.
type ResumeEvents interface {
	Resumable(fact string)
}

// TellResumable tells ev the agent's resume fact, if ev takes one.
func TellResumable(ev Events, fact string) {
	if r, ok := ev.(ResumeEvents); ok {
		r.Resumable(fact)
	}
}

// Resumable implements ResumeEvents.
func (e events) Resumable(fact string) { e.h.tellFact(fact) }

// tellFact takes the driver's resume fact if its Parker takes it; a
// refused fact is dropped with the one before it, so the agent is not
// parked until its driver tells a good one.
func (h *harness) tellFact(fact string) {
	p, ok := h.driver.(Parker)
	if !ok {
		return
	}
	if err := p.CheckResumeFact(fact); err != nil {
		h.log.Warn("the agent's resume fact is refused; it is not parked until its driver tells a good one", "err", err)
		h.parks.setFact("")
		return
	}
	h.parks.setFact(fact)
}

// PromptResumer is a Parker whose resumed agent takes what woke it as its
// next prompt, from wait_message, rather than asking its question again:
// the CLIs' session supervisor, whose CLI's blocked call ended with it. The
// reply to the question it was parked in then comes as a message.
type PromptResumer interface {
	Parker
	ResumesFromMessages() bool
}

// wakeAsMessage readies the inbox of a resumed agent that takes what woke
// it as a message (PromptResumer): the reply to its parked question comes
// as one, and its question is not re-attached.
func (h *harness) wakeAsMessage(driver Driver) {
	st := h.resumed
	if st == nil || st.Wait != ToolAsk || st.Question == "" {
		return
	}
	if p, ok := driver.(PromptResumer); !ok || !p.ResumesFromMessages() {
		return
	}
	h.box.wokeBy(st.Question, st.Subject)
	h.parks.mu.Lock()
	h.reattached = true
	h.parks.mu.Unlock()
}

// resumeFrom reads a resumed harness's state from self and sets the inbox
// cursor it starts at. nil for a harness that resumes nothing.
func (h *harness) resumeFrom(self workerapi.Self) (*parkState, error) {
	if self.Resume == nil {
		return nil, nil
	}
	var st parkState
	if err := json.Unmarshal(self.Resume.State, &st); err != nil || st.V != 1 {
		return nil, fmt.Errorf("the parked harness's state is unreadable (version %d): %v", st.V, err)
	}
	if p, ok := h.driver.(Parker); ok {
		if err := p.CheckResumeFact(st.Fact); err != nil {
			return nil, fmt.Errorf("the parked harness's resume fact is refused: %w", err)
		}
	}
	h.box.startAt(st.From)
	// Should it park again before its driver says where it is.
	h.parks.setFact(st.Fact)
	h.log.Info("resuming a parked worker", "parking", self.Resume.Parking, "wait", st.Wait, "question", st.Question, "from", st.From)
	return &st, nil
}

// resumeCommand builds the command that resumes the parked agent.
func (h *harness) resumeCommand(driver Driver, st *parkState, mcpURL, mcpSecret string) (*exec.Cmd, error) {
	p, ok := driver.(Parker)
	if !ok {
		return nil, errors.New("the driver of agent family " + h.self.Agent.Agent + " cannot resume a parked agent")
	}
	return p.ResumeCommand(h.self, mcpURL, mcpSecret, h.cfg.Workspace, st.Fact)
}

// restoreSession puts the parked agent's session files back into its home,
// as its own (AsOwner under uid confinement): the archive is the agent's,
// and is read as such (pkg/snapshot refuses links, "..", devices and
// anything past the budget).
func (h *harness) restoreSession(ctx context.Context, driver Driver, st *parkState, j *jail) error {
	if st == nil || st.Session == "" {
		return nil
	}
	p, ok := driver.(Parker)
	if !ok || p.SessionDir() == "" {
		return nil
	}
	if h.cfg.Parks == nil {
		return errors.New("the parked agent's session files were saved, and this harness has no park store to read them from")
	}
	dst := sessionPath(j, p.SessionDir())
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	var opts []snapshot.RestoreOption
	if j.mode == ConfineUser {
		opts = append(opts, snapshot.AsOwner(j.uid, j.gid))
		if err := chownTree(filepath.Dir(dst), j.uid, j.gid); err != nil {
			return err
		}
	}
	stats, err := snapshot.RestoreFrom(ctx, h.cfg.Parks, st.Session, dst, h.parkLimits(), opts...)
	if err != nil {
		return fmt.Errorf("restoring the parked agent's session files: %w", err)
	}
	h.log.Info("session files restored", "files", stats.Files, "bytes", stats.Bytes)
	return nil
}

// reattach answers the question a resumed agent's ask_coordinator takes
// the reply of, instead of asking again: the question the parked agent
// waited on, for the first ask with the same subject and body.
func (h *harness) reattach(subject, body string) (string, bool) {
	h.parks.mu.Lock()
	defer h.parks.mu.Unlock()
	st := h.resumed
	if st == nil || st.Wait != ToolAsk || st.Question == "" || h.reattached || st.AskDigest != askDigest(subject, body) {
		return "", false
	}
	h.reattached = true
	return st.Question, true
}
