package agents

import (
	"fmt"

	"github.com/galley-run/galley/pkg/agents/effort"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/protocol"
)

// Agent families with a CLI driver.
const (
	FamilyClaude = effort.Claude
	FamilyCodex  = effort.Codex
)

// Families lists the families this package drives, in a fixed order.
func Families() []string { return []string{FamilyClaude, FamilyCodex} }

// Efforts returns the effort values the family's CLI honours for model (""
// is the CLI's default model); see package effort.
func Efforts(family, model string) []string { return effort.Values(family, model) }

// EffortSupport is what workerSelection.effort declares for these drivers:
// both CLIs take an effort with or without a model. Which values, per family
// and model, is package effort's table, which the service checks at launch
// too.
const EffortSupport = "always"

// CheckSelection refuses a selection the family's CLI cannot honour
// exactly. The service refuses at launch what the descriptor does not
// cover; this double-checks in the worker, where dropping part of a
// selection would otherwise go unseen.
func CheckSelection(sel protocol.AgentSelection) error {
	op := galleyerr.Op("agents.selection")
	if effort.Values(sel.Agent, "") == nil {
		return galleyerr.E(op, galleyerr.Unsupported, fmt.Sprintf("no CLI driver for agent family %q", sel.Agent))
	}
	if sel.Model != "" && !protocol.IsModel(sel.Model) {
		return galleyerr.E(op, galleyerr.Invalid, fmt.Sprintf("%s cannot use model %q", sel.Agent, sel.Model))
	}
	return effort.Check(sel.Agent, sel.Model, sel.Effort)
}
