package service

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// The calls a worker's harness makes, each already authenticated as the
// worker handle (see AuthenticateWorker).

// MaxInboxWait bounds a harness's inbox long poll.
const MaxInboxWait = contract.AwaitCap

// WorkerSelf answers the worker's own launch facts.
func (s *Service) WorkerSelf(ctx context.Context, handle string) (workerapi.Self, error) {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return workerapi.Self{}, err
	}
	w := res.Worker
	if w == nil {
		return workerapi.Self{}, galleyerr.Errorf(galleyerr.NotFound, "no such worker")
	}
	self := workerapi.Self{Handle: handle, Run: w.Run, Task: w.Task, Role: w.Role, Brief: w.Brief,
		Branch: w.Branch, State: w.State, Outcome: w.Outcome, AgentUID: w.AgentUID, ReportEvents: s.events != nil}
	if w.Agent != nil {
		self.Agent = *w.Agent
	}
	if p := w.Park; p != nil {
		// The parked harness reads whether its parking landed; the
		// resumed one gets what it kept.
		self.Parked = p.Gen
		if !p.Resume.IsZero() {
			self.Resume = &workerapi.Resume{Parking: p.Gen, State: p.State}
		}
	}
	if w.Worktree != "" {
		// A launch makes its worktree under its own key, so a worktree
		// owned by another key is one the launch named as existing.
		wt, _, err := s.store.GetResource(ctx, protocol.KindWorktree, w.Worktree)
		switch {
		case err == nil:
			self.Worktree, self.WorktreeReused = w.Worktree, wt.Owner != res.Owner
		case !galleyerr.Is(galleyerr.NotFound, err):
			return workerapi.Self{}, err
		}
	}
	return self, nil
}

// WorkerReady records positive evidence that the agent runs. Only a
// starting worker becomes ready, or awaiting-reply when it has a question
// open (a worker resumed in its ask by a message: its agent waits on
// that question again); any other state stays, and a settled worker's
// report is refused (its credential only reads).
func (s *Service) WorkerReady(ctx context.Context, handle, evidence string) error {
	_, err := s.updateWorkerWhy(ctx, handle, evidence, func(w *store.Worker) error {
		if w.State == protocol.StateSettled {
			return errSettled
		}
		if w.State != protocol.StateStarting {
			return errNoChange
		}
		w.State = protocol.StateReady
		if hasOpenQuestion(w) {
			w.State = protocol.StateAwaitingReply
		}
		return nil
	})
	if err == nil {
		s.log.Info("worker ready", "worker", handle, "evidence", truncate(evidence, 200))
	}
	return err
}

// WorkerPost appends one row to the worker's run mailbox and answers its id.
// A post retried with the same client id (its answer was lost, or a write
// after the append failed) makes the same row id, and the store appends a
// row once per id: the retry finds the row where the first try put it and
// completes what that try left undone (the settle, the ring), so the
// coordinator never gets the row twice.
func (s *Service) WorkerPost(ctx context.Context, handle string, req workerapi.PostRequest) (workerapi.PostAnswer, error) {
	if err := checkPost(req); err != nil {
		return workerapi.PostAnswer{}, err
	}
	if req.Kind != protocol.MsgWorkerDone {
		// Before any store read, so that a flood costs the store nothing.
		// The report that settles the worker is never refused for its
		// budget: it ends the flood.
		if err := s.budgets.take(handle, len(req.Subject)+len(req.Body), s.clock.Now()); err != nil {
			return workerapi.PostAnswer{}, err
		}
	}
	if req.Kind == protocol.MsgWorkerDone {
		return s.postDone(ctx, handle, req)
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return workerapi.PostAnswer{}, err
	}
	if res.Released || res.Worker == nil {
		return workerapi.PostAnswer{}, galleyerr.Errorf(galleyerr.Conflict, "worker was released")
	}
	if res.Worker.State == protocol.StateSettled {
		return workerapi.PostAnswer{}, errSettled
	}
	id := newMessageID()
	if req.ClientID != "" {
		id = s.derive("msg-", handle+"\x00"+req.ClientID)
	}
	coalesced, err := s.reserveRow(ctx, handle, res.Worker.Run, id, req)
	if err != nil {
		return workerapi.PostAnswer{}, err
	}
	if coalesced != "" {
		return workerapi.PostAnswer{ID: coalesced}, nil
	}
	worker := s.resource(protocol.KindWorker, handle)
	row := protocol.MailMessage{ID: id, Kind: req.Kind, Worker: &worker, Subject: req.Subject, Body: req.Body}
	seq, existed, err := s.store.AppendMessage(ctx, res.Worker.Run, store.Message{Row: row, At: s.clock.Now()})
	if err != nil {
		return workerapi.PostAnswer{}, err
	}
	if existed {
		s.log.Info("a retried post found its row appended", "worker", handle, "id", id, "kind", req.Kind)
	} else {
		s.event(handle, eventlog.KindMailbox, firstOf(req.Subject, req.Body), "kind", req.Kind, "id", id)
	}
	s.notePending(ctx, handle, id, seq)
	switch req.Kind {
	case protocol.MsgQuestion, protocol.MsgEscalation:
		s.ring(ctx, runTopic(res.Worker.Run))
	}
	return workerapi.PostAnswer{ID: id}, nil
}

