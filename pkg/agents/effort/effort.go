// Package effort says which effort values each agent CLI honours, per model
// where the CLI says so. It is a leaf package so that both the worker's
// drivers (pkg/agents) and the service's launch validation (pkg/service)
// refuse the same selections: an effort a CLI cannot honour is refused at
// launch, never passed through (codex forwards an unknown value to the API,
// which rejects the turn; claude warns and uses its default).
package effort

import (
	"fmt"
	"slices"
	"strings"

	"github.com/galley-run/galley/pkg/galleyerr"
)

// Families with effort tables (pkg/agents' FamilyClaude and FamilyCodex).
const (
	Claude = "claude"
	Codex  = "codex"
)

// claude --effort <level>: `claude --help` of 2.1.332 lists exactly these,
// for every model.
var claudeEfforts = []string{"low", "medium", "high", "xhigh", "max"}

// codexBase is what every model in codex 0.171.0's own catalog (`codex debug
// models`) supports: a model codex does not list gets only these.
var codexBase = []string{"low", "medium", "high", "xhigh"}

// codexMax lists the catalog's models that also support max (0.171.0).
// Codex's default model (CodexDefaultModel, used when a launch names none)
// is among them. "ultra" (maximum reasoning with automatic task delegation
// to sub-agents) is left out on purpose: it changes what the agent does,
// not only how hard it thinks. No model lists none or minimal.
var codexMax = []string{
	"gpt-6.2-sol", "gpt-6.2-astra", "gpt-6-astra", "gpt-6.1-sol", "gpt-6.1-terra",
	"gpt-6-sol", "gpt-6-luna", "gpt-5.6-sol", "gpt-5.6-terra", "gpt-5.6-luna",
}

// CodexDefaultModel is the model codex 0.171.0 runs when none is given
// (`codex debug models`: the catalog's first, priority 1).
const CodexDefaultModel = "gpt-6.2-sol"

// Values returns the effort values family's CLI honours for model ("" is
// the CLI's default model), or nil for a family without a CLI driver.
func Values(family, model string) []string {
	switch family {
	case Claude:
		return slices.Clone(claudeEfforts)
	case Codex:
		if model == "" {
			model = CodexDefaultModel
		}
		v := slices.Clone(codexBase)
		if slices.Contains(codexMax, model) {
			v = append(v, "max")
		}
		return v
	}
	return nil
}

// Check refuses an effort that family's CLI cannot honour for model
// (Invalid: answered not-applied rejected at launch). An empty effort, and a
// family without a CLI driver (the scripted agent), pass: other checks
// decide those.
func Check(family, model, effort string) error {
	if effort == "" {
		return nil
	}
	v := Values(family, model)
	if v == nil || slices.Contains(v, effort) {
		return nil
	}
	what := "its default model"
	if model != "" {
		what = "model " + model
	}
	return galleyerr.E(galleyerr.Op("agents.effort"), galleyerr.Invalid,
		fmt.Sprintf("%s cannot honour effort %q with %s (it takes %s)", family, effort, what, strings.Join(v, ", ")))
}
