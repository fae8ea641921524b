package conformance

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// The mailbox checks seed a run of their own: they launch a scripted worker
// (see the scripted agent in the design) in a fresh run and read that run's
// mailbox as a coordinator would, with await and next, every wait bounded
// by Config.Wait.

func (s *suite) deliveriesDeclared(ctx context.Context) error {
	d, err := s.descriptor(ctx)
	if err != nil {
		return err
	}
	for _, c := range []string{"worker.deliveries", "run.transfer"} {
		if v := d.Capabilities[c]; v != protocol.SupportSupported {
			return fmt.Errorf("descriptor declares %s %q, want supported", c, v)
		}
	}
	m, err := s.c.Next(ctx, s.name("fresh"), s.name("coordinator"))
	if err != nil {
		return err
	}
	if m.Status != protocol.MailEmpty {
		return fmt.Errorf("next on a run nobody wrote to answers %s, want empty", m.Status)
	}
	return nil
}

func (s *suite) deliveryReplayed(ctx context.Context) error {
	r, _, err := s.seed(ctx, "replay", "status one", "status two", "done succeeded replayed")
	if err != nil {
		return err
	}
	first, err := r.wait(ctx)
	if err != nil {
		return err
	}
	for i := range 2 {
		m, err := s.c.Next(ctx, r.run, r.coord)
		if err != nil {
			return err
		}
		if m.Status != protocol.MailDelivery || !bytes.Equal(m.Raw, first.Raw) {
			return fmt.Errorf("next %d after reading batch %s answers %s, want the same batch in every field: first %s", i+1, first.Delivery.ID, describeMail(m), first.Raw)
		}
	}
	return nil
}

func describeMail(m client.Mailbox) string {
	if m.Status == protocol.MailDelivery {
		return "delivery " + string(m.Raw)
	}
	return m.Status
}

func (s *suite) adoptionReplays(ctx context.Context) error {
	old, _, err := s.seed(ctx, "adopt", "status one", "status two", "done succeeded adopted")
	if err != nil {
		return err
	}
	// The coordinator adopts at the start of every pass, so the reader's own
	// adoption must be a no-op.
	for i := range 2 {
		if fenced, err := s.c.Adopt(ctx, old.run, old.coord); err != nil || fenced {
			return fmt.Errorf("adoption %d by the first coordinator: fenced=%v, %v", i+1, fenced, err)
		}
	}
	first, err := old.wait(ctx)
	if err != nil {
		return err
	}
	newCoord := s.name("coordinator")
	if fenced, err := s.c.Adopt(ctx, old.run, newCoord); err != nil {
		return fmt.Errorf("adoption by a new coordinator: %w", err)
	} else if fenced {
		return fmt.Errorf("adoption by a new coordinator answers fenced, want {}")
	}
	got, err := s.c.Next(ctx, old.run, newCoord)
	if err != nil {
		return err
	}
	if got.Status != protocol.MailDelivery {
		return fmt.Errorf("the adopter's next answers %s, want the unacknowledged batch", got.Status)
	}
	if err := rowsOK(got.Delivery, old.worker); err != nil {
		return err
	}
	// The adopter may get the pending messages regrouped under a new batch
	// id, with later ones after them, but the same messages in every field.
	want := first.Delivery.Messages
	if len(got.Delivery.Messages) < len(want) || !reflect.DeepEqual(got.Delivery.Messages[:len(want)], want) {
		return fmt.Errorf("the adopter reads %s, the first coordinator read %s unacknowledged", got.Raw, first.Raw)
	}
	stale := []struct {
		what string
		call func() (fenced bool, err error)
	}{
		{"next", func() (bool, error) {
			m, err := s.c.Next(ctx, old.run, old.coord)
			return m.Status == protocol.MailFenced, err
		}},
		{"acknowledge", func() (bool, error) {
			m, err := s.c.Acknowledge(ctx, old.run, old.coord, first.Delivery.ID)
			return m.Status == protocol.MailFenced, err
		}},
		{"await", func() (bool, error) {
			m, err := s.c.Await(ctx, old.run, old.coord, time.Second)
			return m.Status == protocol.MailFenced, err
		}},
		{"adopt", func() (bool, error) { return s.c.Adopt(ctx, old.run, old.coord) }},
	}
	for _, c := range stale {
		fenced, err := c.call()
		if err != nil {
			return fmt.Errorf("%s by the superseded coordinator: %w", c.what, err)
		}
		if !fenced {
			return fmt.Errorf("%s by the superseded coordinator is not fenced", c.what)
		}
	}
	// None of that may have moved the adopter's batch; nor may an
	// acknowledgement of the old batch id, when the adopter got a new one.
	again, err := s.c.Next(ctx, old.run, newCoord)
	if err != nil {
		return err
	}
	if again.Status != protocol.MailDelivery || !bytes.Equal(again.Raw, got.Raw) {
		return fmt.Errorf("after the superseded coordinator's calls the adopter reads %s, before %s", describeMail(again), got.Raw)
	}
	if got.Delivery.ID != first.Delivery.ID {
		a, err := s.c.Acknowledge(ctx, old.run, newCoord, first.Delivery.ID)
		if err != nil {
			return err
		}
		if a.Status != protocol.MailDelivery || !bytes.Equal(a.Raw, got.Raw) {
			return fmt.Errorf("the adopter's acknowledgement of the old batch id %s answers %s, want its current batch unconsumed: %s", first.Delivery.ID, describeMail(a), got.Raw)
		}
	}
	return nil
}