// A worker's worker-done row agrees with observe (issue 13, item 5): the
// worker record decides, in the one conditional write that settles it, and
// the row is derived from the record that won. The settle that owes a row
// (the worker's own worker-done, or its compute ending without one) lists
// it on the record (Pending, kind worker-done, Seq 0 until appended); the
// row's id is derived from the handle alone and its outcome is the
// record's, so the harness's post, its retries and the runtime's exit all
// append the same row, once (the store appends an id once per run), and
// whichever finds it owed completes it. A cancel or release settles
// without a row: kitchn asked for it, and a worker-done posted after it
// is refused.

// doneRowID is the id of the worker's one worker-done row.
func (s *Service) doneRowID(handle string) string { return s.derive("msg-", "worker-done\x00"+handle) }

// owedDone answers the record's entry for the worker-done row its settle
// owes, if any.
func owedDone(w *store.Worker) (store.PendingRow, bool) {
	for _, p := range w.Pending {
		if p.Kind == protocol.MsgWorkerDone {
			return p, true
		}
	}
	return store.PendingRow{}, false
}

// postDone is the worker's own worker-done: it settles the worker with the
// reported outcome unless it settled already, then appends the row. A post
// that finds the worker settled with the same outcome and a row owed (its
// own retry, or an exit report that came first) completes that row and
// answers its id; one that finds it settled otherwise (cancelled, another
// outcome) is refused and appends nothing.
func (s *Service) postDone(ctx context.Context, handle string, req workerapi.PostRequest) (workerapi.PostAnswer, error) {
	res, err := s.settleRecord(ctx, handle, req.Outcome, settleOwn, false)
	if galleyerr.Is(galleyerr.Invalid, err) {
		return workerapi.PostAnswer{}, galleyerr.Errorf(galleyerr.Conflict, "worker was released")
	}
	if err != nil {
		return workerapi.PostAnswer{}, err
	}
	if _, owed := owedDone(res.Worker); !owed || res.Worker.Outcome != req.Outcome {
		return workerapi.PostAnswer{}, errSettled
	}
	id, err := s.appendDone(ctx, handle, res, req.Subject, req.Body)
	if err != nil {
		return workerapi.PostAnswer{}, err
	}
	return workerapi.PostAnswer{ID: id}, nil
}

// appendDone appends the worker-done row res's record owes, with the
// record's outcome (a row already appended stays as it is), records its
// sequence and rings the run.
func (s *Service) appendDone(ctx context.Context, handle string, res store.Resource, subject, body string) (string, error) {
	id := s.doneRowID(handle)
	if p, _ := owedDone(res.Worker); p.Seq > 0 {
		return id, nil
	}
	worker := s.resource(protocol.KindWorker, handle)
	row := protocol.MailMessage{ID: id, Kind: protocol.MsgWorkerDone, Worker: &worker, Subject: subject, Body: body, Outcome: res.Worker.Outcome}
	seq, existed, err := s.store.AppendMessage(ctx, res.Worker.Run, store.Message{Row: row, At: s.clock.Now()})
	if err != nil {
		return "", err
	}
	if existed {
		s.log.Info("a worker-done row was found appended", "worker", handle)
	} else {
		s.event(handle, eventlog.KindMailbox, firstOf(subject, body), "kind", protocol.MsgWorkerDone, "id", id, "outcome", res.Worker.Outcome)
	}
	s.notePending(ctx, handle, id, seq)
	s.ring(ctx, runTopic(res.Worker.Run))
	return id, nil
}

