package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// The fuzzers hold these properties on any input: nothing panics; every
// error has a kind the API maps to an answer (Malformed or Invalid, or
// Unsupported for an effect); whatever is accepted encodes and decodes back
// to the same value. `go test` runs their seeds and testdata/fuzz corpora;
// `go test -fuzz=FuzzX` explores.

func wantKindIn(t *testing.T, err error, kinds ...galleyerr.Kind) {
	t.Helper()
	k := galleyerr.KindOf(err)
	for _, want := range kinds {
		if k == want {
			return
		}
	}
	t.Fatalf("error of kind %v, want one of %v: %v", k, kinds, err)
}

func toAny(v *jvalue) any {
	switch v.kind {
	case jNull:
		return nil
	case jBool:
		return v.b
	case jNumber:
		return json.Number(v.s)
	case jString:
		return v.s
	case jArray:
		a := make([]any, len(v.kids))
		for i := range v.kids {
			a[i] = toAny(&v.kids[i].val)
		}
		return a
	default:
		m := make(map[string]any, len(v.kids))
		for i := range v.kids {
			m[v.kids[i].key] = toAny(&v.kids[i].val)
		}
		return m
	}
}

// FuzzParseJSON holds the reader to encoding/json: the same documents
// accepted, the same values read, and canonical output that reads back the
// same.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{
		exampleCall, `{}`, `[]`, `""`, `0`, `-0.5e+3`, `null`, `true`, `{"a":1,"a":2}`,
		`"\ud83c\udf73\ud800\udc00\udfff\u0000\/"`, "\"\xff\xc3\"", `[1,]`, `{"a" 1}`, `01`, `1.`, `"\u12"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseJSON(b)
		if valid := json.Valid(b); valid != (err == nil) {
			t.Fatalf("json.Valid %v, parseJSON %v", valid, err)
		}
		if err != nil {
			wantKindIn(t, err, galleyerr.Malformed)
			return
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var std any
		if err := d.Decode(&std); err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		if got := toAny(&v); !reflect.DeepEqual(got, std) {
			t.Fatalf("read %#v, encoding/json read %#v", got, std)
		}
		canon := appendCanonical(nil, &v)
		again, err := parseJSON(canon)
		if err != nil {
			t.Fatalf("canonical form %q does not parse: %v", canon, err)
		}
		if !reflect.DeepEqual(toAny(&again), toAny(&v)) {
			t.Fatalf("canonical form %q reads differently", canon)
		}
		if c2 := appendCanonical(nil, &again); !bytes.Equal(c2, canon) {
			t.Fatalf("canonical form is not stable: %q then %q", canon, c2)
		}
	})
}

func addEffectCallSeeds(f *testing.F) {
	w := `{"kind":"worker","backend":"sandbox","handle":"w-17"}`
	for _, effect := range []string{
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"Fix the flaky test.","branch":"kitchen/issue-195","agent":{"agent":"codex","model":"gpt-6-sol"}}`,
		`{"type":"launch-worker","role":"commis","workspace":{"type":"existing","resource":{"kind":"worktree","backend":"sandbox","handle":"wt-1"}},"brief":"b","pinned":{"head":"0123456789abcdef0123456789abcdef01234567","report_path":"r/out.md"},"agent":{"agent":"claude","model":"opus","effort":"high"}}`,
		`{"type":"message-worker","worker":` + w + `,"body":"hello\n\u00e9"}`,
		`{"type":"reply-to-worker","worker":` + w + `,"question":"msg-3","body":"v2"}`,
		`{"type":"cancel-worker","worker":` + w + `}`,
		`{"type":"release-resource","resource":` + w + `}`,
		`{"type":"cancel-worker","worker":` + w + `,"body":"x"}`,
		`{"type":"launch-schedule"}`,
	} {
		f.Add([]byte(`{"run":"run-1","request":{"house":"origin89","backend":"sandbox","credential":"sandbox-token","task":"issue-195","attempt":1,"key":"k-8d2f","effect":{"executor":"worker","effect":` + effect + `}}}`))
	}
	f.Add([]byte(exampleCall))
	f.Add([]byte(`{"run":"r","request":{"house":"h","backend":"b","credential":"c","task":"t","attempt":3,"key":"k","effect":{"executor":"github","effect":{"x":[1,{"y":null}]}}}}`))
	f.Add([]byte(`{"run":"r","request":{"house":"h","backend":"b","credential":"c","task":"t","attempt":"1","key":"k","effect":{"executor":"worker","effect":{}}}}`))
	f.Add([]byte(`{"run":"r"}`))
	f.Add([]byte(`[`))
}

