// Package realcli holds the test tier that runs the real Claude Code and
// Codex CLIs, at the worker image's pinned versions (worker/agent-clis), as
// galley workers: the real galley-worker harness and drivers, the agent
// confined as on a worker, a fake of galley's worker API, and a model
// provider stand-in (local/providerstandin) scripted to call galley's MCP
// tools. scripts/agent-clis.sh installs the CLIs from npm and prints the
// folder to set as GALLEY_AGENT_CLIS_BIN; without it the tests skip, and
// fail when GALLEY_REQUIRE_REAL_CLIS=1.
package realcli
