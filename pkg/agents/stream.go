package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// MCPServerName is the name galley's MCP server has in each CLI's
// configuration: claude calls its tools mcp__galley__<tool>.
const MCPServerName = "galley"

type eventKind int

const (
	evOther   eventKind = iota
	evInit              // the CLI runs: claude system/init, codex thread.started
	evTool              // a tool call
	evTurnEnd           // the turn is over: claude result, codex turn.completed or turn.failed
	evError             // an error the CLI reports outside a turn's end (codex "error")
)

// streamEvent is what one line of a CLI's JSON stream tells.
type streamEvent struct {
	Kind    eventKind
	Type    string // the line's type (and subtype), for logs
	Session string // claude session_id, codex thread_id
	Model   string // the model the CLI reports, if any
	// MCP is galley's MCP server status at init: "connected" when it is
	// usable. codex starts a thread only once a required server is up.
	MCP string
	// Calls are the tool calls the line starts; Results the results it
	// carries (a call's result may come on a later line).
	Calls   []toolCall
	Results []toolResult
	// Err is set on a turn end that failed, or an error event.
	Err string
	// Totals are the running usage totals a turn end carries.
	Totals *totals
}

// toolCall is one tool call a stream shows.
type toolCall struct {
	ID     string // claude tool_use id, codex item id
	Tool   string // the tool's own name (claude's mcp__server__tool split)
	Server string // its MCP server, if any
	// Args are its arguments as compact JSON, or a command's line, cut to
	// argsKeep bytes.
	Args string
}

// Name is the name the event log shows: "server/tool" for an MCP tool.
func (c toolCall) Name() string {
	if c.Server != "" {
		return c.Server + "/" + c.Tool
	}
	return c.Tool
}

// toolResult is a tool call's result: the size of its content.
type toolResult struct {
	ID    string
	Bytes int // -1: no result (the call failed without one)
	// Call is the call itself when the result's line restates it (codex's
	// item.completed does): a result whose start was not seen is still
	// reported.
	Call *toolCall
}

// argsKeep bounds the arguments galley keeps of a pending call. It is well
// above what an event shows (the harness redacts the secrets it knows,
// then cuts each field to 120 bytes): cutting before redaction could leave
// a secret's first bytes that no longer match it, and this margin keeps
// such a cut far past the bytes shown.
const argsKeep = 1024

// compactArgs is raw JSON arguments compacted and cut to argsKeep bytes.
func compactArgs(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return cutArgs(string(raw))
	}
	return cutArgs(b.String())
}

func cutArgs(s string) string {
	if len(s) <= argsKeep {
		return s
	}
	s = s[:argsKeep]
	for len(s) > 0 && !utf8.RuneStart(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= utf8.RuneSelf {
		s = s[:len(s)-1] // a cut rune's first byte
	}
	return s
}

// contentBytes is the size of a tool result's content: a string's bytes,
// or, for a list of content blocks, the bytes of each text block's text
// and each other block's JSON (an image, a resource).
func contentBytes(raw json.RawMessage) int {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return -1
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return len(s)
		}
	case '[':
		var blocks []json.RawMessage
		if json.Unmarshal(raw, &blocks) == nil {
			n := 0
			for _, b := range blocks {
				var t struct {
					Type string  `json:"type"`
					Text *string `json:"text"`
				}
				if json.Unmarshal(b, &t) == nil && t.Type == "text" && t.Text != nil {
					n += len(*t.Text)
				} else {
					n += len(b)
				}
			}
			return n
		}
	}
	return len(raw)
}

// totals are running usage counts as a CLI reports them; nil is unknown.
type totals struct {
	Input, Output, CacheRead, CacheWrite *int64
	CostUSD                              *float64 // the CLI's own cost estimate
	// CostUnknown: the CLI marked its cost as a guess (claude costBasis
	// "unknown"); the cost is left out.
	CostUnknown bool
	Model       string // the one model the counts are for, if only one
}

var errNotJSON = errors.New("not a JSON object")

// parseLine parses one line of family's stream.
func parseLine(family string, line []byte) (streamEvent, error) {
	switch family {
	case FamilyClaude:
		return parseClaude(line)
	case FamilyCodex:
		return parseCodex(line)
	}
	return streamEvent{}, fmt.Errorf("no parser for family %q", family)
}

