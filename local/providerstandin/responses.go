package providerstandin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

type responsesRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Input  []json.RawMessage `json:"input"`
	Tools  []json.RawMessage `json:"tools"`
	Reason *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

func openaiError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}})
}

// toolNames lists a Responses request's tools: functions by name, a
// namespace's functions as namespace.name, other kinds by type.
func toolNames(tools []json.RawMessage) []string {
	var out []string
	for _, raw := range tools {
		var t struct {
			Type  string            `json:"type"`
			Name  string            `json:"name"`
			Tools []json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		switch {
		case t.Name != "" && len(t.Tools) > 0:
			for _, n := range toolNames(t.Tools) {
				out = append(out, t.Name+"."+n)
			}
		case t.Name != "":
			out = append(out, t.Name)
		default:
			out = append(out, t.Type)
		}
	}
	return out
}

// responses serves POST /v1/responses (a WebSocket upgrade is refused: not
// served).
func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		// codex tries the Responses WebSocket first; not served, as by a
		// gateway without it: codex falls back to HTTPS.
		s.mu.Lock()
		s.websockets++
		s.mu.Unlock()
		openaiError(w, http.StatusNotFound, "invalid_request_error", "", "not found")
		return
	}
	if r.Method != http.MethodPost {
		s.refuse(r, "responses: method "+r.Method)
		openaiError(w, http.StatusNotFound, "invalid_request_error", "", "not found")
		return
	}
	key, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !s.keyOK(key) || !bearer {
		s.refuse(r, "responses: missing or wrong bearer key")
		openaiError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	var req responsesRequest
	if !readBody(w, r, &req) || req.Model == "" {
		s.refuse(r, "responses: malformed body")
		openaiError(w, http.StatusBadRequest, "invalid_request_error", "", "the body must be a Responses request")
		return
	}
	c := Call{API: "responses", Model: req.Model, Stream: req.Stream, Step: -1, Tools: toolNames(req.Tools), UserAgent: r.Header.Get("User-Agent")}
	if req.Reason != nil {
		c.Effort = req.Reason.Effort
	}
	turns := 0
	calls, outputs := []string{}, map[string]bool{}
	for _, raw := range req.Input {
		var it struct {
			Type    string            `json:"type"`
			Role    string            `json:"role"`
			Name    string            `json:"name"`
			CallID  string            `json:"call_id"`
			Output  json.RawMessage   `json:"output"`
			Tools   []json.RawMessage `json:"tools"`
			Content json.RawMessage   `json:"content"`
		}
		if json.Unmarshal(raw, &it) != nil {
			continue
		}
		switch it.Type {
		case "function_call", "custom_tool_call":
			calls = append(calls, it.CallID)
			c.Called = append(c.Called, it.Name)
		case "function_call_output", "custom_tool_call_output":
			outputs[it.CallID] = true
		case "message":
			if it.Role == "user" {
				c.Prompts = append(c.Prompts, textOf(it.Content))
			}
		}
		switch {
		case it.Type == "additional_tools":
			// codex 0.171 sends its tools as an input item, in namespaces.
			c.Tools = append(c.Tools, toolNames(it.Tools)...)
		case it.Type == "message" && it.Role == "assistant":
			turns++
		case strings.HasSuffix(it.Type, "_call") && !strings.HasSuffix(it.Type, "_call_output"):
			turns++
		case strings.HasSuffix(it.Type, "_call_output"):
			c.Results = append(c.Results, textOf(it.Output))
		}
	}
	for _, id := range calls {
		// The API's rule: every function (or custom tool) call in the
		// input has its output there too.
		if !outputs[id] {
			why := "No tool output found for function call " + id + "."
			s.refuse(r, "responses: "+why)
			openaiError(w, http.StatusBadRequest, "invalid_request_error", "", why)
			return
		}
	}
	st := Step{Text: "OK."}
	if len(c.Tools) > 0 {
		c.Step = turns
		st = s.step(turns)
	}
	n := s.record(c)
	id := fmt.Sprintf("resp_standin_%d", n)
	var item map[string]any
	switch {
	case st.Tool != "" && st.Code != "":
		item = map[string]any{"type": "custom_tool_call", "id": fmt.Sprintf("ctc_standin_%d", n), "call_id": fmt.Sprintf("call_standin_%d", n),
			"name": st.Tool, "input": st.Code, "status": "completed"}
	case st.Tool != "":
		args, _ := json.Marshal(st.Input)
		item = map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_standin_%d", n), "call_id": fmt.Sprintf("call_standin_%d", n),
			"name": st.Tool, "arguments": string(args), "status": "completed"}
		if ns, name, ok := strings.Cut(st.Tool, "."); ok {
			// A namespaced tool (codex's deferred MCP tools) is called by
			// its name within the namespace.
			item["namespace"], item["name"] = ns, name
		}
	default:
		item = map[string]any{"type": "message", "id": fmt.Sprintf("msg_standin_%d", n), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": st.Text, "annotations": []any{}}}}
	}
	u := ResponsesUsage
	usage := map[string]any{"input_tokens": u.Input + u.CacheRead, "input_tokens_details": map[string]any{"cached_tokens": u.CacheRead},
		"output_tokens": u.Output, "output_tokens_details": map[string]any{"reasoning_tokens": 5}, "total_tokens": u.Input + u.CacheRead + u.Output}
	resp := map[string]any{"id": id, "object": "response", "status": "completed", "model": req.Model, "output": []any{item}, "usage": usage}
	if !req.Stream {
		writeJSON(w, http.StatusOK, resp)
		return
	}
	e := newSSE(w)
	e.event("response.created", map[string]any{"type": "response.created", "sequence_number": 0,
		"response": map[string]any{"id": id, "object": "response", "status": "in_progress", "model": req.Model, "output": []any{}}})
	e.event("response.output_item.added", map[string]any{"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item})
	e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": item})
	e.event("response.completed", map[string]any{"type": "response.completed", "sequence_number": 3, "response": resp})
}
