//go:build unix

package localproc

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/contract"
)

// EnvTokenFile is the contract's name of the worker's token file, which
// the ECS stand-in (local/ecsstandin) takes from this package. The runtime
// gives each harness, by the contract's names, that file, galley's URL,
// the worktree (spec.WorkspacePath), the house's repository, the worker's
// branch and handle, how the agent and its network are confined
// (Runtime.Confinement, Runtime.Network), and the log budget
// (WithLogLimit): harnessEnv.
const EnvTokenFile = contract.EnvWorkerTokenFile

// allowedEnv names the server variables a harness inherits: what a process
// needs to find programs, a home, a locale, a temporary folder and trusted
// certificates. Everything else (kitchn's token, AWS or git credentials,
// proxies with passwords in them) stays in the server.
var allowedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL",
	"LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
}

// AllowedEnv returns the names of the server's environment variables that
// a harness inherits.
func AllowedEnv() []string { return slices.Clone(allowedEnv) }

// reservedPrefix marks galley's own variables. None passes through from the
// server's environment by name: the server's settings, its kitchn token
// among them, use the same prefix.
const reservedPrefix = contract.EnvPrefix

// runtimeOwned are the variables only the runtime sets, per worker. The
// worker's token itself never travels in a variable, only its file's path.
var runtimeOwned = []string{
	contract.EnvWorkerTokenFile, contract.EnvWorkerEndpoint, contract.EnvWorkspace, contract.EnvRepository, contract.EnvBranch, contract.EnvWorkerHandle, contract.EnvAgentConfine, contract.EnvAgentNetwork,
	contract.EnvLogLimit, contract.EnvWorkerToken,
}

// checkEnvName reports why name cannot be given to a harness, or "".
// passed is true for a variable copied from the server's environment.
func checkEnvName(name string, passed bool) string {
	switch {
	case name == "":
		return "empty environment variable name"
	case strings.ContainsAny(name, "=\x00"):
		return "environment variable name holds '=' or NUL"
	case slices.Contains(runtimeOwned, name):
		return "environment variable " + name + " is set by the runtime alone"
	case passed && strings.HasPrefix(name, reservedPrefix):
		return "environment variable " + name + " is galley's: GALLEY_ variables never pass through to a worker"
	}
	return ""
}

// harnessEnv builds a harness's whole environment: the allow-list, the
// configured pass-through and extra variables (an extra value wins over the
// server's), then the worker's facts.
func (r *Runtime) harnessEnv(handle, tokenFile, workspace, branch string) []string {
	vars := map[string]string{}
	for _, k := range slices.Concat(allowedEnv, r.passEnv) {
		if v, ok := os.LookupEnv(k); ok {
			vars[k] = v
		}
	}
	maps.Copy(vars, r.extraEnv)
	env := make([]string, 0, len(vars)+8)
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		env = append(env, k+"="+vars[k])
	}
	return append(env,
		contract.EnvWorkerTokenFile+"="+tokenFile,
		contract.EnvWorkerEndpoint+"="+r.endpoint,
		contract.EnvWorkspace+"="+workspace,
		contract.EnvRepository+"="+r.repository,
		contract.EnvBranch+"="+branch,
		contract.EnvWorkerHandle+"="+handle,
		contract.EnvAgentConfine+"="+string(r.enforcement.Mode),
		contract.EnvAgentNetwork+"="+string(r.network.Mode),
		contract.EnvLogLimit+"="+strconv.FormatInt(r.logLimit, 10),
	)
}