// A reply answered applied reaches the agent exactly once (issue 13, item
// 3). The record names the one inbox copy that delivers the answer (its
// sequence, after the digest), so a copy a reader skipped (unrecorded when
// its hold ran out, and perhaps passed by the harness's cursor since) can
// never become the delivered one: a retry appends a fresh copy, past any
// cursor, and names that. A copy is named only while no reader can have
// skipped it by the time the record is written: within a lease (less the
// clock skew) of its append, as a holder's work ends within its lease and
// readers hold a copy for two.

// WorkerUsage records the agent's usage report; what the worker did not
// report stays out. A settled worker's usage is final: only a worker that
// settled by its own worker-done may send one more report (its agent's
// last turn ends after the finish), within FinalReportGrace; anything later
// is refused.
func (s *Service) WorkerUsage(ctx context.Context, handle string, report protocol.UsageReport) error {
	if report.Source == "" {
		report.Source = handle
	}
	if report.Agent != "claude" && report.Agent != "codex" {
		report.Agent = ""
	}
	if err := protocol.ValidUsageReport(report); err != nil {
		return err
	}
	_, err := s.updateWorker(ctx, handle, func(w *store.Worker) error {
		if w.State == protocol.StateSettled {
			if w.FinalReportUntil.IsZero() || s.clock.Now().After(w.FinalReportUntil) {
				return galleyerr.Errorf(galleyerr.Conflict, "worker has settled; its usage is final")
			}
			w.FinalReportUntil = time.Time{}
		}
		w.Usage = &report
		return nil
	})
	if err == nil {
		s.event(handle, eventlog.KindUsage, "", usageFields(report)...)
	}
	return err
}

// usageFields are a usage report's totals as event fields.
func usageFields(u protocol.UsageReport) []string {
	var kv []string
	if t := u.Tokens; t != nil {
		for _, f := range []struct {
			name string
			n    *int64
		}{{"input", t.Input}, {"output", t.Output}, {"cacheRead", t.CacheRead}, {"cacheWrite", t.CacheWrite}} {
			if f.n != nil {
				kv = append(kv, f.name, strconv.FormatInt(*f.n, 10))
			}
		}
	}
	if c := u.Cost; c != nil {
		kv = append(kv, "costMicroUsd", strconv.FormatInt(c.Amount, 10), "costBasis", c.Basis)
	}
	return append(kv, "model", u.Model)
}

// firstOf is the first of its arguments that is not blank.
func firstOf(vs ...string) string {
	for _, v := range vs {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// WorkerExitReport is the harness's exit report: WorkerExited, once. A
// second report (the worker's own, or one after the runtime recorded the
// exit) is refused.
func (s *Service) WorkerExitReport(ctx context.Context, handle string, code int, reason string) error {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return err
	}
	if res.Worker != nil && res.Worker.Exited {
		return galleyerr.Errorf(galleyerr.Conflict, "the worker's exit was already reported")
	}
	if res.Worker.Parked() {
		// Its harness parked it: the end is the parking's.
		return galleyerr.Errorf(galleyerr.Conflict, "the worker is parked")
	}
	// The report comes from the worker's current compute (an earlier
	// one's credential is void), so it is never an earlier one's news.
	return s.workerExited(ctx, handle, code, reason, false)
}

// WorkerExited records that the agent ended without reporting an outcome:
// the worker settles failed, and its coordinator is told why. For a worker
// that parked, the end of its compute may be the parking's, or an earlier
// compute's (parkedExit).
func (s *Service) WorkerExited(ctx context.Context, handle string, code int, reason string) error {
	return s.workerExited(ctx, handle, code, reason, true)
}

func (s *Service) workerExited(ctx context.Context, handle string, code int, reason string, fromRuntime bool) error {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return err
	}
	if res.Worker == nil {
		return galleyerr.Errorf(galleyerr.NotFound, "no such worker")
	}
	if fromRuntime && !res.Released && s.parkedExit(ctx, res) {
		return nil
	}
	reported := res.Worker.State == protocol.StateSettled
	if !res.Worker.Exited {
		s.event(handle, eventlog.KindCompute, reason, "event", "stopped", "code", strconv.Itoa(code))
	}
	res, err = s.settleRecord(ctx, handle, protocol.OutcomeFailed, settleExited, false)
	if err != nil {
		return err
	}
	p, owed := owedDone(res.Worker)
	if !owed || p.Seq > 0 {
		return nil // settled by a cancel, or its row is in the mailbox
	}
	// This exit settled the worker, or the worker settled by its own
	// worker-done whose row never came (its harness stopped first): the
	// coordinator gets the one row, with the record's outcome.
	body := AgentExitedBody(code)
	if reported || res.Worker.Outcome != protocol.OutcomeFailed {
		body = fmt.Sprintf("the worker reported %s, but its harness stopped (code %d) before its report reached the mailbox", res.Worker.Outcome, code)
	}
	if reason != "" {
		body += ": " + truncate(reason, 1024)
	}
	_, err = s.appendDone(ctx, handle, res, "", body)
	return err
}