func (s *suite) duplicateAcknowledgement(ctx context.Context) error {
	statuses := []string{"one", "two", "three"}
	r, l, err := s.seed(ctx, "dup-ack", "status one", "sleep 1s", "status two", "status three", "done succeeded acknowledged")
	if err != nil {
		return err
	}
	first, err := r.poll(ctx)
	if err != nil {
		return err
	}
	if err := r.take(first); err != nil {
		return err
	}
	// Let the worker finish, so that a second batch most likely waits when
	// the first is acknowledged (the check holds either way).
	if err := s.waitState(ctx, l, protocol.StateSettled); err != nil {
		return err
	}
	a1, err := s.c.Acknowledge(ctx, r.run, r.coord, first.Delivery.ID)
	if err != nil {
		return err
	}
	a2, err := s.c.Acknowledge(ctx, r.run, r.coord, first.Delivery.ID)
	if err != nil {
		return err
	}
	switch {
	case a1.Status == protocol.MailFenced || a2.Status == protocol.MailFenced:
		return fmt.Errorf("an acknowledgement answers fenced, and nobody adopted the run")
	case a1.Status == protocol.MailDelivery && !bytes.Equal(a1.Raw, a2.Raw):
		return fmt.Errorf("the second acknowledgement of %s answers %s, want the current batch %s", first.Delivery.ID, describeMail(a2), a1.Raw)
	case a2.Status == protocol.MailDelivery && a2.Delivery.ID == first.Delivery.ID:
		return fmt.Errorf("the acknowledged batch %s is answered again", first.Delivery.ID)
	}
	n, err := s.c.Next(ctx, r.run, r.coord)
	if err != nil {
		return err
	}
	if a2.Status == protocol.MailDelivery && !bytes.Equal(n.Raw, a2.Raw) {
		return fmt.Errorf("next after the second acknowledgement answers %s, want the batch it answered, unconsumed: %s", describeMail(n), a2.Raw)
	}
	if err := r.drain(ctx, n); err != nil {
		return err
	}
	return checkSequence(r.rows, statuses)
}

func (s *suite) deliveryOrder(ctx context.Context) error {
	statuses := []string{"one", "two", "three", "four"}
	r, _, err := s.seed(ctx, "order", "status one", "status two", "heartbeat", "status three", "status four", "done succeeded in order")
	if err != nil {
		return err
	}
	if err := r.drain(ctx, client.Mailbox{MailboxAnswer: protocol.MailboxAnswer{Status: protocol.MailEmpty}}); err != nil {
		return err
	}
	return checkSequence(r.rows, statuses)
}

// waitState polls observe until the worker is in state (any outcome).
func (s *suite) waitState(ctx context.Context, l *launched, state string) error {
	return until(ctx, s.cfg.Wait, 200*time.Millisecond, "worker "+l.worker.Handle+" to be "+state, func() (bool, string, error) {
		o, err := s.c.Observe(ctx, l.worker)
		if err != nil {
			return false, "", err
		}
		if o.State == state {
			if state == protocol.StateSettled {
				l.settled = true
			}
			return true, "", nil
		}
		if o.State == protocol.StateSettled || o.State == protocol.StateMissing {
			return false, "", fmt.Errorf("worker %s is %s while waiting for %s%s", l.worker.Handle, describeObservation(o), state, s.lastWords(ctx, l))
		}
		return false, describeObservation(o), nil
	})
}

// lastWords quotes the worker-done row of a worker that settled early, for
// the failure line. It reads as a coordinator of its own, which is allowed
// before anyone adopts the run, and only ever on a check already failing.
func (s *suite) lastWords(ctx context.Context, l *launched) string {
	m, err := s.c.Next(ctx, l.run, s.name("diagnosis"))
	if err != nil || m.Status != protocol.MailDelivery {
		return ""
	}
	for _, row := range m.Delivery.Messages {
		if row.Kind == protocol.MsgWorkerDone && row.Worker != nil && *row.Worker == l.worker {
			return fmt.Sprintf(" (it reported %s: %q)", row.Outcome, row.Body)
		}
	}
	return ""
}

