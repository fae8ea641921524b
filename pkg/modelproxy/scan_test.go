package modelproxy

import (
	"strings"
	"testing"
)

// feed writes text one byte at a time, so that every chunk boundary is
// crossed.
func feed(w interface{ Write([]byte) (int, error) }, text string) {
	for i := range len(text) {
		_, _ = w.Write([]byte{text[i]})
	}
}

func TestFieldScanner(t *testing.T) {
	text := `{"id":"x","content":[{"type":"text","text":"a \"usage\": {\"input_tokens\": 9} }"}],` +
		`"model" : "claude-opus-5", "nested":{"usage":{"input_tokens":7}},` +
		`"usage":{"input_tokens":100,"cache_read_input_tokens":50,"output_tokens":20,"extra":[1,{"a":"}"}]},"tail":true}`
	s := newFieldScanner("model", "usage", "nested.usage.input_tokens")
	feed(s, text)
	if got := string(s.value("model")); got != `"claude-opus-5"` {
		t.Errorf("model = %s", got)
	}
	if got := string(s.value("usage")); got != `{"input_tokens":100,"cache_read_input_tokens":50,"output_tokens":20,"extra":[1,{"a":"}"}]}` {
		t.Errorf("usage = %s", got)
	}
	if got := string(s.value("nested.usage.input_tokens")); got != "7" {
		t.Errorf("a scalar three keys down = %q", got)
	}

	// Values in arrays are never wanted; a value past the bound is dropped.
	s = newFieldScanner("usage", "big")
	feed(s, `[{"usage":{"input_tokens":1}}]`)
	if s.value("usage") != nil {
		t.Errorf("a value inside an array was kept: %s", s.value("usage"))
	}
	s.reset()
	s.Write([]byte(`{"big":"` + strings.Repeat("x", maxValueBytes) + `","usage":{"output_tokens":3}}`))
	if s.value("big") != nil || string(s.value("usage")) != `{"output_tokens":3}` {
		t.Errorf("after an oversized value: big %d bytes, usage %s", len(s.value("big")), s.value("usage"))
	}

	// Nesting past maxDepth is followed without its keys.
	s = newFieldScanner("usage")
	s.Write([]byte(`{"deep":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `,"usage":{"input_tokens":2}}`))
	if string(s.value("usage")) != `{"input_tokens":2}` {
		t.Errorf("after deep nesting: %s", s.value("usage"))
	}
}

func TestSSEReaderTakesTheLatestUsage(t *testing.T) {
	// message_start states input and cache; message_delta the cumulative
	// output and, in newer API versions, input and cache again (here
	// revised): each count is the latest stated.
	stream := "event: message_start\r\n" +
		`data: {"type":"message_start","message":{"model":"claude-sonnet-5-5","usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":1}}}` + "\r\n\r\n" +
		": a comment\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\n" +
		"data: \"delta\":{\"type\":\"text_delta\",\"text\":\"usage\"}}\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}` + "\n\n" +
		"event: message_delta\n" +
		`data: {"type":"message_delta","usage":{"input_tokens":12,"cache_read_input_tokens":5,"output_tokens":9}}` + "\n\n"
	u := &usage{}
	var events int
	r := newSSEReader(newFieldScanner(Anthropic.answerPaths(true)...), func(s *fieldScanner) {
		events++
		Anthropic.take(u, s, true)
	})
	feed(r, stream)
	if events != 5 {
		t.Errorf("%d events, want 5", events)
	}
	want := Tokens{Input: 12, Output: 9, CacheRead: 5, CacheWrite: 3}
	if got := u.tokens(); got != want || *u.model != "claude-sonnet-5-5" {
		t.Errorf("usage = %+v model %v, want %+v", got, u.model, want)
	}

	// OpenAI: response.completed's response.usage; input excludes cached.
	u = &usage{}
	r = newSSEReader(newFieldScanner(OpenAI.answerPaths(true)...), func(s *fieldScanner) { OpenAI.take(u, s, true) })
	feed(r, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5.5\",\"usage\":null}}\n\n"+
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5.5-2026-04-23\",\"usage\":"+
		"{\"input_tokens\":150,\"input_tokens_details\":{\"cached_tokens\":50},\"output_tokens\":20}}}\n\n")
	if got := u.tokens(); got != (Tokens{Input: 100, Output: 20, CacheRead: 50}) || *u.model != "gpt-5.5-2026-04-23" {
		t.Errorf("openai usage = %+v model %v", got, u.model)
	}
}
