package storetest

import (
	"fmt"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/store"
)

// RunDurable checks a store that lives in a directory: over several
// sessions, each opening the store at the same dir, writing and then closing
// it (or abandoning it, as a kill would: see Abandoner), everything
// acknowledged is found again, and versions and sequences carry on where
// they stopped. The suite closes or abandons each store it opens; openAt
// need not arrange a Close, and a Close in its cleanup must tolerate a
// store closed already.
func RunDurable(t *testing.T, openAt func(t *testing.T, dir string) store.Store) {
	t.Run("CloseReopen", func(t *testing.T) {
		testDurable(t, openAt, func(t *testing.T, s store.Store) { mustOK(t, "close", s.Close()) })
		testCounterDurable(t, openAt, func(t *testing.T, s store.Store) { mustOK(t, "close", s.Close()) })
	})
	t.Run("AbandonReopen", func(t *testing.T) {
		abandon := func(t *testing.T, s store.Store) {
			if a, ok := s.(Abandoner); ok {
				a.Abandon()
			}
		}
		testDurable(t, openAt, abandon)
		testCounterDurable(t, openAt, abandon)
	})
}

func testDurable(t *testing.T, openAt func(*testing.T, string) store.Store, stop func(*testing.T, store.Store)) {
	dir := t.TempDir()
	l := newLedger()
	for session := range 3 {
		s := openAt(t, dir)
		l.verify(t, s, fmt.Sprint("session ", session))
		l.write(t, s, session)
		l.verify(t, s, fmt.Sprint("session ", session, " after writing"))
		stop(t, s)
		if t.Failed() {
			return
		}
	}
	s := openAt(t, dir)
	l.verify(t, s, "last session")
	mustOK(t, "close", s.Close())
}

// ledger is what a store acknowledged: what it must still hold.
type ledger struct {
	effects    map[string]store.Effect
	effectV    map[string]store.Version
	resources  []store.Resource
	resourceV  []store.Version
	mailbox    store.Mailbox
	mailboxV   store.Version
	messages   map[string][]store.Message
	inbox      map[string][]store.InboxItem
	staleKey   string
	staleVer   store.Version
	runs       []string
	inboxUsers []string
}

func newLedger() *ledger {
	return &ledger{
		effects:  map[string]store.Effect{},
		effectV:  map[string]store.Version{},
		mailbox:  store.Mailbox{Run: "run-main"},
		messages: map[string][]store.Message{},
		inbox:    map[string][]store.InboxItem{},
	}
}

