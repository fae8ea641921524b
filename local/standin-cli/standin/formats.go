package standin

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// The event shapes below follow pkg/agents/testdata (recorded from
// claude 2.1.332 and codex 0.171.0), trimmed to the fields that matter.

func (r *runner) model() string {
	if r.opts.Model != "" {
		return r.opts.Model
	}
	if r.opts.Family == "claude" {
		return "claude-sonnet-4-5"
	}
	return "gpt-5.5"
}

func (r *runner) init(mcpStatus string) {
	if r.opts.Family == "claude" {
		r.emit(map[string]any{"type": "system", "subtype": "init", "cwd": cwd(), "session_id": r.st.Session,
			"tools":       []string{"Bash", "Edit", "Read", "Write", "mcp__galley__ask_coordinator", "mcp__galley__finish", "mcp__galley__post_status"},
			"mcp_servers": []map[string]any{{"name": "galley", "status": mcpStatus, "source": "dynamic"}},
			"model":       r.model(), "permissionMode": "acceptEdits", "apiKeySource": "none",
			"claude_code_version": "2.1.332-standin", "output_style": "default", "uuid": newID()})
		return
	}
	r.emit(map[string]any{"type": "thread.started", "thread_id": r.st.Session})
	r.emit(map[string]any{"type": "turn.started"})
}

func (r *runner) claudeMessage(role string, content []map[string]any) {
	msg := map[string]any{"role": role, "content": content}
	if role == "assistant" {
		msg["id"], msg["type"], msg["model"] = "msg_"+newID()[:8], "message", r.model()
		msg["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
	}
	r.emit(map[string]any{"type": role, "message": msg, "parent_tool_use_id": nil, "session_id": r.st.Session,
		"uuid": newID(), "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
}

func (r *runner) text(s string) {
	if r.opts.Family == "claude" {
		r.claudeMessage("assistant", []map[string]any{{"type": "text", "text": s}})
		return
	}
	r.seq++
	r.emit(map[string]any{"type": "item.completed", "item": map[string]any{"id": itemID(r.seq), "type": "agent_message", "text": s}})
}

func itemID(n int) string { return "item_" + strconv.Itoa(n) }

func (r *runner) shell(command string) {
	if r.opts.Family == "claude" {
		r.claudeMessage("assistant", []map[string]any{{"type": "tool_use", "id": "toolu_" + newID()[:8], "name": "Bash", "input": map[string]any{"command": command}}})
		return
	}
	r.seq++
	r.emit(map[string]any{"type": "item.started", "item": map[string]any{"id": itemID(r.seq), "type": "command_execution",
		"command": command, "aggregated_output": "", "exit_code": nil, "status": "in_progress"}})
	r.emit(map[string]any{"type": "item.completed", "item": map[string]any{"id": itemID(r.seq), "type": "command_execution",
		"command": command, "aggregated_output": "", "exit_code": 0, "status": "completed"}})
}

func (r *runner) toolStarted(id, name string, in map[string]any) {
	if r.opts.Family == "claude" {
		r.claudeMessage("assistant", []map[string]any{{"type": "tool_use", "id": id, "name": "mcp__galley__" + name, "input": in}})
		return
	}
	r.emit(map[string]any{"type": "item.started", "item": map[string]any{"id": id, "type": "mcp_tool_call", "server": "galley",
		"tool": name, "arguments": in, "result": nil, "error": nil, "status": "in_progress"}})
}

func (r *runner) toolDone(id, name string, in map[string]any, texts []string, isErr bool) {
	content := make([]map[string]any, 0, len(texts))
	for _, t := range texts {
		content = append(content, map[string]any{"type": "text", "text": t})
	}
	if r.opts.Family == "claude" {
		r.claudeMessage("user", []map[string]any{{"tool_use_id": id, "type": "tool_result", "content": content, "is_error": isErr}})
		return
	}
	item := map[string]any{"id": id, "type": "mcp_tool_call", "server": "galley", "tool": name, "arguments": in,
		"result": nil, "error": nil, "status": "completed"}
	if isErr {
		item["error"], item["status"] = map[string]any{"message": strings.Join(texts, "\n")}, "failed"
	} else {
		item["result"] = map[string]any{"content": content, "structured_content": nil}
	}
	r.emit(map[string]any{"type": "item.completed", "item": item})
}

// end writes the turn's final event with the session's running totals, as
// both real CLIs do.
func (r *runner) end() {
	t := r.st.Total
	if r.opts.Family == "claude" {
		r.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "num_turns": 1,
			"result": "done", "stop_reason": "end_turn", "session_id": r.st.Session, "total_cost_usd": t.CostUSD,
			"usage": map[string]any{"input_tokens": r.turn.Input, "output_tokens": r.turn.Output,
				"cache_read_input_tokens": r.turn.CacheRead, "cache_creation_input_tokens": r.turn.CacheWrite},
			"modelUsage": map[string]any{r.model(): map[string]any{"inputTokens": t.Input, "outputTokens": t.Output,
				"cacheReadInputTokens": t.CacheRead, "cacheCreationInputTokens": t.CacheWrite, "costUSD": t.CostUSD,
				"costBasis": r.costBasis()}},
			"permission_denials": []any{}, "uuid": newID()})
		return
	}
	r.emit(map[string]any{"type": "turn.completed", "usage": map[string]any{
		"input_tokens": t.Input + t.CacheRead + t.CacheWrite, "cached_input_tokens": t.CacheRead,
		"cache_write_input_tokens": t.CacheWrite, "output_tokens": t.Output, "reasoning_output_tokens": 0}})
}

// costBasis is how claude marks the price it used: "list" for a model it
// knows, "unknown" for another (whose total_cost_usd it still guesses).
func (r *runner) costBasis() string {
	m := r.model()
	for _, known := range []string{"opus", "sonnet", "haiku"} {
		if m == known || strings.HasPrefix(m, "claude-"+known+"-") {
			return "list"
		}
	}
	return "unknown"
}

func cwd() string {
	d, _ := os.Getwd()
	return d
}
