package protocol

import (
	"math"
	"strconv"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Mailbox operations, the last path segment of each mailbox route.
const (
	MailboxNext        = "next"
	MailboxAcknowledge = "acknowledge"
	MailboxAwait       = "await"
	MailboxAdopt       = "adopt"
)

// DecodeMailboxCall reads the body of a mailbox call for op (next,
// acknowledge, await or adopt): run and coordinator always, delivery only
// for acknowledge, waitMs (0 to 900000) only for await.
func DecodeMailboxCall(body []byte, op string) (MailboxCall, error) {
	var extra string
	switch op {
	case MailboxNext, MailboxAdopt:
	case MailboxAcknowledge:
		extra = "delivery"
	case MailboxAwait:
		extra = "waitMs"
	default:
		return MailboxCall{}, galleyerr.E(galleyerr.Other, "protocol: unknown mailbox operation "+strconv.Quote(op))
	}
	root, err := parseJSON(body)
	if err != nil {
		return MailboxCall{}, err
	}
	d := dec{typeKind: galleyerr.Malformed}
	c, err := d.mailboxCall(&root, op, extra)
	if err == nil {
		err = d.err
	}
	if err != nil {
		return MailboxCall{}, err
	}
	return c, nil
}

func (d *dec) mailboxCall(root *jvalue, op, extra string) (MailboxCall, error) {
	var c MailboxCall
	if root.kind != jObject {
		return c, d.typeErr("", "an object", root.kind)
	}
	for i := range root.kids {
		m := &root.kids[i]
		switch {
		case m.keyBad:
		case m.key == "run" || m.key == "coordinator" || m.key == extra:
			continue
		case m.key == "delivery" || m.key == "waitMs":
			d.note(galleyerr.E(galleyerr.Invalid, "field "+strconv.Quote(m.key)+" is not allowed in "+op))
			continue
		}
		d.note(unknownField("", m))
	}
	var err error
	if c.Run, err = d.need(root, "", "run", IsReference, msgReference); err != nil {
		return c, err
	}
	if c.Coordinator, err = d.need(root, "", "coordinator", IsReference, msgReference); err != nil {
		return c, err
	}
	switch extra {
	case "delivery":
		if c.Delivery, err = d.need(root, "", "delivery", IsReference, msgReference); err != nil {
			return c, err
		}
	case "waitMs":
		ms, present, err := d.integer(root, "", "waitMs")
		switch {
		case err != nil:
			return c, err
		case !present:
			d.note(missing("", "waitMs"))
		case ms < 0 || ms > MaxWaitMs:
			d.note(invalidf("waitMs", "must be 0 to 900000"))
		}
		c.WaitMs = &ms
	}
	return c, nil
}

// validMessage checks one mailbox row as galley sends it: a known kind, the
// worker always, an outcome only (and optionally) on worker-done.
func validMessage(path string, m MailMessage, knownKind bool) error {
	switch {
	case !IsReference(m.ID):
		return invalidf(path+".id", msgReference)
	case knownKind && !IsMessageKind(m.Kind):
		return invalidf(path+".kind", "must be question, worker-done, escalation, heartbeat or status")
	case !knownKind && !isTextN(m.Kind, MaxReferenceLen):
		return invalidf(path+".kind", "must be a short text")
	case m.Worker == nil:
		return invalidf(path+".worker", "missing")
	case m.Outcome != "" && m.Kind != MsgWorkerDone:
		return invalidf(path+".outcome", "only on worker-done")
	case m.Outcome != "" && !IsOutcome(m.Outcome):
		return invalidf(path+".outcome", "must be succeeded, failed or cancelled")
	case m.Subject != "" && !IsText(m.Subject):
		return invalidf(path+".subject", msgText)
	case m.Body != "" && !IsText(m.Body):
		return invalidf(path+".body", msgText)
	}
	if err := m.Worker.validate(path + ".worker"); err != nil {
		return err
	}
	if m.Worker.Kind != KindWorker {
		return invalidf(path+".worker.kind", "must be worker")
	}
	return nil
}

// EncodeMailboxAnswer encodes empty, fenced, or a delivery with its
// messages (never null) and unreadable count.
func EncodeMailboxAnswer(a MailboxAnswer) ([]byte, error) {
	switch a.Status {
	case MailEmpty, MailFenced:
		if a.Delivery != nil {
			return nil, internal("mailbox answer", invalidf("delivery", "only on delivery"))
		}
		return append(appendString([]byte(`{"status":`), a.Status), '}'), nil
	case MailDelivery:
	default:
		return nil, internal("mailbox answer", invalidf("status", "must be empty, fenced or delivery"))
	}
	d := a.Delivery
	switch {
	case d == nil:
		return nil, internal("mailbox answer", invalidf("delivery", "missing"))
	case !IsReference(d.ID):
		return nil, internal("mailbox answer", invalidf("delivery.id", msgReference))
	case d.Unreadable < 0:
		return nil, internal("mailbox answer", invalidf("delivery.unreadable", "must not be negative"))
	}
	b := append([]byte(`{"status":"delivery","delivery":{"id":`), appendString(nil, d.ID)...)
	b = append(b, `,"messages":[`...)
	for i, m := range d.Messages {
		if err := validMessage("delivery.messages["+strconv.Itoa(i)+"]", m, true); err != nil {
			return nil, internal("mailbox answer", err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendMessage(b, m)
	}
	b = strconv.AppendInt(append(b, `],"unreadable":`...), int64(d.Unreadable), 10)
	return append(b, "}}"...), nil
}

func appendMessage(b []byte, m MailMessage) []byte {
	b = appendString(append(b, `{"id":`...), m.ID)
	b = appendString(append(b, `,"kind":`...), m.Kind)
	b = appendResource(append(b, `,"worker":`...), *m.Worker)
	if m.Outcome != "" {
		b = appendString(append(b, `,"outcome":`...), m.Outcome)
	}
	if m.Subject != "" {
		b = appendString(append(b, `,"subject":`...), m.Subject)
	}
	if m.Body != "" {
		b = appendString(append(b, `,"body":`...), m.Body)
	}
	return append(b, '}')
}

// EncodeAdoptAnswer encodes the only two answers of runs/adopt: {} when the
// caller is (now) the run's reader, {"status":"fenced"} otherwise.
func EncodeAdoptAnswer(fenced bool) []byte {
	if fenced {
		return []byte(`{"status":"fenced"}`)
	}
	return []byte(`{}`)
}

// ParseMailboxAnswer reads a mailbox answer: empty, fenced, or a delivery
// with id, messages and unreadable, each message with an id, a kind and the
// worker. A kind the protocol does not list is kept (the client treats it as
// needing attention).
func ParseMailboxAnswer(body []byte) (MailboxAnswer, error) {
	var a MailboxAnswer
	err := parseWith(body, func(d *dec, root *jvalue) error {
		var err error
		if a.Status, err = d.status(root); err != nil {
			return err
		}
		switch a.Status {
		case MailEmpty, MailFenced:
			d.only(root, "", "status")
			return nil
		case MailDelivery:
			d.only(root, "", "status", "delivery")
			a.Delivery, err = d.delivery(root)
			return err
		}
		d.note(invalidf("status", "must be empty, fenced or delivery"))
		return nil
	})
	if err != nil {
		return MailboxAnswer{}, err
	}
	return a, nil
}

func (d *dec) delivery(root *jvalue) (*Delivery, error) {
	v, err := d.object(root, "", "delivery")
	if err != nil {
		return nil, err
	}
	if v == nil {
		d.note(missing("", "delivery"))
		return nil, nil
	}
	const p = "delivery"
	d.only(v, p, "id", "messages", "unreadable")
	del := &Delivery{}
	if del.ID, err = d.need(v, p, "id", IsReference, msgReference); err != nil {
		return nil, err
	}
	n, present, err := d.integer(v, p, "unreadable")
	switch {
	case err != nil:
		return nil, err
	case !present:
		d.note(missing(p, "unreadable"))
	case n < 0 || n > math.MaxInt32:
		d.note(invalidf(p+".unreadable", "must be 0 to 2147483647"))
	default:
		del.Unreadable = int(n)
	}
	arr, err := d.array(v, p, "messages")
	if err != nil {
		return nil, err
	}
	if arr == nil {
		d.note(missing(p, "messages"))
		return del, nil
	}
	del.Messages = make([]MailMessage, 0, len(arr.kids))
	for i := range arr.kids {
		row := &arr.kids[i].val
		mp := p + ".messages[" + strconv.Itoa(i) + "]"
		if row.kind != jObject {
			return nil, d.typeErr(mp, "an object", row.kind)
		}
		d.only(row, mp, "id", "kind", "worker", "outcome", "subject", "body")
		var m MailMessage
		if m.ID, err = d.need(row, mp, "id", IsReference, msgReference); err != nil {
			return nil, err
		}
		if m.Kind, err = d.need(row, mp, "kind", func(s string) bool { return isTextN(s, MaxReferenceLen) }, "must be a short text"); err != nil {
			return nil, err
		}
		if m.Worker, err = d.resource(row, mp, "worker", KindWorker); err != nil {
			return nil, err
		}
		if m.Worker == nil {
			d.note(missing(mp, "worker"))
		}
		for _, f := range [...]struct {
			key string
			dst *string
			ok  func(string) bool
			msg string
		}{
			{"outcome", &m.Outcome, IsOutcome, "must be succeeded, failed or cancelled"},
			{"subject", &m.Subject, IsText, msgText},
			{"body", &m.Body, IsText, msgText},
		} {
			s, err := d.opt(row, mp, f.key, f.ok, f.msg)
			if err != nil {
				return nil, err
			}
			if s != nil {
				*f.dst = *s
			}
		}
		if d.err == nil {
			d.note(validMessage(mp, m, false))
		}
		del.Messages = append(del.Messages, m)
	}
	return del, nil
}

// ParseAdoptAnswer reads runs/adopt: exactly {} (adopted) or exactly
// {"status":"fenced"}. Anything else, even {"status":"adopted"}, is a failed
// call.
func ParseAdoptAnswer(body []byte) (fenced bool, err error) {
	err = parseWith(body, func(d *dec, root *jvalue) error {
		if len(root.kids) == 0 {
			return nil
		}
		d.only(root, "", "status")
		s, err := d.need(root, "", "status", func(s string) bool { return s == MailFenced }, "must be fenced, or the answer {}")
		fenced = s == MailFenced
		return err
	})
	if err != nil {
		return false, err
	}
	return fenced, nil
}