func (l *ledger) write(t *testing.T, s store.Store, session int) {
	t.Helper()
	ctx := t.Context()

	// Effects: one new, one updated, and a stale write that must lose.
	key := fmt.Sprint("effect-", session)
	e := fullEffect(key)
	v, err := s.PutEffect(ctx, e, store.NoVersion)
	mustOK(t, "create "+key, err)
	l.effects[key], l.effectV[key] = e, v
	if session > 0 {
		old := fmt.Sprint("effect-", session-1)
		e := l.effects[old]
		e.State, e.Receipt = store.EffectApplied, []byte(fmt.Sprintf(`{"session": %d}`, session))
		v, err := s.PutEffect(ctx, e, l.effectV[old])
		mustOK(t, "update "+old, err)
		if v <= l.effectV[old] {
			t.Errorf("update of %s after reopening answered version %d after %d", old, v, l.effectV[old])
		}
		l.staleKey, l.staleVer = old, l.effectV[old]
		l.effects[old], l.effectV[old] = e, v
		_, err = s.PutEffect(ctx, fullEffect(old), l.staleVer)
		wantKind(t, "stale write after reopening", err, galleyerr.Conflict)
	}

	// Resources: two new (handles descending, so creation order is not
	// the handles' order), and the first one updated.
	for i := range 2 {
		r := fullResource("worker", fmt.Sprint("w-", 9-2*session-i))
		v, err := s.PutResource(ctx, r, store.NoVersion)
		mustOK(t, "create "+r.Handle, err)
		l.resources, l.resourceV = append(l.resources, r), append(l.resourceV, v)
	}
	first := l.resources[0]
	first.Owner = fmt.Sprint("owner-", session)
	v, err = s.PutResource(ctx, first, l.resourceV[0])
	mustOK(t, "update "+first.Handle, err)
	l.resources[0], l.resourceV[0] = first, v

	// The mailbox head moves on.
	m := fullMailbox(l.mailbox.Run)
	m.Acked = int64(session + 1)
	v, err = s.PutMailbox(ctx, m, l.mailboxV)
	mustOK(t, "put mailbox", err)
	l.mailbox, l.mailboxV = m, v

	// Messages for a long-lived run and a run of this session; inbox items.
	appendMsgs := func(run string, n int) {
		if _, ok := l.messages[run]; !ok {
			l.runs = append(l.runs, run)
		}
		for i := range n {
			msg := fullMessage(fmt.Sprintf("s%d-m%d", session, i))
			seq, _, err := s.AppendMessage(ctx, run, msg)
			mustOK(t, "append to "+run, err)
			if want := int64(len(l.messages[run]) + 1); seq != want {
				t.Errorf("append to %s answered sequence %d, want %d", run, seq, want)
			}
			msg.Seq = seq
			l.messages[run] = append(l.messages[run], msg)
		}
	}
	appendMsgs("run-main", 3)
	appendMsgs(fmt.Sprint("run-", session), 2)
	if _, ok := l.inbox["w-main"]; !ok {
		l.inboxUsers = append(l.inboxUsers, "w-main")
	}
	for i := range 2 {
		it := fullInboxItem(fmt.Sprintf("s%d-i%d", session, i))
		seq, err := s.AppendInbox(ctx, "w-main", it)
		mustOK(t, "append inbox", err)
		if want := int64(len(l.inbox["w-main"]) + 1); seq != want {
			t.Errorf("inbox append answered sequence %d, want %d", seq, want)
		}
		it.Seq = seq
		l.inbox["w-main"] = append(l.inbox["w-main"], it)
	}
}

func (l *ledger) verify(t *testing.T, s store.Store, when string) {
	t.Helper()
	ctx := t.Context()
	for key, want := range l.effects {
		got, v, err := s.GetEffect(ctx, key)
		mustOK(t, when+": get "+key, err)
		if v != l.effectV[key] {
			t.Errorf("%s: %s at version %d, want %d", when, key, v, l.effectV[key])
		}
		checkSame(t, when+": "+key, got, want)
	}
	list, err := s.ListResources(ctx)
	mustOK(t, when+": list resources", err)
	checkSame(t, when+": resources", list, l.resources)
	for i, want := range l.resources {
		_, v, err := s.GetResource(ctx, want.Kind, want.Handle)
		mustOK(t, when+": get "+want.Handle, err)
		if v != l.resourceV[i] {
			t.Errorf("%s: %s at version %d, want %d", when, want.Handle, v, l.resourceV[i])
		}
	}
	m, v, err := s.GetMailbox(ctx, l.mailbox.Run)
	mustOK(t, when+": get mailbox", err)
	if v != l.mailboxV {
		t.Errorf("%s: mailbox at version %d, want %d", when, v, l.mailboxV)
	}
	checkSame(t, when+": mailbox", m, l.mailbox)
	for _, run := range l.runs {
		got, err := s.ListMessages(ctx, run, 0, 0)
		mustOK(t, when+": list "+run, err)
		checkSame(t, when+": messages of "+run, got, l.messages[run])
		// The run remembers its ids: a repeat of its last message
		// answers that message and appends nothing.
		if ms := l.messages[run]; len(ms) > 0 {
			last := ms[len(ms)-1]
			seq, existed, err := s.AppendMessage(ctx, run, last)
			mustOK(t, when+": append "+last.Row.ID+" again", err)
			if seq != last.Seq || !existed {
				t.Errorf("%s: repeating %s in %s answered (%d, existed %v), want (%d, true)", when, last.Row.ID, run, seq, existed, last.Seq)
			}
		}
	}
	for _, w := range l.inboxUsers {
		got, err := s.ListInbox(ctx, w, 0, 0)
		mustOK(t, when+": list inbox "+w, err)
		checkSame(t, when+": inbox of "+w, got, l.inbox[w])
	}
}
