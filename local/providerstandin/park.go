package providerstandin

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ParkSteps is a conversation for a parked worker (docs/parking.md) of
// family ("claude" or "codex"): run the shell command before (commit and
// push), ask the coordinator (the worker parks in the call), then,
// resumed with the reply as the prompt, run after and finish.
//
// The resumed CLI's conversation holds the three turns before the
// parking, so its first request plays ParkResumeStep[family]: codex
// plays step 3 next. claude 2.1.332, resuming a session whose last tool
// call has no result, records the call as interrupted and adds an
// assistant turn of its own ("No response requested."), so its next step
// is 4: step 3 is that turn's place, never played. ParkAskCall is the
// tool the conversation's third call names (the parked one).
func ParkSteps(family, before, after string) []Step {
	switch family {
	case "claude":
		return []Step{
			{Tool: "ToolSearch", Input: map[string]any{"query": "select:mcp__galley__ask_coordinator,mcp__galley__finish"}},
			{Tool: "Bash", Input: map[string]any{"command": before, "description": "commit and push the first file"}},
			{Tool: "mcp__galley__ask_coordinator", Input: map[string]any{"subject": "Which greeting?", "body": "hello or hi?"}},
			{Text: "claude's own turn on resume takes this step's place"},
			{Tool: "Bash", Input: map[string]any{"command": after, "description": "commit and push the second file"}},
			{Tool: "mcp__galley__finish", Input: map[string]any{"outcome": "succeeded", "body": "both pushed"}},
			{Text: "Done."},
		}
	case "codex":
		call := func(tool, args string) string {
			return "// @exec: {\"yield_time_ms\": 600000}\n" +
				"const r = await tools." + tool + "(" + args + ");\n" +
				"text(typeof r === \"string\" ? r : (r.content || []).map((c) => c.text).join(\"\\n\"));\n"
		}
		shell := func(cmd string) string {
			return "const r = await tools.exec_command({cmd: " + JSString(cmd) + "});\ntext(JSON.stringify(r));\n"
		}
		return []Step{
			{Tool: "exec", Code: "text(ALL_TOOLS.filter((t) => t.name.startsWith(\"mcp__galley__\")).map((t) => t.name).sort().join(\",\"));\n"},
			{Tool: "exec", Code: shell(before)},
			{Tool: "exec", Code: call("mcp__galley__ask_coordinator", `{subject: "Which greeting?", body: "hello or hi?"}`)},
			{Tool: "exec", Code: shell(after)},
			{Tool: "exec", Code: call("mcp__galley__finish", `{outcome: "succeeded", body: "both pushed"}`)},
			{Text: "Done."},
		}
	}
	return nil
}

var (
	// ParkResumeStep is the step a resumed CLI of ParkSteps plays first.
	ParkResumeStep = map[string]int{"claude": 4, "codex": 3}
	// ParkAskCall is the tool name of ParkSteps' parked call.
	ParkAskCall = map[string]string{"claude": "mcp__galley__ask_coordinator", "codex": "exec"}
)

// JSString quotes s as a JavaScript string (codex's exec code).
func JSString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// CheckResumed checks that the first scripted request after calls[from:]
// began (the resumed CLI's) carried the conversation of ParkSteps from
// before the parking: it plays ParkResumeStep[family] (the earlier turns
// counted), names the parked call third among its tool calls, and holds
// the brief and the reply among its prompts. It answers what is wrong, or
// nil.
func CheckResumed(calls []Call, from int, family, brief, reply string) error {
	for _, c := range calls[min(from, len(calls)):] {
		if c.Step < 0 {
			continue
		}
		joined := strings.Join(c.Prompts, "\n")
		switch {
		case c.Step != ParkResumeStep[family]:
			return fmt.Errorf("the resumed CLI's first request played step %d, want %d (the earlier turns in its conversation)", c.Step, ParkResumeStep[family])
		case len(c.Called) < 3 || c.Called[2] != ParkAskCall[family]:
			return fmt.Errorf("the resumed request's earlier tool calls %v lack the parked %s", c.Called, ParkAskCall[family])
		case !strings.Contains(joined, brief) || !strings.Contains(joined, reply):
			return fmt.Errorf("the resumed request's prompts lack the brief or the reply: %q", c.Prompts)
		}
		return nil
	}
	return fmt.Errorf("the resumed CLI made no scripted model call")
}