// claudeLine holds the fields galley reads of `claude -p --output-format
// stream-json --verbose` lines (see testdata/claude-*.jsonl).
type claudeLine struct {
	Type       string `json:"type"`
	Subtype    string `json:"subtype"`
	SessionID  string `json:"session_id"`
	Model      string `json:"model"`
	MCPServers []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
	} `json:"mcp_servers"`
	Message *struct {
		// Content is a list of blocks, or (a user's prompt) a string.
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	IsError      bool     `json:"is_error"`
	Result       string   `json:"result"`
	Errors       []string `json:"errors"`
	TotalCostUSD *float64 `json:"total_cost_usd"`
	Usage        *struct {
		Input      *int64 `json:"input_tokens"`
		Output     *int64 `json:"output_tokens"`
		CacheRead  *int64 `json:"cache_read_input_tokens"`
		CacheWrite *int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]struct {
		Input      int64 `json:"inputTokens"`
		Output     int64 `json:"outputTokens"`
		CacheRead  int64 `json:"cacheReadInputTokens"`
		CacheWrite int64 `json:"cacheCreationInputTokens"`
		// CostBasis is the price table claude priced the model's latest
		// request at: "list", "managed" or "unknown" (a model it has no
		// price for, whose cost it still guesses into total_cost_usd).
		CostBasis string `json:"costBasis"`
	} `json:"modelUsage"`
}

func parseClaude(line []byte) (streamEvent, error) {
	var l claudeLine
	if err := unmarshalObject(line, &l); err != nil {
		return streamEvent{}, err
	}
	e := streamEvent{Type: l.Type, Session: l.SessionID}
	if l.Subtype != "" {
		e.Type += "/" + l.Subtype
	}
	switch {
	case l.Type == "system" && l.Subtype == "init":
		e.Kind, e.Model, e.MCP = evInit, l.Model, "absent"
		for _, s := range l.MCPServers {
			if s.Name == MCPServerName {
				e.MCP = s.Status
			}
		}
	case (l.Type == "assistant" || l.Type == "user") && l.Message != nil:
		// An assistant message's tool_use blocks start calls; a later user
		// message's tool_result blocks carry their results.
		for _, c := range claudeBlocks(l.Message.Content) {
			switch c.Type {
			case "tool_use":
				call := toolCall{ID: c.ID, Tool: c.Name, Args: compactArgs(c.Input)}
				if server, tool, ok := splitClaudeTool(c.Name); ok {
					call.Server, call.Tool = server, tool
				}
				e.Calls = append(e.Calls, call)
			case "tool_result":
				e.Results = append(e.Results, toolResult{ID: c.ToolUseID, Bytes: contentBytes(c.Content)})
			}
		}
		if len(e.Calls)+len(e.Results) > 0 {
			e.Kind = evTool
		}
	case l.Type == "result":
		e.Kind = evTurnEnd
		if l.IsError || l.Subtype != "success" {
			e.Err = "claude result " + l.Subtype
			if len(l.Errors) > 0 {
				e.Err += ": " + l.Errors[0]
			} else if l.IsError && l.Result != "" {
				e.Err += ": " + l.Result
			}
		}
		e.Totals = claudeTotals(l)
	}
	return e, nil
}

// claudeBlock is one content block of a claude message: a tool_use
// (id, name, input) or a tool_result (tool_use_id, content).
type claudeBlock struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

func claudeBlocks(raw json.RawMessage) []claudeBlock {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	var blocks []claudeBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	return blocks
}

// claudeTotals reads a result's running totals: modelUsage (summed over
// models; it covers every call of the session, subagents included, and a
// resumed session continues from the saved totals) and total_cost_usd
// (the same calls). Without modelUsage, older CLIs' usage is used.
func claudeTotals(l claudeLine) *totals {
	t := &totals{CostUSD: l.TotalCostUSD}
	switch {
	case len(l.ModelUsage) > 0:
		var in, out, cr, cw int64
		models := make([]string, 0, len(l.ModelUsage))
		for m, u := range l.ModelUsage {
			in, out, cr, cw = in+u.Input, out+u.Output, cr+u.CacheRead, cw+u.CacheWrite
			models = append(models, m)
			if u.CostBasis == "unknown" {
				// claude has no price for this model: its total is a guess,
				// and galley reports no cost rather than an invented one.
				t.CostUSD, t.CostUnknown = nil, true
			}
		}
		t.Input, t.Output, t.CacheRead, t.CacheWrite = &in, &out, &cr, &cw
		if len(models) == 1 {
			t.Model = models[0]
		}
	case l.Usage != nil:
		t.Input, t.Output, t.CacheRead, t.CacheWrite = l.Usage.Input, l.Usage.Output, l.Usage.CacheRead, l.Usage.CacheWrite
	}
	if t.CostUSD != nil && (math.IsNaN(*t.CostUSD) || *t.CostUSD < 0) {
		t.CostUSD = nil
	}
	return t
}

