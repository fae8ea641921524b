package agents

import (
	"os"
	"os/exec"
	"path/filepath"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi"
)

// Parking (docs/parking.md): a worker whose CLI waits on its coordinator is
// parked by the harness, which saves the CLI's session files and ends the
// supervisor; the resumed harness restores them and starts the supervisor
// again on the same session, whose first prompt is what woke the worker.

// The variables that move each CLI's configuration folder, which holds
// its session files.
const (
	EnvClaudeConfigDir = "CLAUDE_CONFIG_DIR"
	EnvCodexHome       = "CODEX_HOME"
)

// SessionDir is where family's CLI keeps its session files: claude's
// projects folder of its configuration folder (CLAUDE_CONFIG_DIR, else
// ~/.claude), codex's sessions folder of its home (CODEX_HOME, else
// ~/.codex). Relative to the agent's home unless getenv names the folder.
func SessionDir(family string, getenv func(string) string) string {
	switch family {
	case FamilyClaude:
		if d := getenv(EnvClaudeConfigDir); filepath.IsAbs(d) {
			return filepath.Join(d, "projects")
		}
		return filepath.Join(".claude", "projects")
	case FamilyCodex:
		if d := getenv(EnvCodexHome); filepath.IsAbs(d) {
			return filepath.Join(d, "sessions")
		}
		return filepath.Join(".codex", "sessions")
	}
	return ""
}

// SessionDir implements harness.Parker. The agent inherits the harness's
// CLAUDE_CONFIG_DIR and CODEX_HOME (harness.AgentEnv).
func (d Driver) SessionDir() string { return SessionDir(d.Family, os.Getenv) }

// ResumeCommand implements harness.Parker: the supervisor as Command
// starts it, told the session to go on with (contract.EnvAgentResume). It
// takes its first prompt from wait_message (ResumesFromMessages) and runs
// the CLI's own resume (`claude --resume`, `codex exec resume`).
func (d Driver) ResumeCommand(self workerapi.Self, mcpURL, mcpSecret, workspace, fact string) (*exec.Cmd, error) {
	if err := d.CheckResumeFact(fact); err != nil {
		return nil, err
	}
	cmd, err := d.Command(self, mcpURL, mcpSecret, workspace)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, contract.EnvAgentResume+"="+fact)
	return cmd, nil
}

// CheckResumeFact implements harness.Parker: a session id
// (ValidSessionID).
func (Driver) CheckResumeFact(fact string) error {
	if !ValidSessionID(fact) {
		return galleyerr.E(galleyerr.Op("agents.resume"), galleyerr.Invalid, "the parked CLI's session id is not a session id")
	}
	return nil
}

// ResumesFromMessages implements harness.PromptResumer: the CLI's blocked
// call ended with it, so the reply it waited for is its next prompt.
func (Driver) ResumesFromMessages() bool { return true }

// ValidSessionID reports whether id is a session id as both CLIs make them:
// a UUID in its 36-character text form (claude's session_id, codex's
// thread_id). The id comes from the CLI's output stream, which the agent
// may forge: it becomes a command-line argument only if it is one.
func ValidSessionID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f', 'A' <= c && c <= 'F':
		default:
			return false
		}
	}
	return true
}
