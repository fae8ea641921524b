package service

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/workerapi"
)

// The worker's inbox as its harness reads it, and how a reply reaches it
// exactly once.

// WorkerInbox answers the items kitchn sent the worker after seq after,
// holding up to wait for one. A retried effect may have appended an item
// twice; only the first item of each key is answered.
//
// Where harnesses are granted their own wait (WithWakeGranter: on AWS),
// nothing holds: the answer comes at once, so no call from a worker keeps
// an invocation open, whatever the harness asks.
func (s *Service) WorkerInbox(ctx context.Context, handle string, after int64, wait time.Duration) (workerapi.InboxAnswer, error) {
	var ans workerapi.InboxAnswer
	if s.wakes != nil {
		wait = 0
	}
	deadline := s.clock.Now().Add(min(max(wait, 0), MaxInboxWait))
	err := s.waitFor(ctx, inboxTopic(handle), deadline, func(last bool) (bool, error) {
		var err error
		ans, err = s.inbox(ctx, handle, after)
		return last || len(ans.Items) > 0 || ans.Settled, err
	})
	return ans, err
}

// WorkerWait holds up to wait until the worker's inbox has items after
// seq after, or the worker is settled: the wait of a harness whose grant
// is WakeGalley. It reads what WorkerInbox would answer, so a ring missed
// between the harness's read and this wait costs nothing.
func (s *Service) WorkerWait(ctx context.Context, handle string, after int64, wait time.Duration) error {
	_, err := s.WorkerInbox(ctx, handle, after, wait)
	return err
}

// WorkerWake answers how the worker's harness waits for its wake-ups: the
// grant of the WakeGranter for the worker's inbox topic, or a wait through
// galley when there is none. A settled or released worker gets no grant:
// its harness reads the inbox, which tells it to stop.
func (s *Service) WorkerWake(ctx context.Context, handle string) (workerapi.WakeGrant, error) {
	if s.wakes == nil {
		return workerapi.WakeGrant{Kind: workerapi.WakeGalley}, nil
	}
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return workerapi.WakeGrant{}, err
	}
	if res.Released || res.Worker == nil || res.Worker.State == protocol.StateSettled {
		return workerapi.WakeGrant{}, galleyerr.Errorf(galleyerr.Conflict, "the worker is settled; read the inbox")
	}
	return s.wakes.GrantWake(ctx, inboxTopic(handle), handle)
}

func (s *Service) inbox(ctx context.Context, handle string, after int64) (workerapi.InboxAnswer, error) {
	res, _, err := s.store.GetResource(ctx, protocol.KindWorker, handle)
	if err != nil {
		return workerapi.InboxAnswer{}, err
	}
	ans := workerapi.InboxAnswer{Items: []workerapi.InboxItem{}}
	if res.Released || res.Worker == nil || res.Worker.State == protocol.StateSettled {
		ans.Settled = true
		if res.Worker != nil {
			ans.Outcome = res.Worker.Outcome
		}
	}
	// The view leaves out the second copies a retried effect appended.
	v, err := s.inboxes.read(ctx, s.store, handle)
	if err != nil {
		return workerapi.InboxAnswer{}, err
	}
	if ans.Settled {
		s.inboxes.drop(handle)
	}
	r := replyRules{w: res.Worker, now: s.clock.Now(), hold: 2 * s.cfg.Lease}
	first := sort.Search(len(v.items), func(i int) bool { return v.items[i].Seq > after })
	// The replies the harness's cursor passed still decide what follows
	// them; the messages it passed decide nothing.
	for _, i := range v.replies {
		if i >= first {
			break
		}
		if r.fate(&v.items[i]) == replyHeld {
			return ans, nil
		}
	}
	for i := first; i < len(v.items); i++ {
		it := &v.items[i]
		if it.Kind == "reply" {
			switch r.fate(it) {
			case replyHeld:
				return ans, nil
			case replySkipped:
				continue
			}
		}
		ans.Items = append(ans.Items, workerapi.InboxItem{Seq: it.Seq, Kind: it.Kind, Question: it.Question, Body: it.Body})
	}
	return ans, nil
}

// replyRules decide the replies of one inbox read, in inbox order. Only the
// answer the worker record holds is delivered, once: a reply that lost a
// race with another body never reaches the agent. A reply appended but not
// yet recorded holds back what follows it, so the harness's cursor cannot
// pass it; a record that never came (its effect died and was not retried)
// stops holding after two leases.
type replyRules struct {
	w        *store.Worker
	now      time.Time
	hold     time.Duration
	answered map[string]bool
}

type replyFate int

const (
	replyDelivered replyFate = iota
	replySkipped
	replyHeld
)