// splitClaudeTool splits "mcp__<server>__<tool>".
func splitClaudeTool(name string) (server, tool string, ok bool) {
	const p = "mcp__"
	if len(name) <= len(p) || name[:len(p)] != p {
		return "", "", false
	}
	rest := name[len(p):]
	for i := 0; i+1 < len(rest); i++ {
		if rest[i] == '_' && rest[i+1] == '_' {
			return rest[:i], rest[i+2:], true
		}
	}
	return "", "", false
}

// codexLine holds the fields galley reads of `codex exec --json` lines
// (see testdata/codex-*.jsonl).
type codexLine struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item  *codexItem `json:"item"`
	Usage *struct {
		Input      *int64 `json:"input_tokens"`
		Cached     *int64 `json:"cached_input_tokens"`
		CacheWrite *int64 `json:"cache_write_input_tokens"`
		Output     *int64 `json:"output_tokens"`
	} `json:"usage"`
}

// codexItem holds the fields galley reads of an item. mcp_tool_call's are
// recorded (testdata/codex-turn1.jsonl); command_execution's (command,
// aggregated_output) are not: they are taken from codex's exec_events.rs
// (CommandExecutionItem); the pinned 0.171.0 binary holds both names
// among its field names, but no recording of one is in testdata.
type codexItem struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content json.RawMessage `json:"content"`
	} `json:"result"`
	Command          string  `json:"command"`
	AggregatedOutput *string `json:"aggregated_output"`
}

// call is the tool call an item is, if it is one.
func (it *codexItem) call() (toolCall, bool) {
	switch it.Type {
	case "mcp_tool_call":
		return toolCall{ID: it.ID, Tool: it.Tool, Server: it.Server, Args: compactArgs(it.Arguments)}, true
	case "command_execution":
		return toolCall{ID: it.ID, Tool: "command_execution", Args: cutArgs(it.Command)}, true
	}
	return toolCall{}, false
}

// resultBytes is the size of a completed item's output, -1 if it has none
// (a failed MCP call carries an error instead of a result).
func (it *codexItem) resultBytes() int {
	switch {
	case it.Type == "mcp_tool_call" && it.Result != nil:
		return contentBytes(it.Result.Content)
	case it.Type == "command_execution" && it.AggregatedOutput != nil:
		return len(*it.AggregatedOutput)
	}
	return -1
}

func parseCodex(line []byte) (streamEvent, error) {
	var l codexLine
	if err := unmarshalObject(line, &l); err != nil {
		return streamEvent{}, err
	}
	e := streamEvent{Type: l.Type, Session: l.ThreadID}
	switch l.Type {
	case "thread.started":
		// With the galley server marked required, codex starts no thread
		// unless the server initialised.
		e.Kind, e.MCP = evInit, "connected"
	case "item.started":
		if l.Item != nil {
			if c, ok := l.Item.call(); ok {
				e.Kind, e.Calls = evTool, []toolCall{c}
			}
			e.Type += "/" + l.Item.Type
		}
	case "item.completed":
		if l.Item != nil {
			if c, ok := l.Item.call(); ok {
				e.Kind, e.Results = evTool, []toolResult{{ID: c.ID, Bytes: l.Item.resultBytes(), Call: &c}}
			}
			e.Type += "/" + l.Item.Type
		}
	case "item.updated":
		if l.Item != nil {
			e.Type += "/" + l.Item.Type
		}
	case "turn.completed":
		e.Kind = evTurnEnd
		e.Totals = codexTotals(l)
	case "turn.failed":
		e.Kind, e.Err = evTurnEnd, "codex turn failed"
		if l.Error != nil && l.Error.Message != "" {
			e.Err += ": " + l.Error.Message
		}
	case "error":
		e.Kind, e.Err = evError, "codex error: "+l.Message
	}
	return e, nil
}

// codexTotals reads turn.completed usage, the thread's running totals (a
// resumed thread continues from them). OpenAI counts cached input (and
// cache writes) inside input_tokens; galley's input is the rest, so that
// input, cacheRead and cacheWrite never overlap, as in claude's counts.
func codexTotals(l codexLine) *totals {
	u := l.Usage
	if u == nil {
		return nil
	}
	t := &totals{Output: u.Output, CacheRead: u.Cached, CacheWrite: u.CacheWrite}
	if u.Input != nil {
		in := *u.Input
		for _, part := range []*int64{u.Cached, u.CacheWrite} {
			if part != nil {
				in = max(in-*part, 0)
			}
		}
		t.Input = &in
	}
	return t
}

// unmarshalObject accepts exactly one JSON object.
func unmarshalObject(line []byte, v any) error {
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
		i++
	}
	if i == len(line) || line[i] != '{' {
		return errNotJSON
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%w: %v", errNotJSON, err)
	}
	return nil
}
