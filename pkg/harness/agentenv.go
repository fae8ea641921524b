package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// prepareCommand gives the agent its environment (AgentEnv, its provider
// key, the driver's variables), keeps it in the harness's process group (so
// that stopping the group stops both) and refuses a command that would
// hand the agent a secret it must not hold.
func (h *harness) prepareCommand(cmd *exec.Cmd) error {
	env := AgentEnv(os.Environ(), h.cfg.AgentBinDir)
	if h.model != nil {
		// The agent's key is its model proxy's token, and its provider
		// that proxy: the house's key never leaves the harness.
		if h.needs.KeyEnv != "" {
			env = append(env, h.needs.KeyEnv+"="+h.model.token)
		}
		if h.needs.BaseURLEnv != "" {
			env = append(env, h.needs.BaseURLEnv+"="+h.model.baseURL)
		}
	}
	env = append(env, h.gateEnv...)
	if h.egressURL != "" {
		env = append(env, egressEnv(h.egressURL)...)
	}
	cmd.Env = append(env, cmd.Env...)
	all := slices.Concat([]string{cmd.Path}, cmd.Args, cmd.Env)
	for _, secret := range h.namedSecrets() {
		if secret.value == "" {
			continue
		}
		for _, s := range all {
			if strings.Contains(s, secret.value) {
				return fmt.Errorf("the agent's command line or environment would hold %s", secret.what)
			}
		}
	}
	if h.model != nil {
		for _, s := range slices.Concat([]string{cmd.Path}, cmd.Args) {
			if strings.Contains(s, h.model.token) {
				return errors.New("the agent's command line would hold its model proxy token")
			}
		}
	}
	setProcAttr(cmd)
	// WaitDelay bounds Wait when a grandchild keeps the agent's pipes open.
	cmd.WaitDelay = h.cfg.StopGrace
	return nil
}

// agentEnvNames are the variables of the harness's environment an agent
// inherits: what a process needs to find programs, a home, a locale, a
// terminal, a temporary folder, trusted certificates and a proxy, and the
// CLIs' own settings (their configuration folders and the variables the
// claude supervisor defaults). Nothing else passes: not the task role's
// credentials (AWS_*, ECS_CONTAINER_METADATA_URI*), not a GALLEY_ variable
// (the worker token, the bootstrap code, the secrets), not the git
// credential, not a provider key (the agent's own is added by name).
var agentEnvNames = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "TMPDIR",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
	"XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_RUNTIME_DIR",
	"CLAUDE_CONFIG_DIR", "CODEX_HOME", "MCP_TOOL_TIMEOUT", "DISABLE_AUTOUPDATER",
	// The operator's MCP idle limit for claude. (A provider's endpoint is
	// not passed through: the harness gives the agent its own provider's,
	// checked, as AgentNeeds.BaseURLEnv.) docs/agents.md.
	"CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT",
	// claude without telemetry or update checks (the operator's choice).
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
}

// agentEnvPrefixes are allowed families of variables: the locale's and
// Node's (the CLIs run on Node: NODE_OPTIONS, NODE_EXTRA_CA_CERTS).
var agentEnvPrefixes = []string{"LC_", "NODE_"}

// AgentEnv is the part of the harness's environment an agent inherits (see
// agentEnvNames), with binDir, when set, first on PATH. The harness adds
// the agent's provider key and the driver's own variables.
func AgentEnv(environ []string, binDir string) []string {
	var out []string
	path := ""
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			path = v
		case slices.Contains(agentEnvNames, k):
			out = append(out, kv)
		default:
			for _, p := range agentEnvPrefixes {
				if strings.HasPrefix(k, p) {
					out = append(out, kv)
					break
				}
			}
		}
	}
	switch {
	case binDir != "" && path != "":
		path = binDir + string(os.PathListSeparator) + path
	case binDir != "":
		path = binDir // never a trailing separator: that would search the working directory
	}
	if path != "" {
		out = append(out, "PATH="+path)
	}
	return out
}