func FuzzDecodeEffectCall(f *testing.F) {
	addEffectCallSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeEffectCall(body)
		if err != nil {
			wantKindIn(t, err, galleyerr.Malformed, galleyerr.Invalid)
			if !json.Valid(body) && galleyerr.KindOf(err) != galleyerr.Malformed {
				t.Fatalf("not JSON, but %v", err)
			}
			return
		}
		var effect WorkerEffect
		if c.Request.Effect.Executor == ExecutorWorker {
			effect, err = DecodeWorkerEffect(c.Request.Effect.Effect)
			if err != nil {
				// The effect is well-formed JSON, so never Malformed.
				wantKindIn(t, err, galleyerr.Invalid, galleyerr.Unsupported)
				if _, err := Fingerprint(c); err == nil {
					t.Fatal("a fingerprint for an effect that does not decode")
				}
				return
			}
			checkEffectRoundTrip(t, effect)
		}
		canon, err := EncodeEffectCall(c)
		if err != nil {
			t.Fatalf("accepted call does not encode: %v", err)
		}
		again, err := DecodeEffectCall(canon)
		if err != nil {
			t.Fatalf("canonical form %q refused: %v", canon, err)
		}
		a, b := c, again
		a.Request.Effect.Effect, b.Request.Effect.Effect = nil, nil
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("re-decoded %+v, want %+v", b, a)
		}
		if c.Request.Effect.Executor == ExecutorWorker {
			e2, err := DecodeWorkerEffect(again.Request.Effect.Effect)
			if err != nil || !reflect.DeepEqual(e2, effect) {
				t.Fatalf("re-decoded effect %+v, %v; want %+v", e2, err, effect)
			}
		}
		fp1, err1 := Fingerprint(c)
		fp2, err2 := Fingerprint(again)
		if err1 != nil || err2 != nil || fp1 != fp2 {
			t.Fatalf("fingerprints %s %v, %s %v", fp1, err1, fp2, err2)
		}
	})
}

// checkEffectRoundTrip encodes an accepted effect two ways (galley's
// canonical encoder and encoding/json) and decodes both back.
func checkEffectRoundTrip(t *testing.T, e WorkerEffect) {
	t.Helper()
	canon := EncodeWorkerEffect(e)
	e2, err := DecodeWorkerEffect(canon)
	if err != nil || !reflect.DeepEqual(e2, e) {
		t.Fatalf("canonical %s re-decoded to %+v, %v; want %+v", canon, e2, err, e)
	}
	std, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	e3, err := DecodeWorkerEffect(std)
	if err != nil || !reflect.DeepEqual(e3, e) {
		t.Fatalf("encoding/json %s re-decoded to %+v, %v; want %+v", std, e3, err, e)
	}
}

func FuzzDecodeWorkerEffect(f *testing.F) {
	w := `{"kind":"worker","backend":"sandbox","handle":"w-17"}`
	for _, s := range []string{
		`{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"Fix the flaky test.","branch":"kitchen/issue-195","agent":{"agent":"codex","model":"gpt-6-sol"}}`,
		`{"type":"launch-worker","role":"inspector","workspace":{"type":"existing","resource":{"kind":"worktree","backend":"b","handle":"wt"}},"brief":"\u0062","branch":null,"pinned":{"head":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","report_path":"a/b"},"agent":{"agent":"claude","effort":"x.y"}}`,
		`{"type":"message-worker","worker":` + w + `,"body":"hi"}`,
		`{"type":"reply-to-worker","worker":` + w + `,"question":"q","body":"hi"}`,
		`{"type":"cancel-worker","worker":` + w + `}`,
		`{"type":"release-resource","resource":{"kind":"schedule","backend":"b","handle":"s"}}`,
		`{"type":"launch-worker","branch":"a..b"}`,
		`{"type":"x"}`, `[]`, `null`, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, err := DecodeWorkerEffect(raw)
		if err != nil {
			if json.Valid(raw) {
				wantKindIn(t, err, galleyerr.Invalid, galleyerr.Unsupported)
			} else {
				wantKindIn(t, err, galleyerr.Malformed)
			}
			return
		}
		checkEffectRoundTrip(t, e)
	})
}

var mailboxOps = []string{MailboxNext, MailboxAcknowledge, MailboxAwait, MailboxAdopt}

