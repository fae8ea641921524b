//go:build unix

package localproc

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/harness"
)

// The environment a harness receives from the runtime.
const (
	EnvTokenFile  = "GALLEY_WORKER_TOKEN_FILE" // path of the file holding the worker's token
	EnvEndpoint   = "GALLEY_WORKER_ENDPOINT"   // galley's URL for the worker API
	EnvWorkspace  = "GALLEY_WORKSPACE"         // the worktree path (spec.WorkspacePath)
	EnvRepository = "GALLEY_REPOSITORY"        // the house's repository URL
	EnvBranch     = "GALLEY_BRANCH"            // the worker's branch
	EnvHandle     = "GALLEY_WORKER_HANDLE"     // the worker's handle
	EnvConfine    = harness.EnvConfine         // how the agent is confined (Runtime.Confinement)
	EnvNetwork    = harness.EnvAgentNetwork    // how the agent's network is confined (Runtime.Network)
	EnvLogLimit   = harness.EnvLogLimit        // the worker's log budget in bytes (WithLogLimit)
)

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
const reservedPrefix = "GALLEY_"

// runtimeOwned are the variables only the runtime sets, per worker. The
// worker's token itself never travels in a variable, only its file's path.
var runtimeOwned = []string{
	EnvTokenFile, EnvEndpoint, EnvWorkspace, EnvRepository, EnvBranch, EnvHandle, EnvConfine, EnvNetwork,
	EnvLogLimit, "GALLEY_WORKER_TOKEN",
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
		EnvTokenFile+"="+tokenFile,
		EnvEndpoint+"="+r.endpoint,
		EnvWorkspace+"="+workspace,
		EnvRepository+"="+r.repository,
		EnvBranch+"="+branch,
		EnvHandle+"="+handle,
		EnvConfine+"="+string(r.enforcement.Mode),
		EnvNetwork+"="+string(r.network.Mode),
		EnvLogLimit+"="+strconv.FormatInt(r.logLimit, 10),
	)
}
