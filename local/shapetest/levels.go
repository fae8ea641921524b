package shapetest

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/operator"
	"github.com/galley-run/galley/pkg/prices"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// messagesCall is what one Messages call of the provider stand-in counts.
var messagesCall = prices.Tokens{Input: providerstandin.MessagesUsage.Input, Output: providerstandin.MessagesUsage.Output,
	CacheRead: providerstandin.MessagesUsage.CacheRead, CacheWrite: providerstandin.MessagesUsage.CacheWrite}

// ModelCapTokens is the house's cap on each worker's model use in the
// adversarial scenario (galley serve's --model-cap-tokens, the task's
// GALLEY_MODEL_CAP_TOKENS): two of the provider stand-in's Messages calls.
// The attacker's one call of its own fits under it; the usage worker's
// third call is refused.
var ModelCapTokens = 2 * (messagesCall.Input + messagesCall.Output + messagesCall.CacheRead + messagesCall.CacheWrite)

// usageAndLevels runs two more workers in the adversarial house, for
// what the operator sees of them. One makes model calls through its model
// proxy until the house's cap refuses one: the worker list shows the model,
// the tokens the provider counted and their cost at galley's price table,
// and its event log a warning that says the budget was reached and why.
// The other is launched with a brief that holds the house's Anthropic key:
// its harness refuses to start the agent with it, and its event log has an
// error that says why, without the key.
func usageAndLevels(t *testing.T, h House, w World) {
	client := operator.NewClient(h.Endpoint(), h.OperatorToken())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	doneOf := func(handle string) func(protocol.MailMessage) bool {
		return func(m protocol.MailMessage) bool {
			return m.Kind == protocol.MsgWorkerDone && m.Worker != nil && m.Worker.Handle == handle
		}
	}

	before := len(w.Provider.Calls())
	user, _ := launch(t, h, "k-usage", "", "adv/usage", "#!standin\nmodel first\nmodel second\nmodel third\n"+
		`tool post_status {"body":"model: $LAST"}`+"\n"+`tool finish {"outcome":"succeeded","body":"modelled"}`)
	third := h.Next(t, "the usage worker's status", Kind(protocol.MsgStatus, "model: "))
	h.Next(t, "the usage worker's worker-done", doneOf(user))
	h.Ended(t, user)
	calls := w.Provider.Calls()[before:]
	t.Run("the model cap refused the third call", func(t *testing.T) {
		if len(calls) != 2 {
			t.Errorf("the provider answered %d of the usage worker's calls, want 2 (a cap of %d tokens, %d a call)", len(calls), ModelCapTokens, ModelCapTokens/2)
		}
		if !strings.HasPrefix(third.Body, "model: model call refused: ") || !strings.Contains(third.Body, "model budget") {
			t.Errorf("the third model call: %s, want refused for the model budget", third.Body)
		}
	})
	t.Run("the warning in the event log", func(t *testing.T) {
		es := eventsUntil(t, h, user, func(es []store.Event) bool { return HasEvent(es, eventlog.KindWarning, nil) })
		i := slices.IndexFunc(es, func(e store.Event) bool { return e.Kind == eventlog.KindWarning })
		if i < 0 {
			t.Fatalf("no warning in the usage worker's event log: %v", kinds(es))
		}
		e := es[i]
		if e.Fields["budget"] != "reached" || !strings.Contains(e.Text, "model budget reached") ||
			!strings.Contains(e.Fields["why"], "model budget") || e.Fields["tokens"] != strconv.FormatInt(ModelCapTokens, 10) {
			t.Errorf("the warning does not say that the model budget was reached and why: %s %v", e.Text, e.Fields)
		}
	})
	t.Run("the worker list's model, tokens and cost", func(t *testing.T) {
		if len(calls) == 0 {
			t.Fatal("no model call reached the provider")
		}
		model := calls[0].Model
		want := prices.Tokens{Input: 2 * messagesCall.Input, Output: 2 * messagesCall.Output,
			CacheRead: 2 * messagesCall.CacheRead, CacheWrite: 2 * messagesCall.CacheWrite}
		price, ok := prices.Lookup(prices.All(), model)
		if !ok {
			t.Fatalf("galley's price table has no price for %s, the model the stand-in CLI calls", model)
		}
		nano, _ := price.RequestNanoUSD(messagesCall)
		cost := (2*nano + 500) / 1000
		var row operator.WorkerView
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			ws, err := client.Workers(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(ws, func(v operator.WorkerView) bool { return v.Handle == user }); i >= 0 {
				row = ws[i]
			}
			if tk := row.Tokens; tk != nil && tk.Input != nil && *tk.Input == want.Input || time.Now().After(deadline) {
				break
			}
		}
		if row.Handle == "" {
			t.Fatalf("the worker list does not show %s", user)
		}
		got := func(n *int64) int64 {
			if n == nil {
				return -1
			}
			return *n
		}
		if row.Model != model || row.Agent != "claude" {
			t.Errorf("the worker list shows agent %q model %q, want claude and %q (the model its calls named)", row.Agent, row.Model, model)
		}
		if tk := row.Tokens; tk == nil || got(tk.Input) != want.Input || got(tk.Output) != want.Output ||
			got(tk.CacheRead) != want.CacheRead || got(tk.CacheWrite) != want.CacheWrite {
			t.Errorf("the worker list shows tokens %s, want the provider's count of two calls %+v", jsonText(row.Tokens), want)
		}
		if c := row.Cost; c == nil || c.MicroUSD != cost || cost <= 0 || c.Basis != protocol.BasisComputed {
			t.Errorf("the worker list shows cost %s, want %d µ$ computed at galley's price for %s", jsonText(row.Cost), cost, model)
		}
	})

	// A brief that holds the house's key. (A coordinator that pasted it:
	// the agent must never hold it.)
	before = len(w.Provider.Calls())
	refused, _ := launch(t, h, "k-refused", "", "adv/refused", "#!standin\n# the key "+w.AnthropicKey+"\n"+
		`tool finish {"outcome":"succeeded","body":"ran"}`)
	done := h.Next(t, "the refused agent's worker-done", doneOf(refused))
	h.Ended(t, refused)
	t.Run("the error in the event log", func(t *testing.T) {
		if done.Outcome != protocol.OutcomeFailed {
			t.Errorf("the worker whose agent was refused its start: %s %s, want failed", done.Outcome, done.Body)
		}
		if n := len(w.Provider.Calls()) - before; n != 0 {
			t.Errorf("%d model calls reached the provider from an agent that was never started", n)
		}
		es := eventsUntil(t, h, refused, func(es []store.Event) bool { return HasEvent(es, eventlog.KindError, nil) })
		i := slices.IndexFunc(es, func(e store.Event) bool { return e.Kind == eventlog.KindError })
		if i < 0 {
			t.Fatalf("no error in the refused worker's event log: %v", kinds(es))
		}
		if e := es[i]; !strings.HasPrefix(e.Text, "refusing the agent command") || !strings.Contains(e.Text, "anthropic key") {
			t.Errorf("the error does not say why the agent was not started: %s %v", e.Text, e.Fields)
		}
		if HasEvent(es, eventlog.KindHarness, map[string]string{"event": "agent-started"}) {
			t.Error("the refused worker's log says its agent started")
		}
		for _, e := range es {
			if strings.Contains(jsonText(e), w.AnthropicKey) {
				t.Errorf("event %d holds the house key", e.Seq)
			}
		}
		if strings.Contains(done.Body, w.AnthropicKey) {
			t.Error("the worker-done holds the house key")
		}
	})
}

// eventsUntil reads a worker's log until ok holds of it (events are
// appended off the path of the call that made them) or a bound passes.
func eventsUntil(t *testing.T, k Kitchn, handle string, ok func([]store.Event) bool) []store.Event {
	t.Helper()
	var es []store.Event
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if es = Events(t, k, handle); ok(es) || time.Now().After(deadline) {
			return es
		}
	}
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
