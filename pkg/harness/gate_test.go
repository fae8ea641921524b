package harness_test

import (
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// gitAgent is a shell agent that commits, pushes its branch, tries to push
// main past the workspace's hook, and tries the gate without its
// credential, writing each git exit code and stderr into its folder.
const gitAgent = `
echo started
r() { name=$1; shift; "$@" 2>"$OUT/$name.err"; echo $? > "$OUT/$name"; }
git commit -q --allow-empty -m "agent work" 2>"$OUT/commit.err" || exit 10
r push-branch git push -q origin HEAD
r push-main git push -q --no-verify origin HEAD:refs/heads/main
r no-credential env GIT_CONFIG_COUNT=0 GIT_TERMINAL_PROMPT=0 git ls-remote origin
env > "$OUT/env"
git config --list --show-origin | grep '^file:' > "$OUT/config"
exit 0
`

// TestAgentPushesThroughTheGate: the agent's pushes go through the
// harness's push gate, which lets the worker's branch through to the house
// repository (a local one, or one over http that needs the house
// credential the agent never holds) and refuses main.
func TestAgentPushesThroughTheGate(t *testing.T) {
	for _, remote := range []string{"local", "http"} {
		t.Run(remote, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			bare := bareRepo(t)
			repo, houseCred := bare, ""
			if remote == "http" {
				// The house repository as a forge serves it: only with the
				// house credential.
				houseCred = randomSecret(t, "ghs_")
				house := httptest.NewServer(gitserve.BasicAuth("house", gitserve.Credential(harness.DefaultGitUsername, houseCred), gitserve.Backend(bare)))
				t.Cleanup(house.Close)
				repo = house.URL + "/house.git"
			}
			out := t.TempDir()
			f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}})
			p := runInProcess(t, ctx, f, "shell", shellDriver{script: gitAgent, env: []string{"OUT=" + out}}, func(c *harness.Config) {
				c.Repository, c.GitCredential, c.GitUsername = repo, houseCred, harness.DefaultGitUsername
			})
			if err := p.wait(t, ctx); err != nil {
				t.Fatal(err)
			}
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatalf("the agent wrote no %s: %v (commit: %s)", name, err, readOr(out, "commit.err"))
				}
				return strings.TrimSpace(string(b))
			}
			if code := read("push-branch"); code != "0" {
				t.Errorf("pushing the branch: exit %s: %s", code, read("push-branch.err"))
			}
			if got := git(t, bare, "log", "-1", "--format=%s", testBranch); got != "agent work" {
				t.Errorf("the branch's head in the house is %q", got)
			}
			if code := read("push-main"); code == "0" || !strings.Contains(read("push-main.err"), "may push only refs/heads/"+testBranch) {
				t.Errorf("pushing main: exit %s: %s", code, read("push-main.err"))
			}
			if got := git(t, bare, "log", "-1", "--format=%s", "main"); got != "initial" {
				t.Errorf("main moved to %q", got)
			}
			if code := read("no-credential"); code == "0" {
				t.Error("the gate answered a request without its credential")
			}
			env, config := read("env"), read("config")
			gateURL := ""
			for _, kv := range strings.Split(env, "\n") {
				if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_KEY_0=http."); ok {
					gateURL = strings.TrimSuffix(v, ".extraHeader")
				}
			}
			if !strings.HasPrefix(gateURL, "http://127.0.0.1:") || !strings.Contains(config, "url."+gateURL+".insteadof="+repo) {
				t.Errorf("the agent's origin is not the gate %q:\n%s\n%s", gateURL, env, config)
			}
			if houseCred != "" && (strings.Contains(env, houseCred) || strings.Contains(config, houseCred)) {
				t.Error("the agent can read the house git credential")
			}
			if strings.Contains(config, "extraheader") || strings.Contains(config, "Authorization") {
				t.Errorf("the gate's credential is in git's configuration files:\n%s", config)
			}
			// The gate closed with the agent.
			u, _ := url.Parse(gateURL)
			if c, err := net.Dial("tcp", u.Host); err == nil {
				c.Close()
				t.Error("the push gate still listens after the agent ended")
			}
		})
	}
}

func readOr(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}