func FuzzDecodeMailboxCall(f *testing.F) {
	for i, s := range []string{
		`{"run":"run-1","coordinator":"coordinator-1"}`,
		`{"run":"run-1","coordinator":"coordinator-1","delivery":"d-4"}`,
		`{"run":"run-1","coordinator":"coordinator-1","waitMs":25000}`,
		`{"run":"run-1","coordinator":"c2"}`,
		`{"run":"r","coordinator":"c","waitMs":900001}`,
		`{"run":"r","coordinator":"c","delivery":null}`,
	} {
		f.Add([]byte(s), uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, op uint8) {
		c, err := DecodeMailboxCall(body, mailboxOps[int(op)%len(mailboxOps)])
		if err != nil {
			wantKindIn(t, err, galleyerr.Malformed, galleyerr.Invalid)
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMailboxCall(b, mailboxOps[int(op)%len(mailboxOps)])
		if err != nil || !reflect.DeepEqual(again, c) {
			t.Fatalf("%s re-decoded to %+v, %v; want %+v", b, again, err, c)
		}
	})
}

func FuzzDecodeWorkerCall(f *testing.F) {
	for _, s := range []string{
		`{"worker":{"kind":"worker","backend":"sandbox","handle":"w-17"}}`,
		`{"worker":{"kind":"worktree","backend":"sandbox","handle":"w-17"}}`,
		`{"worker":{"kind":"worker","backend":"sandbox","handle":"w 17"}}`,
		`{"worker":"w"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := DecodeWorkerCall(body)
		if err != nil {
			wantKindIn(t, err, galleyerr.Malformed, galleyerr.Invalid)
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeWorkerCall(b)
		if err != nil || again != c {
			t.Fatalf("%s re-decoded to %+v, %v; want %+v", b, again, err, c)
		}
	})
}

// FuzzParseAnswers feeds one input to every client-side parser. What a
// parser accepts, galley's encoder for that answer must encode, and the
// parser must read back unchanged.
func FuzzParseAnswers(f *testing.F) {
	for _, s := range []string{
		`{"status":"applied","receipt":` + receipt + `}`,
		`{"status":"not-applied","reason":"rate-limited","retryAfterSeconds":30}`,
		`{"status":"not-applied","reason":"unsupported","capability":"worker.cancel"}`,
		`{"status":"absent"}`, `{"status":"unknown"}`,
		`{"state":"settled","outcome":"cancelled"}`, `{"state":"ready"}`, `{"state":"odd"}`,
		`{"resources":[{"resource":` + wRes + `,"owner":"k-8d2f","liveness":"live"},{"resource":` + bRes + `,"owner":null,"liveness":"?"}]}`,
		`{"status":"none"}`,
		`{"status":"reported","report":{"source":"run-42","agent":"codex","model":"gpt-6-sol","tokens":{"input":1200,"output":300},"cost":{"amount":51000,"basis":"reported"}}}`,
		`{"status":"empty"}`, `{"status":"fenced"}`, `{}`,
		`{"status":"delivery","delivery":{"id":"d-4","messages":[{"id":"msg-3","kind":"question","worker":` + wRes + `,"subject":"Which API?","body":"v1 or v2?"},{"id":"msg-4","kind":"worker-done","worker":` + wRes + `,"outcome":"succeeded"}],"unreadable":1}}`,
		`{"backend":"sandbox","house":"origin89","capabilities":{"worker.cancel":"supported","usage.attribution":"partial"},"workerSelection":{"families":["claude","codex"],"model":true,"effort":"with-model"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		roundTrip := func(name string, v any, err error, encode func() ([]byte, error), parse func([]byte) (any, error)) {
			t.Helper()
			if err != nil {
				wantKindIn(t, err, galleyerr.Malformed, galleyerr.Invalid)
				return
			}
			b, err := encode()
			if err != nil {
				t.Fatalf("%s: parsed %+v, but it does not encode: %v", name, v, err)
			}
			again, err := parse(b)
			if err != nil || !reflect.DeepEqual(again, v) {
				t.Fatalf("%s: %s read back as %+v, %v; want %+v", name, b, again, err, v)
			}
		}
		o, err := ParseEffectOutcome(body, "sandbox")
		roundTrip("outcome", o, err, func() ([]byte, error) { return EncodeEffectOutcome(o) },
			func(b []byte) (any, error) { return ParseEffectOutcome(b, "sandbox") })
		l, err := ParseLookupAnswer(body, "sandbox")
		roundTrip("lookup", l, err, func() ([]byte, error) { return EncodeLookupAnswer(l) },
			func(b []byte) (any, error) { return ParseLookupAnswer(b, "sandbox") })
		obs, err := ParseObservation(body)
		roundTrip("observation", obs, err, func() ([]byte, error) { return EncodeObservation(obs) },
			func(b []byte) (any, error) { return ParseObservation(b) })
		inv, err := ParseInventory(body)
		roundTrip("inventory", inv, err, func() ([]byte, error) { return EncodeInventory(inv) },
			func(b []byte) (any, error) { return ParseInventory(b) })
		u, err := ParseUsageAnswer(body)
		roundTrip("usage", u, err, func() ([]byte, error) { return EncodeUsageAnswer(u) },
			func(b []byte) (any, error) { return ParseUsageAnswer(b) })
		m, err := ParseMailboxAnswer(body)
		sendable := true // a kind the client reads but galley never sends
		if err == nil && m.Delivery != nil {
			for _, row := range m.Delivery.Messages {
				sendable = sendable && IsMessageKind(row.Kind)
			}
		}
		if sendable {
			roundTrip("mailbox", m, err, func() ([]byte, error) { return EncodeMailboxAnswer(m) },
				func(b []byte) (any, error) { return ParseMailboxAnswer(b) })
		}
		fenced, err := ParseAdoptAnswer(body)
		roundTrip("adopt", fenced, err, func() ([]byte, error) { return EncodeAdoptAnswer(fenced), nil },
			func(b []byte) (any, error) { return ParseAdoptAnswer(b) })
		d, err := ParseDescriptor(body)
		roundTrip("descriptor", d, err, func() ([]byte, error) { return EncodeDescriptor(d) },
			func(b []byte) (any, error) { return ParseDescriptor(b) })
	})
}
