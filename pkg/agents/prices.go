package agents

import "github.com/galley-run/galley/pkg/prices"

// Price is one model's list price (pkg/prices): USD per million tokens, a
// negative rate unknown.
type Price = prices.Price

// PriceTableDate is when the codex price table was last checked against
// its sources.
const PriceTableDate = prices.CodexTableDate

// codexPrices prices the models codex commonly runs (pkg/prices, its
// sources and terms there), for the usage cost galley computes when the
// CLI reports tokens only.
var codexPrices = prices.Codex()

// CodexPrices returns a copy of the codex price table.
func CodexPrices() map[string]Price { return prices.Codex() }