func (s *suite) awaitHolds(ctx context.Context) error {
	const waitMs = 1500
	start := time.Now()
	m, err := s.c.Await(ctx, s.name("quiet"), s.name("coordinator"), waitMs*time.Millisecond)
	took := time.Since(start)
	if err != nil {
		return err
	}
	if m.Status != protocol.MailEmpty {
		return fmt.Errorf("await on a run nobody wrote to answers %s, want empty", m.Status)
	}
	// Answering empty at once turns one wait of kitchn's into a burst of
	// calls; allow the service its own rounding, not much more.
	if took < time.Second {
		return fmt.Errorf("await with waitMs %d answered empty after %s: a service must hold the call up to waitMs", waitMs, took.Round(time.Millisecond))
	}
	return nil
}

// awaitWakes: the worker waits for a message before it asks, so the
// question cannot be posted before the suite's first await is in flight;
// an await that returns it well before waitMs woke for it.
func (s *suite) awaitWakes(ctx context.Context) error {
	wait := s.cfg.wakeWait
	if wait == 0 {
		wait = 10 * time.Second
	}
	r, l, err := s.seed(ctx, "wake", "wait-message", "ask Which API? :: v1 or v2?", "done succeeded woken")
	if err != nil {
		return err
	}
	if err := s.waitState(ctx, l, protocol.StateReady); err != nil {
		return err
	}
	// Consume what the worker posted while starting, so that the wait below
	// is for the question alone.
	for {
		m, err := s.c.Next(ctx, r.run, r.coord)
		if err != nil {
			return err
		}
		if m.Status != protocol.MailDelivery {
			break
		}
		if err := r.take(m); err != nil {
			return err
		}
		if _, err := s.c.Acknowledge(ctx, r.run, r.coord, m.Delivery.ID); err != nil {
			return err
		}
	}
	type answer struct {
		m    client.Mailbox
		took time.Duration
		err  error
	}
	sent := false
	for {
		if time.Now().After(r.deadline) {
			return fmt.Errorf("no question within %s of the message that triggers it", s.cfg.Wait)
		}
		ch := make(chan answer, 1)
		go func() {
			start := time.Now()
			m, err := s.c.Await(ctx, r.run, r.coord, wait)
			ch <- answer{m, time.Since(start), err}
		}()
		if !sent {
			// Let the await reach the service, then trigger the question.
			if err := sleep(ctx, 300*time.Millisecond); err != nil {
				return err
			}
			w := l.worker
			body := "go ahead and ask"
			if _, err := s.effect(ctx, s.call(r.run, s.name("message"), protocol.WorkerEffect{Type: protocol.OpMessage, Worker: &w, Body: &body})); err != nil {
				<-ch
				return fmt.Errorf("message that triggers the question: %w", err)
			}
			sent = true
		}
		a := <-ch
		if a.err != nil {
			return a.err
		}
		switch a.m.Status {
		case protocol.MailFenced:
			return fmt.Errorf("await answers fenced, and nobody adopted the run")
		case protocol.MailEmpty:
			if a.took < wait-time.Second {
				return fmt.Errorf("await answered empty after %s with waitMs %d", a.took.Round(time.Millisecond), wait.Milliseconds())
			}
			continue
		}
		if err := rowsOK(a.m.Delivery, l.worker); err != nil {
			return err
		}
		q := question(a.m.Delivery)
		if q == nil {
			// Rows the service may hand out at the end of a wait (status,
			// heartbeat): consume them and wait again.
			if a.took < wait-time.Second {
				return fmt.Errorf("await woke after %s for a batch without a question, report or escalation: %s", a.took.Round(time.Millisecond), a.m.Raw)
			}
			if err := r.take(a.m); err != nil {
				return err
			}
			if _, err := s.c.Acknowledge(ctx, r.run, r.coord, a.m.Delivery.ID); err != nil {
				return err
			}
			continue
		}
		if q.Subject != "Which API?" || q.Body != "v1 or v2?" {
			return fmt.Errorf("question reads subject %q body %q, the worker asked %q :: %q", q.Subject, q.Body, "Which API?", "v1 or v2?")
		}
		if a.took >= wait-time.Second {
			return fmt.Errorf("await returned the question only after %s of waitMs %d: it did not wake when the question arrived", a.took.Round(time.Millisecond), wait.Milliseconds())
		}
		return nil
	}
}

func question(d *protocol.Delivery) *protocol.MailMessage {
	for i := range d.Messages {
		if d.Messages[i].Kind == protocol.MsgQuestion {
			return &d.Messages[i]
		}
	}
	return nil
}
