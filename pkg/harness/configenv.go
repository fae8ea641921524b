package harness

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/galleyerr"
	"github.com/galley-run/galley/pkg/workerapi/client"
)

// ConfigFromEnv reads a Config from the environment through getenv.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	op := galleyerr.Op("harness.config")
	cfg := Config{
		Endpoint:    getenv(contract.EnvWorkerEndpoint),
		Workspace:   getenv(contract.EnvWorkspace),
		Repository:  getenv(contract.EnvRepository),
		Branch:      getenv(contract.EnvBranch),
		AgentBinDir: getenv(contract.EnvAgentBinDir),

		AnthropicKey:  firstSet(getenv, contract.EnvAnthropicAPIKey, EnvAnthropicCLIKey),
		OpenAIKey:     firstSet(getenv, contract.EnvOpenAIAPIKey, EnvCodexCLIKey, EnvOpenAICLIKey),
		GitCredential: strings.TrimSpace(getenv(contract.EnvGitCredential)),
		GitUsername:   getenv(contract.EnvGitUsername),
		Confine:       Confinement(getenv(contract.EnvAgentConfine)),

		AnthropicBaseURL: strings.TrimSpace(getenv(contract.EnvAnthropicBaseURL)),
		OpenAIBaseURL:    strings.TrimSpace(getenv(contract.EnvOpenAIBaseURL)),
		// Read before UnsetSecretEnv removes every AWS_ variable: where
		// the worker's wake queue is reached (aws-local's gate; on AWS
		// unset, and the SDK's default endpoint is right).
		SQSEndpoint: firstSet(getenv, "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"),
		CABundle:    getenv("AWS_CA_BUNDLE"),
	}
	network, err := ParseAgentNetwork(getenv(contract.EnvAgentNetwork))
	if err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	cfg.Network = network
	if cfg.EgressAllow, err = egress.ParseAllowlist(getenv(contract.EnvEgressAllow)); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvEgressAllow, err)
	}
	if cfg.ModelBudget, err = ModelBudgetFromEnv(getenv); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	cfg.EgressUpstream = strings.TrimSpace(getenv(contract.EnvEgressUpstream))
	cfg.EgressSecret = strings.TrimSpace(getenv(contract.EnvEgressSecret))
	cfg.EgressResolver = strings.TrimSpace(getenv(contract.EnvEgressResolver))
	if cfg.EgressUpstream != "" {
		if _, err := egress.HarnessProxyURL(cfg.EgressUpstream, cfg.EgressSecret); err != nil {
			return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvEgressUpstream+" and "+contract.EnvEgressSecret, err)
		}
	}
	switch cfg.Confine {
	case "":
		cfg.Confine = ConfineAuto
	case ConfineAuto, ConfineUser, ConfineLandlock, ConfineNone:
	default:
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvAgentConfine+" must be auto, uid, landlock or none")
	}
	if cfg.GitCredential != "" && cfg.GitUsername == "" {
		cfg.GitUsername = contract.DefaultGitUsername
	}
	for name, u := range map[string]string{contract.EnvAnthropicBaseURL: cfg.AnthropicBaseURL, contract.EnvOpenAIBaseURL: cfg.OpenAIBaseURL} {
		if err := ValidateBaseURL(u); err != nil {
			return cfg, galleyerr.E(op, galleyerr.Invalid, name, err)
		}
	}
	if _, err := client.ParseEndpoint(cfg.Endpoint); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvWorkerEndpoint+" is not a valid endpoint", err)
	}
	switch path := getenv(contract.EnvWorkerTokenFile); {
	case path != "":
		tok, err := readTokenFile(path)
		if err != nil {
			return cfg, galleyerr.E(op, err)
		}
		cfg.Token = tok
	case getenv(contract.EnvWorkerToken) != "":
		cfg.Token = string(bytes.TrimSpace([]byte(getenv(contract.EnvWorkerToken))))
	case getenv(contract.EnvWorkerBootstrap) != "":
		cfg.Bootstrap, cfg.Handle = getenv(contract.EnvWorkerBootstrap), getenv(contract.EnvWorkerHandle)
		if cfg.Handle == "" {
			return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvWorkerBootstrap+" needs "+contract.EnvWorkerHandle)
		}
	default:
		return cfg, galleyerr.E(op, galleyerr.Invalid, "set "+contract.EnvWorkerTokenFile+", "+contract.EnvWorkerToken+" or "+contract.EnvWorkerBootstrap)
	}
	if cfg.Workspace == "" {
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvWorkspace+" is required")
	}
	if cfg.Repository == "" {
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvRepository+" is required")
	}
	switch cache := getenv(contract.EnvGitCache); {
	case cache == "off":
	case cache == "":
		if filepath.IsAbs(cfg.Workspace) {
			cfg.GitCache = filepath.Join(filepath.Dir(filepath.Clean(cfg.Workspace)), DefaultGitCacheName)
		}
	case filepath.IsAbs(cache):
		cfg.GitCache = filepath.Clean(cache)
	default:
		return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvGitCache+" must be an absolute path or off")
	}
	if s := getenv(contract.EnvHeartbeatInterval); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvHeartbeatInterval+" must be a positive Go duration")
		}
		cfg.Heartbeat = d
	}
	if s := getenv(contract.EnvMCPProgressInterval); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return cfg, galleyerr.E(op, galleyerr.Invalid, contract.EnvMCPProgressInterval+" must be a positive Go duration")
		}
		cfg.Progress = d
	}
	if cfg.PushLimit, cfg.PushBudget, err = pushBudgetFromEnv(getenv); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	if cfg.Budgets, err = budgetsFromEnv(getenv); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	cfg.House = getenv(contract.EnvHouse)
	if cfg.Snapshots, cfg.SnapshotLimits, err = snapshotsFromEnv(getenv); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	if cfg.ParkAfter, cfg.Parks, cfg.ParkLimits, err = parkFromEnv(getenv, cfg.Snapshots); err != nil {
		return cfg, galleyerr.E(op, galleyerr.Invalid, err)
	}
	return cfg, nil
}

