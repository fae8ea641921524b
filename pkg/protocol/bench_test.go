package protocol

import (
	"encoding/json"
	"testing"
)

var launchBody = []byte(`{"run":"run-1","request":{"house":"origin89","backend":"sandbox","credential":"sandbox-token","task":"issue-195","attempt":1,"key":"k-8d2f","effect":{"executor":"worker","effect":{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"Fix the flaky test in pkg/store: TestLeaseExpiry fails about once in fifty runs under -race. Find the cause, fix it, and add a regression test.","branch":"kitchen/issue-195","agent":{"agent":"codex","model":"gpt-6-sol","effort":"high"}}}}}`)

// BenchmarkDecodeEffectCall decodes and validates a typical launch: the
// envelope, then the worker effect, as the effects handler does.
func BenchmarkDecodeEffectCall(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(launchBody)))
	for b.Loop() {
		c, err := DecodeEffectCall(launchBody)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeWorkerEffect(c.Request.Effect.Effect); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFingerprint re-encodes the launch canonically and hashes it.
func BenchmarkFingerprint(b *testing.B) {
	c, err := DecodeEffectCall(launchBody)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Fingerprint(c); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdlibUnmarshal is the baseline: encoding/json into the same
// types, with none of the checks.
func BenchmarkStdlibUnmarshal(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(launchBody)))
	for b.Loop() {
		var c EffectCall
		if err := json.Unmarshal(launchBody, &c); err != nil {
			b.Fatal(err)
		}
		var e WorkerEffect
		if err := json.Unmarshal(c.Request.Effect.Effect, &e); err != nil {
			b.Fatal(err)
		}
	}
}
