package awslocal_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
	"github.com/galley-run/galley/pkg/store/dynamostore"
)

// stackHouse is the aws-local stack as the scenarios written once for both
// shapes (local/shapetest) see it: kitchn's client of one run, the
// stack's files on this machine, and, for the adversarial scenario, its
// containers' view and counts.
type stackHouse struct {
	s       *awslocal.Stack
	k       *kitchn
	token   string
	opToken string
	galley  string
	events  *dynamostore.Store // the table as the worker API's role reaches it

	adv *stackAdversary // the adversarial scenario's
}

func newStackHouse(t *testing.T, s *awslocal.Stack, token, run string) *stackHouse {
	return &stackHouse{s: s, k: newKitchn(t, s, token, run), token: token, opToken: operatorToken(t, s),
		galley: filepath.Join(filepath.Dir(binaries(t).Harness), "galley")}
}

// The kitchn client reports to the test that calls it.

func (h *stackHouse) Effect(t *testing.T, key, effect string) (string, protocol.Receipt) {
	t.Helper()
	h.k.t = t
	return h.k.effect(key, effect)
}

func (h *stackHouse) Next(t *testing.T, what string, match func(protocol.MailMessage) bool) protocol.MailMessage {
	t.Helper()
	h.k.t = t
	return h.k.next(what, match)
}

func (h *stackHouse) Observe(t *testing.T, handle string) protocol.Observation {
	t.Helper()
	h.k.t = t
	return h.k.observe(handle)
}

func (h *stackHouse) Endpoint() string      { return h.s.Endpoint() }
func (h *stackHouse) Token() string         { return h.token }
func (h *stackHouse) House() string         { return h.k.house }
func (h *stackHouse) OperatorToken() string { return h.opToken }

// The operator scenario's.

func (h *stackHouse) Galley() string            { return h.galley }
func (h *stackHouse) OperatorTokenFile() string { return h.s.OperatorTokenFile() }
func (h *stackHouse) TokenFile() string         { return h.s.TokenFile() }

// AppendEvent writes an event as the functions write them.
func (h *stackHouse) AppendEvent(ctx context.Context, handle string, e store.Event) error {
	_, err := h.events.AppendEvent(ctx, handle, e)
	return err
}

// stackHouse is an EventWriter (the operator scenario's stale cursor).
var _ shapetest.EventWriter = (*stackHouse)(nil)

// withEvents gives h the table as the worker API function's role reaches
// it.
func (h *stackHouse) withEvents(t *testing.T) *stackHouse {
	h.events = functionStore(t, h.s, lambdaapp.WorkerAPI)
	return h
}
