// Package agents drives the real coding-agent CLIs a galley worker runs:
// Claude Code (`claude`) and Codex (`codex`), each headless, with the
// harness's MCP tools registered through the CLI's own configuration.
//
// A worker's agent is one session that may take several turns: each CLI
// runs one turn per process (`claude -p`, `codex exec`) and a new turn
// resumes the session (`--resume`, `exec resume`). So the harness starts a
// small session supervisor (`galley-worker agent-session`, RunSession) as
// its agent process; the supervisor runs the CLI turn by turn, copies the
// CLI's JSON lines to its stdout for the driver's Observe, and between
// turns waits for the coordinator's next message through the harness's
// wait_message tool. The driver reads the stream for the evidence of
// ready, the end of each turn and the usage the CLI reports.
//
// docs/agents.md describes the mechanics, the evidence, the usage rules and
// what an operator must provide.
package agents
