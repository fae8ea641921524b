package agents

import "github.com/galley-run/galley/pkg/harness"

// maxPendingTools bounds the calls held until their result is seen; a
// call beyond it is reported at once, without a size.
const maxPendingTools = 256

// toolTracker pairs the tool calls a CLI's stream shows with their
// results and reports each once, when its result is known. galley's own
// MCP tools are left out: the harness that serves them reports them.
type toolTracker struct {
	te      harness.ToolEvents // nil: nothing is reported
	pending []toolCall         // in start order; small, so searched in turn
}

func (t *toolTracker) start(c toolCall) {
	if t.te == nil || c.Server == MCPServerName {
		return
	}
	if c.ID == "" || len(t.pending) >= maxPendingTools {
		t.report(c, -1)
		return
	}
	for _, p := range t.pending {
		if p.ID == c.ID {
			return // a restated start
		}
	}
	t.pending = append(t.pending, c)
}

func (t *toolTracker) result(r toolResult) {
	if t.te == nil {
		return
	}
	for i, p := range t.pending {
		if p.ID == r.ID {
			t.pending = append(t.pending[:i], t.pending[i+1:]...)
			t.report(p, r.Bytes)
			return
		}
	}
	// A result whose start was not seen: reported if its line names the
	// call (codex's item.completed), unless it is one of galley's tools
	// (whose starts are never held).
	if r.Call != nil && r.Call.Server != MCPServerName {
		t.report(*r.Call, r.Bytes)
	}
}

// flush reports the calls that never completed, without a size: at a
// turn's end and at the stream's end.
func (t *toolTracker) flush() {
	for _, p := range t.pending {
		t.report(p, -1)
	}
	t.pending = t.pending[:0]
}

func (t *toolTracker) report(c toolCall, size int) {
	t.te.Tool(c.Name(), c.Args, size)
}
