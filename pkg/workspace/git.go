package workspace

import (
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/galley-run/galley/pkg/githost/gitexec"
)

// Option configures Prepare.
type Option func(*options)

type options struct {
	user, token string
	proxy       string       // WithProxy
	cache       string       // WithCache
	log         *slog.Logger // WithCache
}

// WithProxy makes Prepare's git commands that reach the repository go
// through the HTTP proxy at proxyURL (the egress proxy, which may need the
// harness's credential in the URL: like the repository's credential it
// travels in those git processes' environment only, as an http.proxy
// setting scoped to the repository URL).
func WithProxy(proxyURL string) Option {
	return func(o *options) { o.proxy = proxyURL }
}

// WithCredential makes Prepare's git commands that reach the repository
// authenticate with HTTP basic auth user:token. The credential travels as
// an http.<repoURL>.extraHeader setting in those git processes'
// environment (GIT_CONFIG_COUNT/KEY/VALUE) only: never in argv, which every
// user can read in /proc, never in the clone's .git/config, where the agent
// reads, never in an error. It is scoped to the repository URL, so a
// redirect elsewhere does not carry it. An empty token sends nothing.
func WithCredential(user, token string) Option {
	return func(o *options) { o.user, o.token = user, token }
}

// credentialEnv is the environment that gives git the credential for
// repoURL, numbered after any GIT_CONFIG_COUNT entries the process already
// passes down (a harness's credential helper), which it keeps.
func (o options) credentialEnv(repoURL string) []string {
	if !(strings.HasPrefix(repoURL, "https://") || strings.HasPrefix(repoURL, "http://")) {
		return nil
	}
	var kv [][2]string
	if o.token != "" {
		auth := base64.StdEncoding.EncodeToString([]byte(o.user + ":" + o.token))
		kv = append(kv, [2]string{"http." + repoURL + ".extraHeader", "Authorization: Basic " + auth})
	}
	if o.proxy != "" {
		kv = append(kv, [2]string{"http." + repoURL + ".proxy", o.proxy})
	}
	if len(kv) == 0 {
		return nil
	}
	n, err := strconv.Atoi(os.Getenv("GIT_CONFIG_COUNT"))
	if err != nil || n < 0 {
		n = 0
	}
	env := []string{"GIT_CONFIG_COUNT=" + strconv.Itoa(n+len(kv))}
	for j, e := range kv {
		i := strconv.Itoa(n + j)
		env = append(env, "GIT_CONFIG_KEY_"+i+"="+e[0], "GIT_CONFIG_VALUE_"+i+"="+e[1])
	}
	return env
}

// safeArgs and safeEnv are how galley runs git inside a workspace an agent
// has had its hands on: no hook, no fsmonitor daemon, no ext:: transport
// (each of which runs a program the configuration names), and no system or
// global configuration (which the agent's user may be able to write). They
// hold even if Scrub missed something. -c settings reach git's child
// processes too (GIT_CONFIG_PARAMETERS), submodules included. A credential
// for a push comes through the environment (GIT_CONFIG_COUNT), which these
// keep.
var (
	safeArgs = []string{
		"-c", "core.hooksPath=/dev/null",
		"-c", "core.fsmonitor=false",
		"-c", "protocol.ext.allow=never",
		"-c", "submodule.recurse=false",
	}
	safeEnv = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
)

// inRepo runs git in the workspace dir with the safe settings, plus env.
func inRepo(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	return gitexec.Cmd{Dir: dir, Env: append(append([]string{}, safeEnv...), env...)}.Run(ctx, append(append([]string{}, safeArgs...), args...)...)
}
