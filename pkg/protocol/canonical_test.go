package protocol

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// appendCanonicalOld is appendCanonical as it was before it was made
// O(n log n): every key looked up anew among the members, quadratic in their
// number. Fingerprints of stored claims were computed with it, so the new
// encoding must produce its bytes exactly; the tests and FuzzCanonical below
// hold it to that. Do not change it.
func appendCanonicalOld(b []byte, v *jvalue) []byte {
	switch v.kind {
	case jNull:
		return append(b, "null"...)
	case jBool:
		if v.b {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case jNumber:
		return append(b, v.s...)
	case jString:
		return appendString(b, v.s)
	case jArray:
		b = append(b, '[')
		for i := range v.kids {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCanonicalOld(b, &v.kids[i].val)
		}
		return append(b, ']')
	default:
		keys := make([]string, 0, len(v.kids))
		seen := make(map[string]bool, len(v.kids))
		for _, m := range v.kids {
			if !seen[m.key] {
				seen[m.key] = true
				keys = append(keys, m.key)
			}
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			for j := len(v.kids) - 1; j >= 0; j-- {
				if v.kids[j].key == k {
					b = appendCanonicalOld(b, &v.kids[j].val)
					break
				}
			}
		}
		return append(b, '}')
	}
}

// sameCanonical fails t when the two encodings of doc differ. It reports
// whether doc is JSON at all.
func sameCanonical(t *testing.T, doc []byte) bool {
	t.Helper()
	v, err := parseJSON(doc)
	if err != nil {
		return false
	}
	got, want := appendCanonical(nil, &v), appendCanonicalOld(nil, &v)
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical encoding changed for %q:\n got %q\nwant %q", doc, got, want)
	}
	return true
}

// randomDoc writes a JSON document whose objects draw their keys from a
// small alphabet, so that duplicates, shared prefixes, escapes, non-ASCII
// and invalid UTF-8 keys (which collapse to one U+FFFD spelling) are common.
func randomDoc(r *rand.Rand, b *strings.Builder, depth int) {
	// Keys as spelled in JSON source.
	keys := []string{"", "a", "b", "ab", `a\u0000`, "B", "é", `\u00e9`, "e\u0301", "\xff", "\xfe", `\ud800`, `\"`, "~", "a b", "\U0001F373", `\/`}
	switch k := r.IntN(8); {
	case depth > 4 || k < 3:
		scalars := []string{"null", "true", "false", "0", "-1.5e3", `""`, `"x\n\u00e9"`, `"\ud800"`, "\"\xff\""}
		b.WriteString(scalars[r.IntN(len(scalars))])
	case k < 5:
		b.WriteByte('[')
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteByte(',')
			}
			randomDoc(r, b, depth+1)
		}
		b.WriteByte(']')
	default:
		b.WriteString("{ ")
		for i := range r.IntN(12) {
			if i > 0 {
				b.WriteString(" ,")
			}
			b.WriteString(`"` + keys[r.IntN(len(keys))] + `"`)
			b.WriteByte(':')
			randomDoc(r, b, depth+1)
		}
		b.WriteString("}")
	}
}

// TestCanonicalMatchesOld holds the encoding to its former output on the
// fuzz corpora of this package, on hand-picked documents and on generated
// ones full of duplicate and awkward keys: a stored fingerprint must still
// match its request.
func TestCanonicalMatchesOld(t *testing.T) {
	docs := []string{
		exampleCall, `{}`, `[]`, `{"a":1,"a":2}`, `{"b":1,"a":2,"b":3,"a":[{"y":1,"x":2,"y":null}]}`,
		`{"\u00e9":1,"é":2,"e\u0301":3}`, "{\"\xff\":1,\"\\ud800\":2,\"\xfe\":3}", `{"a\u0000":1,"a":2,"":3,"":4}`,
		`{"z":{"z":{"z":{}}},"y":[{"b":1,"a":1}]}`,
	}
	n := 0
	for _, d := range docs {
		if !sameCanonical(t, []byte(d)) {
			t.Fatalf("test document %q is not JSON", d)
		}
		n++
	}
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, doc := range corpusInputs(t, f) {
			if sameCanonical(t, doc) {
				n++
			}
			// The effect of a call is encoded on its own too.
			if c, err := DecodeEffectCall(doc); err == nil && len(c.Request.Effect.Effect) > 0 {
				sameCanonical(t, c.Request.Effect.Effect)
			}
		}
	}
	r := rand.New(rand.NewPCG(12, 1))
	for range 20000 {
		var b strings.Builder
		randomDoc(r, &b, 0)
		if !sameCanonical(t, []byte(b.String())) {
			t.Fatalf("generated document %q is not JSON", b.String())
		}
		n++
	}
	if n < 20000+len(docs)+100 {
		t.Fatalf("only %d documents compared: is the corpus missing?", n)
	}
}

// corpusInputs reads the []byte and string values of a `go test fuzz v1`
// corpus file.
func corpusInputs(t *testing.T, path string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Split(string(raw), "\n")[1:] {
		var lit string
		switch {
		case strings.HasPrefix(line, "[]byte(") && strings.HasSuffix(line, ")"):
			lit = line[len("[]byte(") : len(line)-1]
		case strings.HasPrefix(line, "string(") && strings.HasSuffix(line, ")"):
			lit = line[len("string(") : len(line)-1]
		default:
			continue
		}
		s, err := strconv.Unquote(lit)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, []byte(s))
	}
	return out
}

