package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/dpop"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/service/servicetest"
	"github.com/galley-run/galley/pkg/workerapi"
)

// The fuzzers of the worker API's decoders hold these properties on any
// body: nothing panics; a refused body is Malformed (answered 400); an
// accepted one encodes and decodes back to the same value; and through
// the real handler and service, no body gets a 5xx or an answer that is
// not JSON. `go test` runs the seeds and testdata/fuzz; `go test -fuzz
// FuzzWorkerRequests ./pkg/api` (or FuzzWorkerRoutes) explores.

// workerRoutes are the worker API's routes with a body, by fuzz selector.
var fuzzRoutes = []string{workerapi.PathReady, workerapi.PathPost, workerapi.PathInbox, workerapi.PathUsage, workerapi.PathExited, workerapi.PathSelf}

func roundTrip[T any](t *testing.T, b []byte) (T, bool) {
	t.Helper()
	var v T
	if err := decodeStrict(b, &v); err != nil {
		if k := galleyerr.KindOf(err); k != galleyerr.Malformed {
			t.Fatalf("refused with kind %v, want Malformed: %v", k, err)
		}
		return v, false
	}
	enc, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("accepted %q but cannot encode it: %v", b, err)
	}
	var again T
	if err := decodeStrict(enc, &again); err != nil {
		t.Fatalf("accepted %q; its encoding %s is refused: %v", b, enc, err)
	}
	if !reflect.DeepEqual(v, again) {
		t.Fatalf("accepted %q as %+v; its encoding %s reads back as %+v", b, v, enc, again)
	}
	return v, true
}

func fuzzSeeds() []struct {
	route byte
	body  string
} {
	return []struct {
		route byte
		body  string
	}{
		{0, `{"evidence":"script started"}`}, {0, ``}, {0, `{"evidence":1}`}, {0, `{"evidence":"x","more":1}`},
		{1, `{"kind":"status","body":"working"}`}, {1, `{"kind":"question","subject":"Which API?","body":"v1 or v2?"}`},
		{1, `{"kind":"worker-done","outcome":"succeeded","body":"done"}`}, {1, `{"kind":"worker-done"}`},
		{1, `{"kind":"heartbeat","body":"a\u0000b"}`}, {1, `{"kind":"status","body":"\ud800"}`}, {1, `{"kind":"nope"}`},
		{2, `{"after":0,"waitMs":0}`}, {2, `{"after":-1,"waitMs":-5}`}, {2, `{"after":9223372036854775808}`}, {2, `{"after":1.5}`},
		{3, `{"report":{"source":"run-42","agent":"codex","model":"gpt","tokens":{"input":1200,"output":300},"cost":{"amount":51000,"basis":"reported"}}}`},
		{3, `{"report":{"source":"x"}}`}, {3, `{"report":{"cost":{"amount":-1,"basis":"guessed"}}}`},
		{4, `{"code":3,"reason":"the agent exited"}`}, {4, `{"code":99999999999999999999}`},
		{5, `{}`}, {5, `[]`}, {1, `{} {}`}, {1, `{`}, {1, "\xff"}, {1, `null`},
	}
}

// FuzzWorkerRequests holds decodeStrict to its properties for every
// worker request type.
func FuzzWorkerRequests(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.route, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route byte, b []byte) {
		switch route % 6 {
		case 0:
			roundTrip[workerapi.ReadyRequest](t, b)
		case 1:
			roundTrip[workerapi.PostRequest](t, b)
		case 2:
			roundTrip[workerapi.InboxRequest](t, b)
		case 3:
			roundTrip[workerapi.UsageRequest](t, b)
		case 4:
			roundTrip[workerapi.ExitedRequest](t, b)
		default:
			roundTrip[workerapi.SelfRequest](t, b)
		}
	})
}

// FuzzWorkerRoutes sends each body to a worker route of the real handler
// over the real service, as a freshly launched worker: the answer is 200,
// 400, 409 or 413 with a JSON body, never a 5xx; a post answered 200
// names its message.
func FuzzWorkerRoutes(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s.route, []byte(s.body))
	}
	env := servicetest.New(f, nil)
	h := New(WithService(env.Service), WithAuthenticator(StaticToken("kitchn-token")),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, route byte, b []byte) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		if path == workerapi.PathInbox {
			// A long poll would hold the fuzzer for up to 25 s.
			var req workerapi.InboxRequest
			if decodeStrict(b, &req) == nil && req.WaitMs > 0 {
				return
			}
		}
		// A fresh worker per input: an earlier input may have settled one.
		key := fmt.Sprintf("k-fuzz-%d", n.Add(1))
		call := protocol.EffectCall{Run: "run-fuzz", Request: protocol.EffectRequest{House: "origin89", Backend: "galley",
			Credential: "galley-token", Task: "t", Attempt: 1, Key: key, Effect: protocol.EffectTarget{Executor: "worker",
				Effect: json.RawMessage(`{"type":"launch-worker","role":"commis","workspace":{"type":"isolated"},"brief":"fuzz"}`)}}}
		raw, err := env.Service.Apply(context.Background(), call, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var receipt protocol.Receipt
		_ = json.Unmarshal(raw, &receipt)
		handle := receipt.Created[0].Handle
		token := env.Runtime.Specs[handle].Token

		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
		pk, err := dpop.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		proof, err := pk.Proof(http.MethodPost, "http://galley.test"+path, token, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", dpop.Scheme+" "+token)
		req.Header.Set(dpop.Header, proof)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("%s %q answered %d %s", path, b, w.Code, w.Body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %q answered a body that is not JSON: %q", path, b, w.Body)
		}
		if w.Code == http.StatusOK && path == workerapi.PathPost {
			var a workerapi.PostAnswer
			if json.Unmarshal(w.Body.Bytes(), &a) != nil || a.ID == "" {
				t.Fatalf("post %q answered 200 without a message id: %s", b, w.Body)
			}
		}
		if strings.Contains(w.Body.String(), token) {
			t.Fatalf("the worker's token is in the answer")
		}
	})
}
