package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// seen is one request as the server saw it.
type seen struct {
	method, path string
	header       http.Header
	body         string
}

// recorder is a kitchn-facing server that records each request and
// answers with answer.
type recorder struct {
	mu     sync.Mutex
	reqs   []seen
	answer func(w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, seen{r.Method, r.URL.Path, r.Header.Clone(), string(b)})
	rec.mu.Unlock()
	rec.answer(w, r)
}

func (rec *recorder) last(t *testing.T) seen {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("no request reached the server")
	}
	return rec.reqs[len(rec.reqs)-1]
}

func serve(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*recorder, string) {
	t.Helper()
	rec := &recorder{answer: answer}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func answer(body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }
}

const receipt = `{"reference":"req-1","created":[{"kind":"worker","backend":"galley","handle":"w-1"}],"touched":[]}`

// TestSpeaksAsKitchn: every call names its route's method and path, asks
// for JSON, carries the bearer token, and sends its body compact and
// without HTML escaping; an effect carries its key in Idempotency-Key,
// and nothing else does.
func TestSpeaksAsKitchn(t *testing.T) {
	rec, url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case contract.PathEffects:
			io.WriteString(w, `{"status":"applied","receipt":`+receipt+`}`)
		case contract.PathDescriptor:
			io.WriteString(w, `{"backend":"galley","house":"h","capabilities":{"worker.cancel":"supported"}}`)
		case contract.PathAwait:
			io.WriteString(w, `{"status":"empty"}`)
		}
	})
	c := client.New(url+"/", "tok-1")
	ctx := context.Background()
	brief := "fix <this> & that"
	eff, _ := client.Encode(protocol.WorkerEffect{Type: protocol.OpLaunch, Brief: &brief})
	call := protocol.EffectCall{Run: "run-1", Request: protocol.EffectRequest{House: "h", Backend: "galley", Credential: "galley-token",
		Task: "t", Attempt: 1, Key: "k-1", Effect: protocol.EffectTarget{Executor: protocol.ExecutorWorker, Effect: eff}}}
	o, err := c.Apply(ctx, call)
	if err != nil || o.Status != protocol.StatusApplied || o.Receipt.Created[0].Handle != "w-1" {
		t.Fatalf("apply: %+v, %v", o, err)
	}
	r := rec.last(t)
	if r.method != "POST" || r.path != contract.PathEffects || r.header.Get("Accept") != "application/json" ||
		r.header.Get("Authorization") != "Bearer tok-1" || r.header.Get("Idempotency-Key") != "k-1" ||
		r.header.Get("Content-Type") != "application/json" || r.header.Get("Expect") != "" {
		t.Errorf("effect sent as %s %s %v", r.method, r.path, r.header)
	}
	if !strings.Contains(r.body, `"brief":"fix <this> & that"`) || strings.Contains(r.body, "\n") || strings.Contains(r.body, `": `) {
		t.Errorf("effect body %s: want compact JSON without HTML escaping", r.body)
	}
	var back protocol.EffectCall
	if err := json.Unmarshal([]byte(r.body), &back); err != nil || back.Request.Key != "k-1" {
		t.Errorf("effect body %s reads back as %+v, %v", r.body, back, err)
	}

	if _, err := c.Descriptor(ctx); err != nil {
		t.Fatal(err)
	}
	r = rec.last(t)
	if r.method != "GET" || r.path != contract.PathDescriptor || r.body != "" || r.header.Get("Idempotency-Key") != "" ||
		r.header.Get("Content-Type") != "" {
		t.Errorf("descriptor sent as %s %s %q %v", r.method, r.path, r.body, r.header)
	}
	if _, err := c.Await(ctx, "run-1", "c1", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if r = rec.last(t); r.path != contract.PathAwait || r.body != `{"run":"run-1","coordinator":"c1","waitMs":50}` {
		t.Errorf("await sent %s %s", r.path, r.body)
	}

	// Without a token, no Authorization header at all; asked to, it asks
	// before sending a body.
	if _, err := c.WithToken("").Descriptor(ctx); err != nil {
		t.Fatal(err)
	}
	if r = rec.last(t); r.header.Get("Authorization") != "" {
		t.Errorf("no token sent Authorization %q", r.header.Get("Authorization"))
	}
	if _, err := client.New(url, "tok-1", client.WithExpectContinue()).Effect(ctx, call); err != nil {
		t.Fatal(err)
	}
	if r = rec.last(t); r.header.Get("Expect") != "100-continue" {
		t.Errorf("WithExpectContinue sent Expect %q", r.header.Get("Expect"))
	}
}

