package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// The mailbox (design invariants 5 and 6). Each run has a head record: the
// reader and its epoch, the coordinators superseded by adoptions, the last
// consumed sequence and the sealed batch. Messages are immutable rows with
// a gap-free per-run sequence. Every change to the head is a conditional
// write on the version read, so an acknowledgement racing an adoption loses
// and re-reads as fenced; reads that change nothing linearize at their read.

const (
	maxBatchMessages = 64
	// maxBatchBytes keeps a delivery well inside the 1 MiB the client reads.
	maxBatchBytes = 768 << 10
)

var (
	answerEmpty  = protocol.MailboxAnswer{Status: protocol.MailEmpty}
	answerFenced = protocol.MailboxAnswer{Status: protocol.MailFenced}
)

// Next reads the oldest unacknowledged batch without consuming it.
func (s *Service) Next(ctx context.Context, run, coordinator string) (protocol.MailboxAnswer, error) {
	ans, _, err := s.read(ctx, run, coordinator, false)
	return ans, err
}

// Acknowledge consumes the batch with that id if it is the current one,
// then reads the next. Any other id consumes nothing.
func (s *Service) Acknowledge(ctx context.Context, run, coordinator, batch string) (protocol.MailboxAnswer, error) {
	for range claimAttempts {
		head, ver, err := s.store.GetMailbox(ctx, run)
		if err != nil {
			return protocol.MailboxAnswer{}, err
		}
		if fenced(head, coordinator) {
			return answerFenced, nil
		}
		if head.Batch == nil || head.Batch.ID != batch {
			break
		}
		head.Acked, head.Batch = head.Batch.To, nil
		noteSeen(&head, coordinator)
		if _, err = s.store.PutMailbox(ctx, head, ver); err == nil {
			break
		} else if !galleyerr.Is(galleyerr.Conflict, err) {
			return protocol.MailboxAnswer{}, err
		}
	}
	return s.Next(ctx, run, coordinator)
}

// Await is Next held up to wait (capped by AwaitCap) until a batch with a
// question, a worker-done report or an escalation waits. It is woken by
// the run's doorbell and re-reads the store after every ring and at its
// deadline, so a lost ring costs latency, never a message.
func (s *Service) Await(ctx context.Context, run, coordinator string, wait time.Duration) (protocol.MailboxAnswer, error) {
	var ans protocol.MailboxAnswer
	deadline := s.clock.Now().Add(min(max(wait, 0), s.cfg.AwaitCap))
	err := s.waitFor(ctx, runTopic(run), deadline, func(last bool) (bool, error) {
		var ready bool
		var err error
		// At the deadline, answer as next would, sealing what is pending.
		ans, ready, err = s.read(ctx, run, coordinator, !last)
		return ready || last, err
	})
	return ans, err
}

