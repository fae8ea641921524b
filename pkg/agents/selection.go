package agents

import (
	"fmt"
	"slices"

	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// Agent families with a CLI driver.
const (
	FamilyClaude = "claude"
	FamilyCodex  = "codex"
)

// Families lists the families this package drives, in a fixed order.
func Families() []string { return []string{FamilyClaude, FamilyCodex} }

// The efforts each CLI honours. Neither CLI refuses an unknown value (claude
// warns and uses its default, codex ignores it), so the driver refuses it
// instead of letting the selection be dropped.
var (
	// claude --effort <level> (claude --help, 2.1.x).
	claudeEfforts = []string{"low", "medium", "high", "xhigh", "max"}
	// codex -c model_reasoning_effort=<level> (codex config reference).
	codexEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}
)

// Efforts returns the effort values the family's CLI honours.
func Efforts(family string) []string {
	switch family {
	case FamilyClaude:
		return slices.Clone(claudeEfforts)
	case FamilyCodex:
		return slices.Clone(codexEfforts)
	}
	return nil
}

// EffortSupport is what workerSelection.effort declares for these drivers:
// both CLIs take an effort with or without a model.
const EffortSupport = "always"

// CheckSelection refuses a selection the family's CLI cannot honour
// exactly. The service refuses at launch what the descriptor does not
// cover; this double-checks in the worker, where dropping part of a
// selection would otherwise go unseen.
func CheckSelection(sel protocol.AgentSelection) error {
	op := galleyerr.Op("agents.selection")
	efforts := Efforts(sel.Agent)
	if efforts == nil {
		return galleyerr.E(op, galleyerr.Unsupported, fmt.Sprintf("no CLI driver for agent family %q", sel.Agent))
	}
	if sel.Model != "" && !protocol.IsModel(sel.Model) {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s cannot use model %q", sel.Agent, sel.Model))
	}
	if sel.Effort != "" && !slices.Contains(efforts, sel.Effort) {
		return galleyerr.E(op, galleyerr.Unsupported, fmt.Sprintf("%s cannot honour effort %q (it takes %v)", sel.Agent, sel.Effort, efforts))
	}
	return nil
}