// TestReadsStrictly: a read answers only a 200 the client's parser reads;
// a redirect is never followed; another status is an error that quotes the
// body with the token taken out; an answer over 1 MiB is refused.
func TestReadsStrictly(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		kind   galleyerr.Kind
		want   string
	}{
		{"unreadable", answer(`{"state":"ready","outcome":"succeeded"}`), galleyerr.Invalid, "outcome"},
		{"extra field", answer(`{"state":"ready","note":1}`), galleyerr.Invalid, "note"},
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}, galleyerr.Unavailable, "status 302: a redirect, which the client never follows"},
		{"error status", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"busy for tok-secret"}`)
		}, galleyerr.Unavailable, `status 503 ("{\"error\":\"busy for [token]\"}")`},
		{"too large", answer(`{"state":"ready","x":"` + strings.Repeat("x", client.MaxAnswer) + `"}`), galleyerr.TooLarge, "larger than 1 MiB"},
	} {
		rec, url := serve(t, tc.answer)
		_, err := client.New(url, "tok-secret").Observe(ctx, protocol.Resource{Kind: protocol.KindWorker, Backend: "galley", Handle: "w-1"})
		if galleyerr.KindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want kind %v saying %q", tc.name, err, tc.kind, tc.want)
		}
		rec.mu.Lock()
		if n := len(rec.reqs); n != 1 {
			t.Errorf("%s: %d requests, want 1 (no redirect followed)", tc.name, n)
		}
		rec.mu.Unlock()
	}
	rec, url := serve(t, answer(`{"state":"settled","outcome":"succeeded"}`))
	o, err := client.New(url, "t").Observe(ctx, protocol.Resource{Kind: protocol.KindWorker, Backend: "galley", Handle: "w-1"})
	if err != nil || o.State != protocol.StateSettled || rec.last(t).body != `{"worker":{"kind":"worker","backend":"galley","handle":"w-1"}}` {
		t.Errorf("observe: %+v, %v", o, err)
	}
}

// TestNoAnswer: a call that gets no answer is Unavailable, says why
// without the URL, and keeps the transport's error; the deadline is the
// client's, with await's wait on top.
func TestNoAnswer(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = client.New("http://"+addr, "t").Inventory(ctx)
	var oe *net.OpError
	if galleyerr.KindOf(err) != galleyerr.Unavailable || !errors.As(err, &oe) || oe.Op != "dial" || strings.Contains(err.Error(), "http://") {
		t.Errorf("refused connection: %v", err)
	}
	if err == nil || !strings.HasPrefix(err.Error(), contract.RouteInventory.Pattern()+": unavailable: transport: ") {
		t.Errorf("refused connection says %v", err)
	}

	hold := make(chan struct{})
	defer close(hold)
	_, url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		case <-time.After(300 * time.Millisecond):
			io.WriteString(w, `{"status":"empty"}`)
		}
	})
	c := client.New(url, "t", client.WithTimeout(100*time.Millisecond))
	if _, err := c.Next(ctx, "r", "c"); galleyerr.KindOf(err) != galleyerr.Unavailable || !strings.Contains(err.Error(), "no answer within the client deadline") {
		t.Errorf("next past the deadline: %v", err)
	}
	if m, err := c.Await(ctx, "r", "c", time.Second); err != nil || m.Status != protocol.MailEmpty {
		t.Errorf("await within its wait: %+v, %v", m, err)
	}
}

// TestRawBytes: a lookup and a delivery keep the receipt's and the
// delivery's bytes as sent, for replays that must match byte for byte.
func TestRawBytes(t *testing.T) {
	delivery := `{"id":"d-1","messages":[{"id":"m-1","kind":"status","worker":{"kind":"worker","backend":"galley","handle":"w-1"},"body":"x"}],"unreadable":0}`
	_, url := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == contract.PathLookup {
			io.WriteString(w, `{"status":"applied","receipt":`+receipt+`}`)
			return
		}
		io.WriteString(w, `{"status":"delivery","delivery":`+delivery+`}`)
	})
	c := client.New(url, "t")
	a, raw, err := c.Lookup(context.Background(), protocol.EffectCall{Run: "r"})
	if err != nil || a.Status != protocol.StatusApplied || string(raw) != receipt {
		t.Errorf("lookup: %+v %s %v", a, raw, err)
	}
	m, err := c.Acknowledge(context.Background(), "r", "c", "d-0")
	if err != nil || m.Delivery.ID != "d-1" || string(m.Raw) != delivery {
		t.Errorf("acknowledge: %+v %s %v", m, m.Raw, err)
	}
	// A receipt naming another backend is unreadable to a client bound to
	// this one.
	if _, _, err := client.New(url, "t", client.WithBackend("other")).Lookup(context.Background(), protocol.EffectCall{Run: "r"}); err == nil {
		t.Error("a receipt of another backend was read")
	}
}