// fate decides a reply item. A record that names its copy delivers that
// copy alone; one written before copies were named delivers the first
// copy whose body matches.
func (r *replyRules) fate(it *store.InboxItem) replyFate {
	recorded := ""
	if r.w != nil {
		recorded = r.w.Questions[it.Question]
	}
	answer, named := parseAnswer(recorded)
	switch {
	case recorded == "" && r.now.Sub(it.At) < r.hold:
		return replyHeld
	case named > 0 && it.Seq != named:
		return replySkipped
	case !store.AnswerMatches(answer, it.Body) || r.answered[it.Question]:
		return replySkipped
	}
	if r.answered == nil {
		r.answered = map[string]bool{}
	}
	r.answered[it.Question] = true
	return replyDelivered
}

// answerRecord is what the worker record keeps of a reply: the digest of
// its body and the sequence of the inbox copy that delivers it.
func answerRecord(body string, seq int64) string {
	return store.AnswerDigest(body) + "@" + strconv.FormatInt(seq, 10)
}

// digestLen is the length of an AnswerDigest.
var digestLen = len(store.AnswerDigest(""))

// parseAnswer splits a Questions value into the answer (a digest, or in a
// record written before digests the body) and the sequence of the copy it
// names, 0 in a record written before copies were named.
func parseAnswer(recorded string) (answer string, seq int64) {
	if len(recorded) > digestLen+1 && recorded[digestLen] == '@' && strings.HasPrefix(recorded, "sha256:") {
		if n, err := strconv.ParseInt(recorded[digestLen+1:], 10, 64); err == nil && n > 0 {
			return recorded[:digestLen], n
		}
	}
	return recorded, 0
}

// answerMatches reports whether recorded (a Questions value) answers body.
func answerMatches(recorded, body string) bool {
	answer, _ := parseAnswer(recorded)
	return store.AnswerMatches(answer, body)
}

// replyNameable reports whether a record written now may still name it:
// no reader can have let its hold run out by the time the write lands.
func (s *Service) replyNameable(it store.InboxItem) bool {
	return s.clock.Now().Sub(it.At) < s.cfg.Lease-s.cfg.ClockSkew
}

// deliverReply puts a reply to an unanswered question in the worker's
// inbox and records the answer naming that copy, then rings the inbox.
// The inbox first: the reverse order could record an answer never sent. A
// claim taken over names a copy its predecessor appended if one is still
// young enough, and otherwise appends a fresh one. A record that another
// reply won first refuses this one (its copy is skipped by every reader).
func (s *Service) deliverReply(ctx context.Context, c *claim, handle, question, body string) error {
	var item store.InboxItem
	if c.resumed {
		v, err := s.inboxes.read(ctx, s.store, handle)
		if err != nil {
			return err
		}
		for _, it := range v.items {
			if it.Key == c.rec.Key && it.Kind == "reply" && it.Question == question && it.Body == body && s.replyNameable(it) {
				item = it
			}
		}
	}
	if item.Seq == 0 {
		item = store.InboxItem{Key: c.rec.Key, Kind: "reply", Question: question, Body: body, At: s.clock.Now()}
		seq, err := s.store.AppendInbox(ctx, handle, item)
		if err != nil {
			return err
		}
		item.Seq = seq
	}
	res, err := s.updateWorkerRecord(ctx, handle, "reply to "+question, func(r *store.Resource) error {
		w := r.Worker
		if prev := w.Questions[question]; prev != "" {
			if answerMatches(prev, body) {
				return errNoChange
			}
			// Lost the race to another body: the copy appended above is
			// skipped by every reader, so nothing was given.
			c.acted = false
			return galleyerr.Errorf(galleyerr.Invalid, "question %s was already answered", quoteShort(question))
		}
		if !s.replyNameable(item) {
			// Too late to be sure no reader skipped it; a retry appends
			// a fresh copy.
			return galleyerr.Errorf(galleyerr.Unavailable, "the reply's inbox copy is too old to record; a retry sends it again")
		}
		w.Questions[question] = answerRecord(body, item.Seq)
		switch {
		case w.Parked():
			// Its agent does not run: the write that records the answer
			// resumes it, so no answer is ever recorded for a worker left
			// parked.
			s.markResuming(r)
		case w.State == protocol.StateAwaitingReply && !hasOpenQuestion(w):
			w.State = protocol.StateReady
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.event(handle, eventlog.KindMailbox, body, "kind", "reply", "question", question, "inbox", strconv.FormatInt(item.Seq, 10))
	s.ring(ctx, inboxTopic(handle))
	if res.Worker.ResumeOwed() {
		s.startResumed(ctx, res) // a start that fails is owed on the record
	}
	return nil
}

func hasOpenQuestion(w *store.Worker) bool {
	for _, a := range w.Questions {
		if a == "" {
			return true
		}
	}
	return false
}
