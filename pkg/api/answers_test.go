package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
	"github.com/galley-run/galley/pkg/workerapi"
)

// TestAnswersAreTheEncoders: through the real handler and service, every
// answer galley sends is read by the client's strict parser, and is byte
// for byte what package protocol's encoder makes of what was read: the
// encoders, which their own tests hold to the client's parser, are what
// the server sends.
func TestAnswersAreTheEncoders(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	kc := client.New(h.srv.URL, token)
	// same checks that body is what encode makes of what parse read.
	same := func(what string, body []byte, parse func([]byte) (any, error), encode func(any) ([]byte, error)) {
		t.Helper()
		v, err := parse(body)
		if err != nil {
			t.Fatalf("%s: the client cannot read %s: %v", what, body, err)
		}
		want, err := encode(v)
		if err != nil || !bytes.Equal(body, want) {
			t.Errorf("%s: sent %s\nthe encoder makes %s (%v)", what, body, want, err)
		}
	}
	outcome := func(b []byte) (any, error) { return protocol.ParseEffectOutcome(b, contract.DefaultBackend) }
	encodeOutcome := func(v any) ([]byte, error) { return protocol.EncodeEffectOutcome(v.(protocol.EffectOutcome)) }
	lookup := func(b []byte) (any, error) { return protocol.ParseLookupAnswer(b, contract.DefaultBackend) }
	encodeLookup := func(v any) ([]byte, error) { return protocol.EncodeLookupAnswer(v.(protocol.LookupAnswer)) }
	mailbox := func(b []byte) (any, error) { return protocol.ParseMailboxAnswer(b) }
	encodeMailbox := func(v any) ([]byte, error) { return protocol.EncodeMailboxAnswer(v.(protocol.MailboxAnswer)) }
	read := func(route contract.Route, body string) []byte {
		t.Helper()
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		a, err := kc.Call(ctx, route, b, "", 0)
		if err != nil || a.Status != http.StatusOK {
			t.Fatalf("%s: %d %s %v", route.Pattern(), a.Status, a.Body, err)
		}
		return a.Body
	}

	same("descriptor", read(contract.RouteDescriptor, ""),
		func(b []byte) (any, error) { return protocol.ParseDescriptor(b) },
		func(v any) ([]byte, error) { return protocol.EncodeDescriptor(v.(protocol.Descriptor)) })

	launchCall := envelope("k-enc", launch)
	applied := read(contract.RouteEffects, launchCall)
	same("applied", applied, outcome, encodeOutcome)
	o, _ := protocol.ParseEffectOutcome(applied, contract.DefaultBackend)
	if o.Status != protocol.StatusApplied {
		t.Fatalf("launch: %s", applied)
	}
	worker := o.Receipt.Created[0]
	same("lookup applied", read(contract.RouteLookup, launchCall), lookup, encodeLookup)
	same("lookup absent", read(contract.RouteLookup, envelope("k-never", launch)), lookup, encodeLookup)
	crossHouse := strings.Replace(envelope("k-cross", launch), `"house":"origin89"`, `"house":"elsewhere"`, 1)
	refused := read(contract.RouteEffects, crossHouse)
	same("not applied", refused, outcome, encodeOutcome)
	if !strings.Contains(string(refused), protocol.ReasonCrossHouse) {
		t.Errorf("another house's launch answers %s", refused)
	}

	wc, _ := json.Marshal(protocol.WorkerCall{Worker: worker})
	same("observe", read(contract.RouteObserve, string(wc)),
		func(b []byte) (any, error) { return protocol.ParseObservation(b) },
		func(v any) ([]byte, error) { return protocol.EncodeObservation(v.(protocol.Observation)) })
	same("usage", read(contract.RouteUsage, string(wc)),
		func(b []byte) (any, error) { return protocol.ParseUsageAnswer(b) },
		func(v any) ([]byte, error) { return protocol.EncodeUsageAnswer(v.(protocol.UsageAnswer)) })
	same("inventory", read(contract.RouteInventory, ""),
		func(b []byte) (any, error) { return protocol.ParseInventory(b) },
		func(v any) ([]byte, error) { return protocol.EncodeInventory(v.(protocol.Inventory)) })

	// A row whose text encoding/json would escape (<, >, &), so that
	// another encoding could not pass for the encoder's.
	if _, err := h.env.Service.WorkerPost(ctx, worker.Handle, workerapi.PostRequest{Kind: protocol.MsgQuestion,
		Subject: "<b> & </b>", Body: "Which <API>, v1 & v2?"}); err != nil {
		t.Fatal(err)
	}
	next := read(contract.RouteNext, `{"run":"run-1","coordinator":"c1"}`)
	same("next", next, mailbox, encodeMailbox)
	if !strings.Contains(string(next), "Which <API>, v1 & v2?") {
		t.Errorf("next answers %s, want the question", next)
	}
	same("await", read(contract.RouteAwait, `{"run":"run-enc","coordinator":"c1","waitMs":0}`), mailbox, encodeMailbox)
	same("acknowledge", read(contract.RouteAcknowledge, `{"run":"run-enc","coordinator":"c1","delivery":"d-none"}`), mailbox, encodeMailbox)
	for _, tc := range []struct {
		coordinator string
		fenced      bool
	}{{"c1", false}, {"c2", false}, {"c1", true}} {
		fenced, err := kc.Adopt(ctx, "run-adopt", tc.coordinator)
		if err != nil || fenced != tc.fenced {
			t.Errorf("adopt by %s: fenced %v, %v; want %v", tc.coordinator, fenced, err, tc.fenced)
		}
		body := read(contract.RouteAdopt, `{"run":"run-adopt","coordinator":"`+tc.coordinator+`"}`)
		if want := protocol.EncodeAdoptAnswer(tc.fenced); !bytes.Equal(body, want) {
			t.Errorf("adopt by %s again: %s, want %s", tc.coordinator, body, want)
		}
	}
}

// brokenReads answers an observation the client would not read, as galley
// would through a bug of its own; everything else is the real service's.
type brokenReads struct{ api.Reads }

func (brokenReads) Observe(context.Context, protocol.Resource) (protocol.Observation, error) {
	return protocol.Observation{State: "running"}, nil
}

// TestUnreadableAnswerIsUncertain: an answer its encoder refuses is never
// sent: the call is answered 500, which leaves the client uncertain, and
// the refusal is logged.
func TestUnreadableAnswerIsUncertain(t *testing.T) {
	h := newHarness(t)
	logs := &bytes.Buffer{}
	srv := httptest.NewServer(api.New(api.WithReads(brokenReads{h.env.Service}), api.WithAuthenticator(api.StaticToken(token)),
		api.WithLogger(slog.New(slog.NewJSONHandler(logs, nil)))))
	t.Cleanup(srv.Close)
	w := protocol.Resource{Kind: protocol.KindWorker, Backend: contract.DefaultBackend, Handle: "w-1"}
	_, err := client.New(srv.URL, token, client.WithTimeout(10*time.Second)).Observe(context.Background(), w)
	if err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Fatalf("observe answered %v, want a 500", err)
	}
	if !strings.Contains(logs.String(), "cannot encode observation") || !strings.Contains(logs.String(), `"status":500`) {
		t.Errorf("the refusal is not logged: %s", logs)
	}
}
