package harness_test

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// An agent's model calls reach the provider through its harness's model
// proxy with the token the agent holds, the provider seeing the harness's
// key; a call with another token is refused; and once the worker has
// ended, the token has nowhere to go: the proxy's listener is closed
// (issue 28, item 1: a token that "ends with the worker").
func TestModelProxyTokenEndsWithTheWorker(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	key := randomSecret(t, "sk-ant-test-")
	prov := providerstandin.New(key, nil)
	t.Cleanup(prov.Close)
	out := filepath.Join(t.TempDir(), "out")
	call := func(tok string) string {
		return `curl -s -o /dev/null -w '%{http_code}\n' -H "x-api-key: ` + tok + `" -H 'anthropic-version: 2023-06-01' ` +
			`-H 'content-type: application/json' -d '{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' ` +
			`"$ANTHROPIC_BASE_URL/v1/messages" >> "$1"`
	}
	script := `echo "$ANTHROPIC_BASE_URL" > "$1"; echo "$ANTHROPIC_API_KEY" >> "$1"; ` + call("$ANTHROPIC_API_KEY") + `; ` +
		call("galley-model-someone-elses") + `; echo started`
	d := shellDriver{script: script, args: []string{out},
		needs: harness.AgentNeeds{Provider: harness.ProviderAnthropic, KeyEnv: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}}
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}})
	p := runInProcess(t, ctx, f, "claude", d, func(c *harness.Config) {
		c.AnthropicKey, c.AnthropicBaseURL = key, prov.URL
	})
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "galley-model-") || lines[2] != "200" || lines[3] != "401" {
		t.Fatalf("the agent's base URL, a key of %d bytes and calls %q; want a proxy token, 200 with it, 401 with another",
			len(lines[min(1, len(lines)-1)]), lines[min(2, len(lines)):])
	}
	// The agent's own token (the one its call carried) never reaches the
	// provider; the house's key does.
	token := lines[1]
	if n := len(prov.Calls()); n != 1 || prov.SawWrongKey() || prov.SawSecret(token) || !prov.SawSecret(key) {
		t.Errorf("the provider answered %d calls (want 1), saw a wrong key or the agent's token (%v), or not the house key (%v): %v",
			n, prov.SawSecret(token), prov.SawSecret(key), prov.Refused())
	}
	u, err := url.Parse(lines[0])
	if err != nil || u.Host == "" {
		t.Fatalf("base URL %q", lines[0])
	}
	if c, err := net.DialTimeout("tcp", u.Host, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the worker ended and its model proxy (%s) still answers", u.Host)
	}
}