// WorkerEvents records what the worker's harness saw in its event log:
// warnings and errors as such, anything else as a harness event. The log
// cuts each; a request of more than workerapi.MaxEventsPerRequest is
// refused.
func (s *Service) WorkerEvents(ctx context.Context, handle string, evs []workerapi.HarnessEvent) error {
	if len(evs) > workerapi.MaxEventsPerRequest {
		return galleyerr.Errorf(galleyerr.Invalid, "at most %d events a request", workerapi.MaxEventsPerRequest)
	}
	for _, e := range evs {
		kind := eventlog.KindHarness
		switch e.Event {
		case workerapi.EventWarning:
			kind = eventlog.KindWarning
		case workerapi.EventError:
			kind = eventlog.KindError
		}
		if s.events == nil {
			continue
		}
		f := make(map[string]string, len(e.Fields)+1)
		for k, v := range e.Fields {
			f[k] = v
		}
		f["event"] = e.Event
		at := s.clock.Now()
		if !e.At.IsZero() && e.At.Before(at) && at.Sub(e.At) < time.Hour {
			at = e.At
		}
		s.events.Record(handle, store.Event{At: at, Kind: kind, Text: e.Text, Fields: f})
	}
	return nil
}

func checkPost(req workerapi.PostRequest) error {
	switch req.Kind {
	case protocol.MsgQuestion, protocol.MsgEscalation, protocol.MsgHeartbeat, protocol.MsgStatus:
		if req.Outcome != "" {
			return galleyerr.Errorf(galleyerr.Invalid, "outcome belongs only on worker-done")
		}
	case protocol.MsgWorkerDone:
		switch req.Outcome {
		case protocol.OutcomeSucceeded, protocol.OutcomeFailed, protocol.OutcomeCancelled:
		default:
			return galleyerr.Errorf(galleyerr.Invalid, "worker-done needs outcome succeeded, failed or cancelled")
		}
	default:
		return galleyerr.Errorf(galleyerr.Invalid, "unknown message kind %s", quoteShort(req.Kind))
	}
	if len(req.ClientID) > 128 {
		return galleyerr.Errorf(galleyerr.Invalid, "clientId longer than 128 bytes")
	}
	if req.Kind == protocol.MsgQuestion && req.Body == "" {
		return galleyerr.Errorf(galleyerr.Invalid, "a question needs a body")
	}
	for name, v := range map[string]string{"subject": req.Subject, "body": req.Body} {
		if len(v) > 64<<10 || !utf8.ValidString(v) {
			return galleyerr.Errorf(galleyerr.Invalid, "%s must be UTF-8 text of at most 64 KiB", name)
		}
		for i := 0; i < len(v); i++ {
			if v[i] == 0 {
				return galleyerr.Errorf(galleyerr.Invalid, "%s contains NUL", name)
			}
		}
	}
	return nil
}

func newMessageID() string { return "msg-" + randomHex(10) }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// AgentExitedBody is the body of the worker-done row galley writes for a
// worker whose agent exited with code before reporting an outcome (a
// reason may follow it after ": "); a negative code is an agent that
// never ran or whose end the harness did not see. The load driver reads
// it to know a scripted exit was reached.
func AgentExitedBody(code int) string {
	if code < 0 {
		return "the agent ended without reporting an outcome"
	}
	return fmt.Sprintf("the agent exited with code %d without reporting an outcome", code)
}
