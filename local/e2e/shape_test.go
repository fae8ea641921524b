package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/local/shapetest"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// localHouse is galley serve as the scenarios written once for both shapes
// (local/shapetest) see it: kitchn's client of one run, its files on this
// machine, and, for the adversarial scenario, its confinement and counts.
type localHouse struct {
	s  *server
	mb *mailbox

	// The adversarial scenario's.
	want                  harness.Confinement
	fdsBefore, pidsBefore int
	galleyBefore          int64
}

func newLocalHouse(s *server, run string) *localHouse {
	return &localHouse{s: s, mb: &mailbox{s: s, run: run}}
}

func (h *localHouse) Effect(t *testing.T, key, effect string) (string, protocol.Receipt) {
	t.Helper()
	st, ans := h.s.call(t, "POST", "/v1/effects", effectBody(h.mb.run, key, effect), "Idempotency-Key", key)
	var out struct {
		Status, Reason string
		Receipt        protocol.Receipt
	}
	if err := json.Unmarshal(ans, &out); st != 200 || err != nil {
		return fmt.Sprintf("%d %s", st, ans), protocol.Receipt{}
	}
	return out.Status + out.Reason, out.Receipt
}

func (h *localHouse) Next(t *testing.T, what string, match func(protocol.MailMessage) bool) protocol.MailMessage {
	t.Helper()
	return h.mb.next(t, what, match)
}

func (h *localHouse) Observe(t *testing.T, handle string) protocol.Observation {
	t.Helper()
	st, oc := observe(t, h.s, handle)
	return protocol.Observation{State: st, Outcome: oc}
}

func (h *localHouse) Endpoint() string { return h.s.Endpoint }
func (h *localHouse) Token() string    { return h.s.Token }
func (h *localHouse) House() string    { return "origin89" }

func (h *localHouse) OperatorToken() string {
	b, err := os.ReadFile(h.OperatorTokenFile())
	if err != nil {
		panic(err) // galley serve wrote it before it listened
	}
	return strings.TrimSpace(string(b))
}

// The operator scenario's.

func (h *localHouse) Galley() string { return filepath.Join(binDir, "galley") }
func (h *localHouse) OperatorTokenFile() string {
	return filepath.Join(h.s.Data, "private", "operator-token")
}
func (h *localHouse) TokenFile() string { return filepath.Join(h.s.Data, "private", "token") }

// Restart kills galley serve with SIGKILL and starts a new one on the same
// data (on a port of its own), the mailbox read so far kept.
func (h *localHouse) Restart(t *testing.T) shapetest.OperatorHouse {
	h.s.kill()
	s2 := startServer(t, h.s.Data)
	return &localHouse{s: s2, mb: &mailbox{s: s2, run: h.mb.run, pending: h.mb.pending}}
}

// localHouse is a Restarter (the operator scenario kills galley serve).
var _ shapetest.Restarter = (*localHouse)(nil)

// eventsOf reads a worker's whole retained log through the operator API.
func eventsOf(t *testing.T, s *server, handle string) []store.Event {
	t.Helper()
	return shapetest.Events(t, newLocalHouse(s, ""), handle)
}

func hasEvent(es []store.Event, kind string, fields map[string]string) bool {
	return shapetest.HasEvent(es, kind, fields)
}
