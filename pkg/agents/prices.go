package agents

import "maps"

// Price is one model's list price in US dollars per million tokens. A
// negative rate is unknown: counts that need it leave the cost out.
type Price struct {
	Input       float64 // uncached input
	CachedInput float64 // cache reads
	CacheWrite  float64 // cache writes
	Output      float64 // output, reasoning included
}

// PriceTableDate is when the price table was last checked against its
// sources.
const PriceTableDate = "2026-11-29"

// codexPrices prices the models codex commonly runs, for the usage cost
// galley computes when the CLI reports tokens only (codex exec --json has
// no cost). Standard tier, prompts within the models' base context (the
// long-context surcharge above 272K input tokens is not applied: the
// stream does not say which requests crossed it). OpenAI bills cache
// writes as ordinary input.
//
// Sources, read 2026-11-29 (stored copies): OpenAI's model page for
// gpt-5-codex (developers.openai.com/api/docs/models/gpt-5-codex), the
// per-model table quoted from OpenAI's pricing page (June 2026) for the
// GPT-5.4 and GPT-5.5 families, and GitHub's Copilot model price table
// (github/docs data/tables/copilot/models-and-pricing.yml) for GPT-5.2 and
// the 5.2/5.3 Codex models. Rates change: check
// https://developers.openai.com/api/docs/pricing before relying on them.
var codexPrices = map[string]Price{
	"gpt-5.5":            {Input: 5.00, CachedInput: 0.50, CacheWrite: 5.00, Output: 30.00},
	"gpt-5.4":            {Input: 2.50, CachedInput: 0.25, CacheWrite: 2.50, Output: 15.00},
	"gpt-5.4-mini":       {Input: 0.75, CachedInput: 0.075, CacheWrite: 0.75, Output: 4.50},
	"gpt-5.4-nano":       {Input: 0.20, CachedInput: 0.02, CacheWrite: 0.20, Output: 1.25},
	"gpt-5.3-codex":      {Input: 1.75, CachedInput: 0.175, CacheWrite: 1.75, Output: 14.00},
	"gpt-5.2":            {Input: 1.75, CachedInput: 0.175, CacheWrite: 1.75, Output: 14.00},
	"gpt-5.2-codex":      {Input: 1.75, CachedInput: 0.175, CacheWrite: 1.75, Output: 14.00},
	"gpt-5.1-codex":      {Input: 1.25, CachedInput: 0.125, CacheWrite: 1.25, Output: 10.00},
	"gpt-5.1-codex-mini": {Input: 0.25, CachedInput: 0.025, CacheWrite: 0.25, Output: 2.00},
	"gpt-5-codex":        {Input: 1.25, CachedInput: 0.125, CacheWrite: 1.25, Output: 10.00},
	"gpt-5":              {Input: 1.25, CachedInput: 0.125, CacheWrite: 1.25, Output: 10.00},
	"gpt-5-mini":         {Input: 0.25, CachedInput: 0.025, CacheWrite: 0.25, Output: 2.00},
	"gpt-5-nano":         {Input: 0.05, CachedInput: 0.005, CacheWrite: 0.05, Output: 0.40},
}

// CodexPrices returns a copy of the codex price table.
func CodexPrices() map[string]Price { return maps.Clone(codexPrices) }