// waitFor calls check until it reports done, listening on topic so that a
// ring wakes it at once, and calls it a last time (last=true) at deadline
// or once the service is drained.
// It listens before the first check, so a ring between a check and the wait
// is not missed; a lost ring delays an answer until the deadline, never
// loses one.
func (s *Service) waitFor(ctx context.Context, topic string, deadline time.Time, check func(last bool) (bool, error)) error {
	l, err := s.bell.Listen(ctx, topic)
	if err != nil {
		// Without a doorbell the call still answers correctly, just late.
		s.log.Warn("doorbell listen failed", "topic", topic, "err", err)
		l = nil
	}
	if l != nil {
		defer l.Close()
	}
	for {
		last := !s.clock.Now().Before(deadline) || s.drained.Err() != nil
		if done, err := check(last); err != nil || done {
			return err
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		undrain := context.AfterFunc(s.drained, cancel) // Drain ends the wait as the deadline would
		if l != nil {
			_ = l.Wait(wctx)
		} else {
			<-wctx.Done()
		}
		undrain()
		cancel()
		if err := ctx.Err(); err != nil {
			return galleyerr.E(galleyerr.Unavailable, "wait abandoned", err)
		}
	}
}

// Adopt makes coordinator the run's reader. The current reader adopting is
// a no-op; a superseded coordinator is fenced for good.
func (s *Service) Adopt(ctx context.Context, run, coordinator string) (fencedOut bool, err error) {
	for range claimAttempts {
		head, ver, err := s.store.GetMailbox(ctx, run)
		if err != nil {
			return false, err
		}
		if head.Reader == coordinator {
			return false, nil
		}
		if slices.Contains(head.Superseded, coordinator) {
			return true, nil
		}
		if head.Reader != "" {
			head.Superseded = append(head.Superseded, head.Reader)
		}
		for _, c := range head.Seen {
			if c != coordinator && !slices.Contains(head.Superseded, c) {
				head.Superseded = append(head.Superseded, c)
			}
		}
		head.Seen = nil
		head.Reader = coordinator
		head.Epoch++
		// The sealed batch stays: the adopter reads the same unacknowledged
		// batch, and adoption moves and stops no worker.
		if _, err = s.store.PutMailbox(ctx, head, ver); err == nil {
			return false, nil
		} else if !galleyerr.Is(galleyerr.Conflict, err) {
			return false, err
		}
	}
	return false, galleyerr.Errorf(galleyerr.InFlight, "run %s is contended", quoteShort(run))
}

// read answers the current batch, sealing one from the pending messages
// when none is sealed. With attentionOnly it answers only a batch worth
// waking a coordinator for, and otherwise reports ready=false: the pending
// rows (up to a batch's count, even those past the byte bound) hold one that
// needs attention, or are a full batch's worth. That holds for a batch
// already sealed (by next) as well as for one it would seal.
func (s *Service) read(ctx context.Context, run, coordinator string, attentionOnly bool) (ans protocol.MailboxAnswer, ready bool, err error) {
	for range claimAttempts {
		head, ver, err := s.store.GetMailbox(ctx, run)
		if err != nil {
			return ans, false, err
		}
		if fenced(head, coordinator) {
			return answerFenced, true, nil
		}
		changed := noteSeen(&head, coordinator)
		if head.Batch != nil {
			if changed {
				if _, err := s.store.PutMailbox(ctx, head, ver); galleyerr.Is(galleyerr.Conflict, err) {
					continue
				} else if err != nil {
					return ans, false, err
				}
			}
			msgs, err := s.store.ListMessages(ctx, run, head.Batch.From-1, int(head.Batch.To-head.Batch.From+1))
			if err != nil {
				return ans, false, err
			}
			if attentionOnly && !worthWaking(msgs) {
				// A batch next sealed without needing attention (status
				// rows) holds an await like pending rows do, until a row
				// that needs attention waits behind it or the mailbox
				// holds a full batch's worth.
				after, err := s.store.ListMessages(ctx, run, head.Batch.To, maxBatchMessages-len(msgs))
				if err != nil {
					return ans, false, err
				}
				if !worthWaking(append(msgs, after...)) {
					return answerEmpty, false, nil
				}
			}
			return delivery(head.Batch.ID, msgs), true, nil
		}
		listed, err := s.store.ListMessages(ctx, run, head.Acked, maxBatchMessages)
		if err != nil {
			return ans, false, err
		}
		pending := cutBatch(listed)
		// Attention is judged on every row listed, not only on those that fit
		// the batch: a question behind rows that fill the byte bound wakes
		// the await, which answers the batch before it (the coordinator
		// acknowledges it and reads the question next).
		worthIt := len(pending) > 0 && (!attentionOnly || worthWaking(listed))
		if worthIt {
			head.Batches++
			head.Batch = &store.Batch{ID: fmt.Sprintf("d-%d", head.Batches), From: pending[0].Seq, To: pending[len(pending)-1].Seq}
			changed = true
		}
		if changed {
			if _, err := s.store.PutMailbox(ctx, head, ver); galleyerr.Is(galleyerr.Conflict, err) {
				continue
			} else if err != nil {
				return ans, false, err
			}
		}
		if !worthIt {
			return answerEmpty, !attentionOnly, nil
		}
		return delivery(head.Batch.ID, pending), true, nil
	}
	return ans, false, galleyerr.Errorf(galleyerr.InFlight, "run %s is contended", quoteShort(run))
}

func fenced(head store.Mailbox, coordinator string) bool {
	return head.Reader != "" && head.Reader != coordinator
}

// noteSeen records a coordinator that reads before the first adoption, so
// that an adoption supersedes it.
func noteSeen(head *store.Mailbox, coordinator string) bool {
	if head.Reader != "" || slices.Contains(head.Seen, coordinator) {
		return false
	}
	head.Seen = append(head.Seen, coordinator)
	return true
}

// cutBatch keeps the longest prefix that fits the batch size bound (always
// at least one message).
func cutBatch(msgs []store.Message) []store.Message {
	size := 0
	for i, m := range msgs {
		b, _ := json.Marshal(m.Row)
		size += len(b) + 1
		if i > 0 && size > maxBatchBytes {
			return msgs[:i]
		}
	}
	return msgs
}

// worthWaking reports whether rows, the oldest pending rows, are worth
// waking a coordinator for: one needs attention, or they are a full batch's
// worth.
func worthWaking(rows []store.Message) bool {
	return len(rows) >= maxBatchMessages || needsAttention(rows)
}

func needsAttention(msgs []store.Message) bool {
	for _, m := range msgs {
		switch m.Row.Kind {
		case protocol.MsgQuestion, protocol.MsgWorkerDone, protocol.MsgEscalation:
			return true
		}
	}
	return false
}

func delivery(id string, msgs []store.Message) protocol.MailboxAnswer {
	rows := make([]protocol.MailMessage, len(msgs))
	for i, m := range msgs {
		rows[i] = m.Row
	}
	return protocol.MailboxAnswer{Status: protocol.MailDelivery, Delivery: &protocol.Delivery{ID: id, Messages: rows}}
}
