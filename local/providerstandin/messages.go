package providerstandin

import (
	"encoding/json"
	"fmt"
	"net/http"
)

type messagesRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
	OutputConfig *struct {
		Effort string `json:"effort"`
	} `json:"output_config"`
}

func anthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
}

// messages serves POST /v1/messages.
func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.refuse(r, "messages: method "+r.Method)
		anthropicError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method not allowed")
		return
	}
	if !s.keyOK(r.Header.Get("x-api-key")) {
		s.refuse(r, "messages: missing or wrong x-api-key")
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		s.refuse(r, "messages: no anthropic-version")
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	var req messagesRequest
	if !readBody(w, r, &req) || req.Model == "" || len(req.Messages) == 0 {
		s.refuse(r, "messages: malformed body")
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "the body must be a Messages request")
		return
	}
	c := Call{API: "messages", Model: req.Model, Stream: req.Stream, Step: -1, UserAgent: r.Header.Get("User-Agent")}
	if req.OutputConfig != nil {
		c.Effort = req.OutputConfig.Effort
	}
	for _, t := range req.Tools {
		c.Tools = append(c.Tools, t.Name)
	}
	turns := 0
	var pending []string // the tool_use ids the previous assistant turn left
	for i, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Text      string          `json:"text"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			var text string
			if json.Unmarshal(m.Content, &text) == nil && m.Role == "user" {
				c.Prompts = append(c.Prompts, text)
			}
		}
		if len(pending) > 0 {
			// The API's rule: each tool_use's tool_result comes in the
			// very next (user) message.
			answered := map[string]bool{}
			for _, b := range blocks {
				if b.Type == "tool_result" && m.Role == "user" {
					answered[b.ToolUseID] = true
				}
			}
			for _, id := range pending {
				if !answered[id] {
					why := fmt.Sprintf("messages.%d: tool_use ids were found without tool_result blocks immediately after: %s", i, id)
					s.refuse(r, "messages: "+why)
					anthropicError(w, http.StatusBadRequest, "invalid_request_error", why)
					return
				}
			}
			pending = nil
		}
		if m.Role == "assistant" {
			turns++
			for _, b := range blocks {
				if b.Type == "tool_use" {
					c.Called = append(c.Called, b.Name)
					pending = append(pending, b.ID)
				}
			}
			continue
		}
		for _, b := range blocks {
			switch b.Type {
			case "tool_result":
				c.Results = append(c.Results, textOf(b.Content))
			case "text":
				c.Prompts = append(c.Prompts, b.Text)
			}
		}
	}
	st := Step{Text: "OK."}
	if len(req.Tools) > 0 {
		c.Step = turns
		st = s.step(turns)
	}
	n := s.record(c)

	id := fmt.Sprintf("msg_standin_%d", n)
	var block map[string]any
	stop := "end_turn"
	if st.Tool != "" {
		block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_standin_%d", n), "name": st.Tool, "input": st.Input}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": st.Text}
	}
	u := MessagesUsage
	usage := map[string]any{"input_tokens": u.Input, "output_tokens": u.Output, "cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead}
	if !req.Stream {
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	e := newSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": id, "type": "message",
		"role": "assistant", "model": req.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.Input, "output_tokens": 1, "cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CacheRead}}})
	if st.Tool != "" {
		in, _ := json.Marshal(st.Input)
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": st.Tool, "input": map[string]any{}}})
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(in)}})
	} else {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": st.Text}})
	}
	e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.event("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": usage})
	e.event("message_stop", map[string]any{"type": "message_stop"})
}

// countTokens serves POST /v1/messages/count_tokens: a count, not a model
// call (no usage, no step).
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		s.refuse(r, "count_tokens: method "+r.Method)
		anthropicError(w, http.StatusMethodNotAllowed, "invalid_request_error", "method not allowed")
		return
	}
	if !s.keyOK(r.Header.Get("x-api-key")) {
		s.refuse(r, "count_tokens: missing or wrong x-api-key")
		anthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	var req messagesRequest
	if r.Header.Get("anthropic-version") == "" || !readBody(w, r, &req) || req.Model == "" || len(req.Messages) == 0 {
		s.refuse(r, "count_tokens: malformed request")
		anthropicError(w, http.StatusBadRequest, "invalid_request_error", "the body must be a count_tokens request")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"input_tokens": MessagesUsage.Input})
}
