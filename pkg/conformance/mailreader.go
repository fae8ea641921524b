package conformance

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// reader reads one run's mailbox as one coordinator and keeps what it has
// consumed, to prove batch ids are never reused and each message arrives
// once.
type reader struct {
	s        *suite
	run      string
	coord    string
	worker   protocol.Resource
	deadline time.Time

	batches map[string]bool
	ids     map[string]bool
	rows    []protocol.MailMessage
	done    bool // a worker-done row was read
}

func (s *suite) reader(run, coord string, worker protocol.Resource) *reader {
	return &reader{
		s: s, run: run, coord: coord, worker: worker, deadline: time.Now().Add(s.cfg.Wait),
		batches: map[string]bool{}, ids: map[string]bool{},
	}
}

// seed launches a scripted worker in a fresh run and returns a reader of
// that run for coordinator coord.
func (s *suite) seed(ctx context.Context, tag string, lines ...string) (*reader, *launched, error) {
	run := s.name(tag)
	l, err := s.launch(ctx, run, script(lines...), "")
	if err != nil {
		return nil, nil, err
	}
	return s.reader(run, s.name("coordinator"), l.worker), l, nil
}

// rowsOK checks what every delivery must hold: no unreadable rows (the
// scripted worker sends only well-formed ones) and every row naming the
// launched worker, by which the coordinator routes.
func rowsOK(d *protocol.Delivery, worker protocol.Resource) error {
	if d.Unreadable != 0 {
		return fmt.Errorf("batch %s counts %d unreadable rows", d.ID, d.Unreadable)
	}
	for _, m := range d.Messages {
		if m.Worker == nil {
			return fmt.Errorf("row %s (%s) of batch %s carries no worker; the coordinator drops it", m.ID, m.Kind, d.ID)
		}
		if *m.Worker != worker {
			return fmt.Errorf("row %s of batch %s names worker %+v, the launch created %+v", m.ID, d.ID, *m.Worker, worker)
		}
	}
	return nil
}

// wait waits for the oldest unacknowledged batch, as a coordinator does:
// await, and next after an empty await (await need not wake for status
// rows), until the reader's deadline.
func (r *reader) wait(ctx context.Context) (client.Mailbox, error) {
	for {
		remaining := time.Until(r.deadline)
		if remaining <= 0 {
			return client.Mailbox{}, fmt.Errorf("run %s: no delivery within %s", r.run, r.s.cfg.Wait)
		}
		w := min(remaining, 2*time.Second)
		start := time.Now()
		m, err := r.s.c.Await(ctx, r.run, r.coord, w)
		if err != nil {
			return m, err
		}
		if m.Status == protocol.MailEmpty {
			if m, err = r.s.c.Next(ctx, r.run, r.coord); err != nil {
				return m, err
			}
		}
		switch m.Status {
		case protocol.MailFenced:
			return m, fmt.Errorf("coordinator %s is fenced on run %s, and nobody else adopted it", r.coord, r.run)
		case protocol.MailDelivery:
			return m, rowsOK(m.Delivery, r.worker)
		}
		// Keep from spinning on a service that answers empty at once; the
		// await-holds check reports that.
		if time.Since(start) < w/2 {
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return m, err
			}
		}
	}
}

// poll waits for the oldest unacknowledged batch with next alone, so that
// the batch is sealed as soon as anything waits rather than when await
// would wake.
func (r *reader) poll(ctx context.Context) (client.Mailbox, error) {
	var m client.Mailbox
	err := until(ctx, time.Until(r.deadline), 100*time.Millisecond, "a delivery on run "+r.run, func() (bool, string, error) {
		var err error
		if m, err = r.s.c.Next(ctx, r.run, r.coord); err != nil {
			return false, "", err
		}
		switch m.Status {
		case protocol.MailFenced:
			return false, "", fmt.Errorf("coordinator %s is fenced on run %s, and nobody else adopted it", r.coord, r.run)
		case protocol.MailDelivery:
			return true, "", rowsOK(m.Delivery, r.worker)
		}
		return false, m.Status, nil
	})
	return m, err
}

// take records a batch read for the first time.
func (r *reader) take(m client.Mailbox) error {
	d := m.Delivery
	if r.batches[d.ID] {
		return fmt.Errorf("batch id %s was used again after it was acknowledged", d.ID)
	}
	r.batches[d.ID] = true
	if err := rowsOK(d, r.worker); err != nil {
		return err
	}
	for _, row := range d.Messages {
		if r.ids[row.ID] {
			return fmt.Errorf("message %s arrived again after its batch was acknowledged", row.ID)
		}
		r.ids[row.ID] = true
		r.rows = append(r.rows, row)
		if row.Kind == protocol.MsgWorkerDone {
			r.done = true
		}
	}
	return nil
}

// drain takes m (when a delivery not yet taken) and every later batch,
// acknowledging each, until the worker-done row has been read.
func (r *reader) drain(ctx context.Context, m client.Mailbox) error {
	for {
		if m.Status == protocol.MailDelivery {
			if err := r.take(m); err != nil {
				return err
			}
			a, err := r.s.c.Acknowledge(ctx, r.run, r.coord, m.Delivery.ID)
			if err != nil {
				return err
			}
			if a.Status == protocol.MailFenced {
				return fmt.Errorf("coordinator %s is fenced on run %s, and nobody else adopted it", r.coord, r.run)
			}
			m = a
			continue
		}
		if r.done {
			return nil
		}
		var err error
		if m, err = r.wait(ctx); err != nil {
			return fmt.Errorf("waiting for the worker-done row: %w", err)
		}
	}
}

// statusOrder lists the bodies of status rows among want, in the order
// read, and the index of the worker-done row (-1 when none).
func statusOrder(rows []protocol.MailMessage, want []string) (got []string, last, done int) {
	last, done = -1, -1
	for i, m := range rows {
		switch {
		case m.Kind == protocol.MsgStatus && slices.Contains(want, m.Body):
			got = append(got, m.Body)
			last = i
		case m.Kind == protocol.MsgWorkerDone && done < 0:
			done = i
		}
	}
	return got, last, done
}

// checkSequence requires rows to hold the status bodies want in that order,
// then a worker-done row with outcome succeeded.
func checkSequence(rows []protocol.MailMessage, want []string) error {
	got, last, done := statusOrder(rows, want)
	switch {
	case done >= 0 && rows[done].Outcome != protocol.OutcomeSucceeded:
		return fmt.Errorf("the worker reported %s, not the succeeded its script ends with: %q", rows[done].Outcome, rows[done].Body)
	case !slices.Equal(got, want):
		return fmt.Errorf("status rows arrived as %q, the worker sent %q", got, want)
	case done < 0:
		return fmt.Errorf("no worker-done row")
	case done < last:
		return fmt.Errorf("worker-done arrived before the worker's last status")
	}
	return nil
}
