package realcli_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/modelproxy"
)

// proxiedProvider is the provider stand-in (with the house key) behind a
// model proxy (with the worker's token), each on a real socket.
type proxiedProvider struct {
	fam   modelproxy.Family
	prov  *providerstandin.Server
	proxy *modelproxy.Proxy
	base  string // the agent's base URL
	key   string
	token string
}

func newProxiedProvider(t *testing.T, cli string, opts ...modelproxy.Option) *proxiedProvider {
	t.Helper()
	pp := &proxiedProvider{fam: modelproxy.Anthropic, key: random(t, "sk-house-")}
	if cli == "codex" {
		pp.fam = modelproxy.OpenAI
	}
	var err error
	if pp.token, err = modelproxy.NewToken(); err != nil {
		t.Fatal(err)
	}
	pp.prov = providerstandin.New(pp.key, []providerstandin.Step{{Text: "Hello from the stand-in."}})
	t.Cleanup(pp.prov.Close)
	up := pp.prov.URL
	if pp.fam == modelproxy.OpenAI {
		up += "/v1"
	}
	pp.proxy, err = modelproxy.New(pp.fam, pp.key, pp.token, append([]modelproxy.Option{modelproxy.WithUpstream(up)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pp.proxy)
	t.Cleanup(srv.Close)
	pp.base = modelproxy.AgentBaseURL(pp.fam, strings.TrimPrefix(srv.URL, "http://"))
	return pp
}

// runCLI runs one headless turn of the CLI (claude -p, codex exec)
// against the proxy, with the worker's token as its only credential, and
// returns its exit code and output.
func (pp *proxiedProvider) runCLI(t *testing.T, bin, cli string) (int, string) {
	t.Helper()
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	if cli == "claude" {
		cmd = exec.CommandContext(ctx, filepath.Join(bin, "claude"), "-p", "Say hello.", "--output-format", "json")
		env = append(env, "ANTHROPIC_BASE_URL="+pp.base, "ANTHROPIC_API_KEY="+pp.token)
	} else {
		cmd = exec.CommandContext(ctx, filepath.Join(bin, "codex"), "exec", "--json", "--skip-git-repo-check",
			"--dangerously-bypass-approvals-and-sandbox", "-c", "openai_base_url="+jsString(pp.base), "-")
		cmd.Stdin = strings.NewReader("Say hello.")
		env = append(env, "CODEX_API_KEY="+pp.token)
	}
	cmd.Env, cmd.Dir = env, home
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s did not end: %s", cli, out)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

func (pp *proxiedProvider) checkKeys(t *testing.T) {
	t.Helper()
	if pp.prov.SawSecret(pp.token) {
		t.Error("the provider saw the worker's token")
	}
	if pp.prov.SawWrongKey() {
		t.Errorf("the provider saw a wrong key (refusals %v)", pp.prov.Refused())
	}
}

// TestRealCLIsThroughModelProxy runs each real CLI's headless turn against
// the model proxy in front of the provider stand-in, the CLI holding only
// the per-worker token: the turn finishes, the provider sees the house key
// and never the token, and the proxy's count is the provider's usage.
func TestRealCLIsThroughModelProxy(t *testing.T) {
	bin := clisBin(t)
	for _, cli := range []string{"claude", "codex"} {
		t.Run(cli, func(t *testing.T) {
			pp := newProxiedProvider(t, cli)
			code, out := pp.runCLI(t, bin, cli)
			if code != 0 || !strings.Contains(out, "Hello from the stand-in.") {
				t.Fatalf("%s exited %d:\n%s", cli, code, out)
			}
			pp.checkKeys(t)
			calls := int64(len(pp.prov.Calls()))
			u := providerstandin.MessagesUsage
			if pp.fam == modelproxy.OpenAI {
				u = providerstandin.ResponsesUsage
			}
			want := modelproxy.Tokens{Input: u.Input * calls, Output: u.Output * calls, CacheRead: u.CacheRead * calls, CacheWrite: u.CacheWrite * calls}
			tot := pp.proxy.Totals()
			if calls == 0 || tot.Calls != calls || tot.Tokens != want || tot.Unmetered != 0 {
				t.Errorf("totals %+v; the provider answered %d calls (want tokens %+v)", tot, calls, want)
			}
			t.Logf("%s: %d model calls, models %v", cli, calls, tot.Models)
		})
	}
}

// TestRealCLIsAtTheCap runs each real CLI against a proxy whose worker is
// at its token cap: the CLI's one call is refused with galley's message,
// and the CLI stops without retrying it (the proxy sees exactly one
// refused call), reporting the message.
func TestRealCLIsAtTheCap(t *testing.T) {
	bin := clisBin(t)
	for _, cli := range []string{"claude", "codex"} {
		t.Run(cli, func(t *testing.T) {
			pp := newProxiedProvider(t, cli, modelproxy.WithBudget(modelproxy.Budget{Tokens: 1}))
			// One call spends the budget.
			if err := spend(pp); err != nil {
				t.Fatal(err)
			}
			code, out := pp.runCLI(t, bin, cli)
			if code == 0 || !strings.Contains(out, "galley: this worker has used its model budget") {
				t.Errorf("%s at the cap exited %d:\n%s", cli, code, out)
			}
			tot := pp.proxy.Totals()
			if tot.Refused != 1 || len(pp.prov.Calls()) != 1 {
				t.Errorf("%s: %d calls refused at the cap (want 1: not retried), the provider answered %d", cli, tot.Refused, len(pp.prov.Calls()))
			}
			pp.checkKeys(t)
		})
	}
}

// spend makes one model call through the proxy, as the worker would.
func spend(pp *proxiedProvider) error {
	var req *http.Request
	if pp.fam == modelproxy.Anthropic {
		req, _ = http.NewRequest(http.MethodPost, pp.base+"/v1/messages",
			strings.NewReader(`{"model":"claude-sonnet-5-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("x-api-key", pp.token)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req, _ = http.NewRequest(http.MethodPost, pp.base+"/responses", strings.NewReader(`{"model":"gpt-5.5","input":[{"type":"message","role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+pp.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	// The call is counted before its answer's last bytes reach the caller.
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || pp.proxy.Totals().Calls != 1 {
		return fmt.Errorf("spending the budget: %d, totals %+v", resp.StatusCode, pp.proxy.Totals())
	}
	return nil
}

// TestRealCLIsUnderADollarCap: claude's default model has a price, and its
// turn runs under a dollar cap, priced; codex's default (gpt-6.2-sol) has
// none, and its call is refused before it reaches the provider (the proxy
// reads the model from the request's head).
func TestRealCLIsUnderADollarCap(t *testing.T) {
	bin := clisBin(t)
	for _, cli := range []string{"claude", "codex"} {
		t.Run(cli, func(t *testing.T) {
			pp := newProxiedProvider(t, cli, modelproxy.WithBudget(modelproxy.Budget{MicroUSD: 100_000_000}))
			code, out := pp.runCLI(t, bin, cli)
			tot := pp.proxy.Totals()
			if cli == "claude" {
				if code != 0 || !tot.Priced || tot.Calls == 0 || tot.MicroUSD == 0 || tot.Refused != 0 {
					t.Errorf("claude exited %d, totals %+v:\n%s", code, tot, out)
				}
				return
			}
			if code == 0 || !strings.Contains(out, "galley has no price for model gpt-6.2-sol") || len(pp.prov.Calls()) != 0 || tot.Refused != 1 {
				t.Errorf("codex exited %d, the provider answered %d calls, totals %+v:\n%s", code, len(pp.prov.Calls()), tot, out)
			}
			pp.checkKeys(t)
		})
	}
}
