package standin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// The `model` directive makes one model call as the real CLI would, to the
// provider its family's settings name (claude: ANTHROPIC_BASE_URL with
// ANTHROPIC_API_KEY; codex: the base URL of the model provider galley
// configures, Options.ModelBaseURL, with CODEX_API_KEY): galley's harness
// gives it its model proxy there, and counts what the provider answers.
// $LAST is the answer's status and, on a refusal, its message.
func (r *runner) modelCall(ctx context.Context, prompt string) {
	var (
		url, body string
		hdr       = http.Header{"Content-Type": {"application/json"}}
	)
	model := r.opts.Model
	quoted, _ := json.Marshal(prompt)
	switch r.opts.Family {
	case "claude":
		if model == "" {
			model = "claude-sonnet-4-5"
		}
		url = strings.TrimRight(os.Getenv("ANTHROPIC_BASE_URL"), "/") + "/v1/messages"
		hdr.Set("x-api-key", os.Getenv("ANTHROPIC_API_KEY"))
		hdr.Set("anthropic-version", "2023-06-01")
		body = fmt.Sprintf(`{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":%s}]}`, model, quoted)
	default:
		if model == "" {
			model = "gpt-5.4"
		}
		url = strings.TrimRight(r.opts.ModelBaseURL, "/") + "/responses"
		hdr.Set("Authorization", "Bearer "+os.Getenv("CODEX_API_KEY"))
		body = fmt.Sprintf(`{"model":%q,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":%s}]}]}`, model, quoted)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(body)))
	if err != nil {
		r.last = "model call failed: " + err.Error()
		return
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.last = "model call failed: " + err.Error()
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		r.last = fmt.Sprintf("model call refused: %d %s", resp.StatusCode, e.Error.Message)
		return
	}
	r.last = "model answered"
}