// FuzzCanonical holds the O(n log n) encoding to the quadratic one it
// replaced, byte for byte, and to the fingerprint of a call carrying the
// document as a foreign executor's effect.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		exampleCall, `{}`, `{"a":1,"a":2}`, `{"b":[{"d":1,"c":2,"d":3}],"a":null,"b":0}`,
		"{\"\xff\":1,\"\\ud800\":2}", `{"é":1,"\u00e9":2,"e\u0301":3}`, `[{"":1,"":2}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !sameCanonical(t, b) {
			return
		}
		c := EffectCall{Run: "r", Request: EffectRequest{House: "h", Backend: "b", Credential: "c", Task: "t", Attempt: 1, Key: "k",
			Effect: EffectTarget{Executor: "github", Effect: b}}}
		got, err := EncodeEffectCall(c)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		v, _ := parseJSON(b)
		if want := appendCanonicalOld(nil, &v); !bytes.Contains(got, want) {
			t.Fatalf("call encoding %q does not hold the effect's former encoding %q", got, want)
		}
	})
}

// bigCall returns a call of at most 1 MiB (the API's body limit) whose
// foreign effect is shaped by fill, which appends to the effect until told
// the budget is spent.
func bigCall(fill func(b *bytes.Buffer, room func() int)) []byte {
	const limit = 1 << 20
	head := `{"run":"run-1","request":{"house":"h","backend":"b","credential":"c","task":"t","attempt":1,"key":"k","effect":{"executor":"github","effect":`
	tail := `}}}`
	var b bytes.Buffer
	b.WriteString(head)
	fill(&b, func() int { return limit - len(tail) - b.Len() })
	b.WriteString(tail)
	if b.Len() > limit {
		panic(fmt.Sprintf("bigCall: %d bytes", b.Len()))
	}
	return b.Bytes()
}

// wideCall is a 1 MiB call whose effect is one object of about 80,000
// short keys in shuffled order.
func wideCall() []byte {
	return bigCall(func(b *bytes.Buffer, room func() int) {
		r := rand.New(rand.NewPCG(1, 2))
		var keys []int
		for i := 0; ; i++ {
			// `"k%07d":0,` is 13 bytes, the closing brace 1
			if room() < 13*(len(keys)+1)+1 {
				break
			}
			keys = append(keys, i)
		}
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(b, `"k%07d":0`, k)
		}
		b.WriteByte('}')
	})
}

// deepCall is a 1 MiB call whose effect nests 9,000 objects, each level
// holding a few keys beside the next one.
func deepCall() []byte {
	const depth = 9000
	return bigCall(func(b *bytes.Buffer, room func() int) {
		for d := range depth {
			// Share what is left among the levels still to write, less
			// their own syntax, the closing braces and the innermost null.
			left := depth - d
			budget := (room() - left*len(`{"next":`) - depth - len("null")) / left
			b.WriteByte('{')
			for i := 0; 13*(i+1) <= budget; i++ {
				fmt.Fprintf(b, `"k%07d":1,`, 99-i) // `"k%07d":1,` is 13 bytes
			}
			b.WriteString(`"next":`)
		}
		b.WriteString("null")
		b.WriteString(strings.Repeat("}", depth))
	})
}

var bigCalls = []struct {
	name string
	body func() []byte
}{{"wide", wideCall}, {"deep", deepCall}}

// TestBigCalls checks the benchmarks' calls: just under 1 MiB, valid, and
// encoded as they must be (the wide one by construction, since the
// quadratic encoding takes many seconds on it; the deep one by the former
// encoding).
func TestBigCalls(t *testing.T) {
	for _, bc := range bigCalls {
		body := bc.body()
		if len(body) > 1<<20 || len(body) < 1<<20-64 {
			t.Fatalf("%s call is %d bytes, want just under 1 MiB", bc.name, len(body))
		}
		c, err := DecodeEffectCall(body)
		if err != nil {
			t.Fatalf("%s call: %v", bc.name, err)
		}
		raw := c.Request.Effect.Effect
		if bc.name == "deep" {
			if !sameCanonical(t, raw) {
				t.Fatalf("deep effect is not JSON")
			}
			continue
		}
		v, err := parseJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		want := []byte{'{'}
		for i := range len(v.kids) {
			if i > 0 {
				want = append(want, ',')
			}
			want = fmt.Appendf(want, `"k%07d":0`, i)
		}
		want = append(want, '}')
		if got := appendCanonical(nil, &v); !bytes.Equal(got, want) {
			t.Fatalf("wide effect of %d keys not encoded in key order", len(v.kids))
		}
	}
}

// BenchmarkCanonical1MiB encodes the effect of a 1 MiB call canonically
// (parse, then write), as Fingerprint does for a foreign executor, with the
// current encoding and the quadratic one it replaced.
func BenchmarkCanonical1MiB(b *testing.B) {
	for _, bc := range bigCalls {
		c, err := DecodeEffectCall(bc.body())
		if err != nil {
			b.Fatal(err)
		}
		raw := c.Request.Effect.Effect
		for _, impl := range []struct {
			name string
			enc  func([]byte, *jvalue) []byte
		}{{"new", appendCanonical}, {"old", appendCanonicalOld}} {
			b.Run(bc.name+"/"+impl.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					v, err := parseJSON(raw)
					if err != nil {
						b.Fatal(err)
					}
					impl.enc(nil, &v)
				}
			})
		}
	}
}

// BenchmarkFingerprint1MiB is what a lookup of a 1 MiB call costs in this
// package: decode the call, then fingerprint it.
func BenchmarkFingerprint1MiB(b *testing.B) {
	for _, bc := range bigCalls {
		body := bc.body()
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				c, err := DecodeEffectCall(body)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Fingerprint(c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