// ValidateBaseURL checks a provider base URL: empty (none), an https URL,
// or an http URL to this machine's loopback (a proxy beside the worker, a
// test's stand-in); with a host, and without user information, query or
// fragment. Its errors never quote the URL, which could carry a
// credential.
func ValidateBaseURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("is not a URL")
	case u.User != nil:
		return errors.New("must not carry a user or password: give the provider key as the deployment's secret")
	case u.Host == "" || u.Opaque != "":
		return errors.New("must be an absolute http(s) URL with a host")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return errors.New("must have no query or fragment")
	case u.Scheme == "https":
		return nil
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil
	case u.Scheme == "http":
		return errors.New("must be https (http only to a loopback address)")
	}
	return errors.New("must be an https URL")
}

// isLoopback: localhost or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// firstSet returns the value of the first of names that is set, trimmed
// (a secret's value often ends in a newline).
func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := strings.TrimSpace(getenv(n)); v != "" {
			return v
		}
	}
	return ""
}

// secretEnv are the variables that carry secrets to the harness.
var secretEnv = []string{
	contract.EnvWorkerToken, contract.EnvWorkerBootstrap, contract.EnvAnthropicAPIKey, contract.EnvOpenAIAPIKey, contract.EnvGitCredential, contract.EnvEgressSecret,
	EnvAnthropicCLIKey, EnvCodexCLIKey, EnvOpenAICLIKey,
}

// UnsetSecretEnv removes from this process's environment every variable
// that carries a secret (the worker token or bootstrap code, the provider
// keys, the git credential) and every AWS_ and ECS_CONTAINER_METADATA_URI
// variable (the task role's credentials and metadata endpoints, which the
// harness never uses). Call it once the Config is read, so that no child
// process that inherits the environment by accident (git, run by the
// workspace) holds them. The kernel's copy of the process's initial
// environment (/proc/self/environ) keeps them: only another user for the
// agent hides that.
func UnsetSecretEnv() {
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(secretEnv, k) || strings.HasPrefix(k, "AWS_") || strings.HasPrefix(k, "ECS_CONTAINER_METADATA_URI") {
			_ = os.Unsetenv(k)
		}
	}
}

// maxTokenFile bounds the token file, as kitchn bounds its credentials.
const maxTokenFile = 16 << 10

// readTokenFile reads the worker token from a regular file that only its
// owner can read, without following a link. Errors never quote the file.
func readTokenFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot open the token file", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot stat the token file", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return "", galleyerr.E(galleyerr.Invalid, fmt.Sprintf("the token file must be a regular file of mode 600, not %v", st.Mode()))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", galleyerr.E(galleyerr.Invalid, "cannot read the token file", err)
	}
	if len(data) > maxTokenFile {
		return "", galleyerr.E(galleyerr.Invalid, "the token file is larger than 16 KiB")
	}
	tok := string(bytes.TrimSpace(data))
	if tok == "" {
		return "", galleyerr.E(galleyerr.Invalid, "the token file is empty")
	}
	return tok, nil
}
