// Package prices holds the model price tables galley computes costs from
// (cost basis "computed"): OpenAI's models as codex runs them, and
// Anthropic's Claude models as the model proxy sees them. Each table is
// dated and names its sources; a model missing from a table has no price,
// and a cost that needs one is left out, never guessed.
//
// The package has no dependencies, so that the agent drivers
// (pkg/agents) and the model proxy (pkg/modelproxy) share one table.
package prices

import (
	"maps"
	"math"
	"regexp"
)

// Price is one model's list price in US dollars per million tokens. A
// negative rate is unknown: a cost that needs it is left out.
type Price struct {
	Input       float64 // uncached input
	CachedInput float64 // cache reads
	CacheWrite  float64 // cache writes (Anthropic: the 5-minute write)
	Output      float64 // output, reasoning included

	// LongAbove, when above zero, is the prompt size (input, cache reads
	// and cache writes of one request) past which the whole request,
	// output included, is billed at Long's rates (Claude Haiku 5.5).
	LongAbove int64
	Long      *Price
}

// Tokens are one request's (or a total's) counts, each in one category:
// input excludes cache reads and writes.
type Tokens struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Prompt is the request's prompt size: everything it sent.
func (t Tokens) Prompt() int64 { return t.Input + t.CacheRead + t.CacheWrite }

// RequestNanoUSD prices one request's counts in billionths of a dollar
// (so that many small requests add up without rounding each away). ok is
// false when a rate the counts need is unknown.
func (p Price) RequestNanoUSD(t Tokens) (nano int64, ok bool) {
	if p.LongAbove > 0 && p.Long != nil && t.Prompt() > p.LongAbove {
		p = *p.Long
	}
	rates := [4]float64{p.Input, p.Output, p.CachedInput, p.CacheWrite}
	counts := [4]int64{t.Input, t.Output, t.CacheRead, t.CacheWrite}
	var usd float64 // in millionths: USD per million tokens × tokens
	for i, n := range counts {
		if n <= 0 {
			continue
		}
		if rates[i] < 0 {
			return 0, false
		}
		usd += float64(n) * rates[i]
	}
	// A rate in USD per million tokens is µ$ per token: ×1000 is n$.
	return int64(math.Round(usd * 1000)), true
}

// CodexTableDate is when the OpenAI table was last checked against its
// sources.
const CodexTableDate = "2026-11-29"

// codex prices the models codex commonly runs, for the usage cost galley
// computes when the CLI reports tokens only (codex exec --json has no
// cost). Standard tier, prompts within the models' base context (the
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
var codex = map[string]Price{
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

// ClaudeTableDate is when the Claude table was last checked against its
// sources.
const ClaudeTableDate = "2026-12-05"

// claude prices Anthropic's current Claude models by their API ids.
// Standard tier (not Batch, not fast mode, not a cloud platform's);
// CacheWrite is the 5-minute cache write (1.25× input; Anthropic's usage
// does not split 5-minute from 1-hour writes unless asked, and galley
// prices every write at the 5-minute rate, so a 1-hour write, 2× input, is
// under-counted); CachedInput is the cache hit, 0.1× input except where the
// page lists less (Fable 5.1 and Mythos 5.1, Opus 5.5, Sonnet 5.5: 0.05×
// or 0.025×). Claude Haiku 5.5 bills a request whose prompt is over
// 100,000 tokens at 5× every rate (Long).
//
// Sources, read 2026-12-05 (stored copies): Anthropic's pricing page
// (platform.claude.com/docs/en/about-claude/pricing, "Model pricing":
// base input, 5m cache writes, cache hits, output for every model listed
// here), its models overview (platform.claude.com/docs/about-claude/models/
// overview: Opus 5.5 at $4/$20, Sonnet 5.5 at $2/$10, Haiku 5.5 from
// $0.10/$0.50) and model pages (Sonnet 5 and Sonnet 5.5: 5m write $2.50,
// cache read $0.20 before Anthropic cut Sonnet 5.5's to $0.10 on
// 2026-10-07, as the changelogs of claude-usage v1.5.7 (checked against the
// page 2026-12-01) and claudit v1.9.2 record with Opus 5.5's $0.20 cache
// read and Haiku 5.5's two bands). Rates change: check
// https://platform.claude.com/docs/en/about-claude/pricing before relying
// on them.
var claude = map[string]Price{
	"claude-fable-5-1":  {Input: 10, CacheWrite: 12.50, CachedInput: 0.25, Output: 50},
	"claude-mythos-5-1": {Input: 10, CacheWrite: 12.50, CachedInput: 0.25, Output: 50},
	"claude-fable-5":    {Input: 10, CacheWrite: 12.50, CachedInput: 1.00, Output: 50},
	"claude-mythos-5":   {Input: 10, CacheWrite: 12.50, CachedInput: 1.00, Output: 50},
	"claude-opus-5-5":   {Input: 4, CacheWrite: 5.00, CachedInput: 0.20, Output: 20},
	"claude-opus-5":     {Input: 5, CacheWrite: 6.25, CachedInput: 0.50, Output: 25},
	"claude-opus-4-8":   {Input: 5, CacheWrite: 6.25, CachedInput: 0.50, Output: 25},
	"claude-opus-4-7":   {Input: 5, CacheWrite: 6.25, CachedInput: 0.50, Output: 25},
	"claude-opus-4-6":   {Input: 5, CacheWrite: 6.25, CachedInput: 0.50, Output: 25},
	"claude-opus-4-5":   {Input: 5, CacheWrite: 6.25, CachedInput: 0.50, Output: 25},
	"claude-sonnet-5-5": {Input: 2, CacheWrite: 2.50, CachedInput: 0.10, Output: 10},
	"claude-sonnet-5":   {Input: 2, CacheWrite: 2.50, CachedInput: 0.20, Output: 10},
	"claude-sonnet-4-6": {Input: 3, CacheWrite: 3.75, CachedInput: 0.30, Output: 15},
	"claude-sonnet-4-5": {Input: 3, CacheWrite: 3.75, CachedInput: 0.30, Output: 15},
	"claude-sonnet-4":   {Input: 3, CacheWrite: 3.75, CachedInput: 0.30, Output: 15},
	"claude-haiku-5-5": {Input: 0.10, CacheWrite: 0.125, CachedInput: 0.01, Output: 0.50,
		LongAbove: 100_000, Long: &Price{Input: 0.50, CacheWrite: 0.625, CachedInput: 0.05, Output: 2.50}},
	"claude-haiku-4-5": {Input: 1, CacheWrite: 1.25, CachedInput: 0.10, Output: 5},
}

// Codex returns a copy of the OpenAI table (the models codex runs).
func Codex() map[string]Price { return maps.Clone(codex) }

// Claude returns a copy of the Claude table.
func Claude() map[string]Price { return maps.Clone(claude) }

// All returns both tables in one map (their model ids do not overlap).
func All() map[string]Price {
	all := maps.Clone(codex)
	maps.Copy(all, claude)
	return all
}

// snapshot is a dated model id's suffix: Anthropic's -YYYYMMDD,
// OpenAI's -YYYY-MM-DD.
var snapshot = regexp.MustCompile(`-(\d{8}|\d{4}-\d{2}-\d{2})$`)

// Lookup finds model's row in table: by its id, else (a dated snapshot,
// as a provider's answer names the model) by the id without its date.
func Lookup(table map[string]Price, model string) (Price, bool) {
	if p, ok := table[model]; ok {
		return p, true
	}
	if base := snapshot.ReplaceAllString(model, ""); base != model {
		p, ok := table[base]
		return p, ok
	}
	return Price{}, false
}
