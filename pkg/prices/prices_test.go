package prices

import "testing"

func TestRequestNanoUSD(t *testing.T) {
	sonnet, _ := Lookup(Claude(), "claude-sonnet-5-5")
	// 1M of each category: $2 + $10 + $0.10 + $2.50.
	n, ok := sonnet.RequestNanoUSD(Tokens{Input: 1e6, Output: 1e6, CacheRead: 1e6, CacheWrite: 1e6})
	if !ok || n != 14_600_000_000 {
		t.Errorf("sonnet 5.5: %d %v", n, ok)
	}
	// A small request keeps its fractions: 7 cache-read tokens of Haiku 5.5
	// at $0.01/MTok are 0.07 µ$.
	haiku, _ := Lookup(Claude(), "claude-haiku-5-5")
	if n, _ := haiku.RequestNanoUSD(Tokens{CacheRead: 7}); n != 70 {
		t.Errorf("haiku cache read: %d n$", n)
	}
	// A prompt past 100,000 tokens bills every token at the long rates.
	short, _ := haiku.RequestNanoUSD(Tokens{Input: 100_000, Output: 1000})
	long, _ := haiku.RequestNanoUSD(Tokens{Input: 100_001, Output: 1000})
	if short != 10_500_000 || long != 50_000_500+2_500_000 {
		t.Errorf("haiku bands: %d then %d", short, long)
	}
	unknown := Price{Input: 1, Output: 1, CachedInput: -1, CacheWrite: -1}
	if _, ok := unknown.RequestNanoUSD(Tokens{Input: 5, CacheRead: 1}); ok {
		t.Error("an unknown cache-read rate priced a cache read")
	}
	if n, ok := unknown.RequestNanoUSD(Tokens{Input: 5}); !ok || n != 5000 {
		t.Errorf("no cache read needs no cache-read rate: %d %v", n, ok)
	}
}

func TestLookup(t *testing.T) {
	all := All()
	for model, want := range map[string]bool{
		"claude-opus-5":          true,
		"claude-opus-5-20260501": true,
		"gpt-5.5":                true,
		"gpt-5.5-2026-04-23":     true,
		"gpt-6.2-sol":            false,
		"claude-opus-5-extra":    false,
		"":                       false,
	} {
		if _, ok := Lookup(all, model); ok != want {
			t.Errorf("Lookup(%q) = %v", model, ok)
		}
	}
	for m, p := range claude {
		// Anthropic's 5-minute cache write is 1.25× input.
		if d := p.CacheWrite - 1.25*p.Input; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: cache write %v is not 1.25× input %v", m, p.CacheWrite, p.Input)
		}
		if p.CachedInput > 0.1*p.Input+1e-9 {
			t.Errorf("%s: cache read %v above 0.1× input", m, p.CachedInput)
		}
	}
}
