package harness_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/gitserve"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// gitAgent is a shell agent that commits, pushes its branch, tries to push
// main past the workspace's hook, and tries the gate without its
// credential, writing each git exit code and stderr into its folder. It
// starts by writing its environment (the gate's URL) and waits for the
// file "go".
const gitAgent = `
echo started
env > "$OUT/env-early"
# Wait for the test to hold a connection to the gate open (bounded: a
# guard, not a timing).
n=0; while [ ! -e "$OUT/go" ]; do n=$((n+1)); [ $n -gt 6000 ] && exit 11; sleep 0.05; done
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
				house := httptest.NewServer(gitserve.BasicAuth("house", gitserve.Credential(contract.DefaultGitUsername, houseCred), gitserve.Backend(bare)))
				t.Cleanup(house.Close)
				repo = house.URL + "/house.git"
			}
			out := t.TempDir()
			f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "shell"}})
			p := runInProcess(t, ctx, f, "shell", shellDriver{script: gitAgent, env: []string{"OUT=" + out}}, func(c *harness.Config) {
				c.Repository, c.GitCredential, c.GitUsername = repo, houseCred, contract.DefaultGitUsername
			})
			// While the agent runs, hold a connection to its gate open: the
			// gate must close it when the agent ends. (Dialing the port
			// afterwards proves nothing: another process may hold it by
			// then.)
			held := holdGate(t, ctx, out)
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
			// The gate closed with the agent: the connection held open
			// reads its end (EOF or a reset), not the guard's deadline.
			_ = held.SetReadDeadline(time.Now().Add(time.Minute))
			if _, err := held.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the push gate kept a connection open after the agent ended (read: %v)", err)
			}
		})
	}
}

// holdGate waits for the agent's early environment, makes one request of
// the push gate it names (with the agent's own credential) on a
// connection it then keeps idle, and lets the agent go on. The gate sets
// no idle timeout, so only its closing ends that connection; the
// connection is the caller's.
func holdGate(t *testing.T, ctx context.Context, out string) net.Conn {
	t.Helper()
	var gate, auth string
	for gate == "" || auth == "" {
		b, _ := os.ReadFile(filepath.Join(out, "env-early"))
		for _, kv := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_KEY_0=http."); ok {
				gate = strings.TrimSuffix(v, ".extraHeader")
			}
			if v, ok := strings.CutPrefix(kv, "GIT_CONFIG_VALUE_0=Authorization: "); ok {
				auth = v
			}
		}
		if gate != "" && auth != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the agent never wrote its environment")
		case <-time.After(20 * time.Millisecond):
		}
	}
	u, err := url.Parse(gate)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatalf("dialing the push gate while the agent runs: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	req, _ := http.NewRequest(http.MethodGet, gate+"/info/refs?service=git-upload-pack", nil)
	req.Header.Set("Authorization", auth)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatalf("the push gate's answer: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("the push gate answered %s (close %v), want 200 on a kept connection", resp.Status, resp.Close)
	}
	if err := os.WriteFile(filepath.Join(out, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

func readOr(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return string(b)
}
