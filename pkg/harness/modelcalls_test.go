package harness_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/client"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// An agent's model calls reach the provider through its harness's model
// proxy with the token the agent holds, the provider seeing the harness's
// key; a call with another token is refused; and once the worker has
// ended, the token has nowhere to go: the proxy's listener is closed
// (issue 28, item 1: a token that "ends with the worker"). Headers over
// the harness's bound are refused (431) before they are read whole.
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
	// The last call's headers are over the proxy's bound (16 KiB).
	script := `echo "$ANTHROPIC_BASE_URL" > "$1"; echo "$ANTHROPIC_API_KEY" >> "$1"; ` + call("$ANTHROPIC_API_KEY") + `; ` +
		call("galley-model-someone-elses") + `; ` +
		strings.Replace(call("$ANTHROPIC_API_KEY"), "curl ", `curl -H "x-pad: $(head -c 32768 /dev/zero | tr '\0' a)" `, 1) + `; echo started`
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
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "galley-model-") || lines[2] != "200" || lines[3] != "401" || lines[4] != "431" {
		t.Fatalf("the agent's base URL, a key of %d bytes and calls %q; want a proxy token, 200 with it, 401 with another, "+
			"431 with headers over the bound",
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

// modelCall is a shell command that makes one model call through the
// agent's model proxy, its status appended to "$1".
const modelCall = `curl -s -o /dev/null -w '%{http_code}\n' -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' ` +
	`-H 'content-type: application/json' -d '{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' ` +
	`"$ANTHROPIC_BASE_URL/v1/messages" >> "$1"`

var anthropicNeeds = harness.AgentNeeds{Provider: harness.ProviderAnthropic, KeyEnv: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL"}

// callOrder is the index in the fake's calls of the first that matches.
func callOrder(s fakeapi.Snapshot, match func(fakeapi.Call) bool) int {
	for i, c := range s.Calls {
		if match(c) {
			return i
		}
	}
	return -1
}

// An agent that exits while its model call is still being answered: the
// answer is read on, the call counted, and its usage reported before the
// exit report that settles the worker (after it, galley takes no usage).
// Before, the last report went out at once, without the call, and the
// call was cut at the harness's end, its usage never read.
func TestModelUsageDrainedBeforeTheExitReport(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const answer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
		`"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":11,"output_tokens":7}}`
	// A provider that answers slowly: the first bytes at once, the rest
	// (with the usage) after a while. It says when it has begun.
	answering := filepath.Join(t.TempDir(), "answering")
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
		_, _ = io.WriteString(w, answer[:20])
		http.NewResponseController(w).Flush()
		_ = os.WriteFile(answering, nil, 0o644)
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, answer[20:])
	}))
	t.Cleanup(prov.Close)
	// The call goes on in the background (away from the agent's output,
	// which the harness waits for); the agent exits once its answer has
	// begun.
	script := `curl -s -o /dev/null -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' ` +
		`-H 'content-type: application/json' -d '{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}' ` +
		`"$ANTHROPIC_BASE_URL/v1/messages" </dev/null >/dev/null 2>&1 & ` +
		`n=0; until [ -e "$1" ] || [ $n -ge 200 ]; do sleep 0.05; n=$((n+1)); done; exit 3`
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}})
	p := runInProcess(t, ctx, f, "claude", shellDriver{script: script, args: []string{answering}, needs: anthropicNeeds}, func(c *harness.Config) {
		c.AnthropicKey, c.AnthropicBaseURL = randomSecret(t, "sk-ant-test-"), prov.URL
	})
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	usage := callOrder(s, func(c fakeapi.Call) bool {
		tok := func() *protocol.Tokens {
			if c.Usage == nil {
				return nil
			}
			return c.Usage.Report.Tokens
		}()
		return tok != nil && tok.Input != nil && *tok.Input == 11 && tok.Output != nil && *tok.Output == 7
	})
	exited := callOrder(s, func(c fakeapi.Call) bool { return c.Exited != nil })
	if usage < 0 || exited < 0 || usage > exited {
		t.Errorf("the usage of the call in flight was reported at %d, the exit at %d (of %d calls): want the usage first", usage, exited, len(s.Calls))
	}
}

// A usage report galley answers 409 (the worker has settled: its usage is
// final) is the last: it is not sent again, nor logged as an error.
func TestModelUsageConflictIsFinal(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	key := randomSecret(t, "sk-ant-test-")
	prov := providerstandin.New(key, nil)
	t.Cleanup(prov.Close)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}})
	f.FailNext(workerapi.PathUsage, http.StatusConflict)
	out := filepath.Join(t.TempDir(), "out")
	p := runInProcess(t, ctx, f, "claude", shellDriver{script: modelCall + "; exit 3", args: []string{out}, needs: anthropicNeeds}, func(c *harness.Config) {
		c.AnthropicKey, c.AnthropicBaseURL = key, prov.URL
	})
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != "200" {
		t.Fatalf("the agent's call answered %q", b)
	}
	s := f.Snapshot()
	if n := s.Attempts[workerapi.PathUsage]; n != 1 || s.Count(workerapi.PathExited) != 1 {
		t.Errorf("%d usage reports after one answered 409 (want 1), %d exit reports", n, s.Count(workerapi.PathExited))
	}
	if strings.Contains(p.log.String(), "cannot report usage") {
		t.Error("a usage report answered 409 was logged as a failure")
	}
}

// The escalation at the cap is posted before the exit report, however
// long galley takes to take it: an agent refused at its cap that exits at
// once does not take its escalation with it. Before, it was posted aside
// and the exit report did not wait for it.
func TestModelCapEscalatedBeforeTheExitReport(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	key := randomSecret(t, "sk-ant-test-")
	prov := providerstandin.New(key, nil)
	t.Cleanup(prov.Close)
	f := fakeFor(t, workerapi.Self{Agent: protocol.AgentSelection{Agent: "claude"}})
	// The escalation's first two attempts fail: it takes two seconds.
	f.FailNext(workerapi.PathPost, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	out := filepath.Join(t.TempDir(), "out")
	p := runInProcess(t, ctx, f, "claude", shellDriver{script: modelCall + "; " + modelCall + "; exit 3", args: []string{out}, needs: anthropicNeeds},
		func(c *harness.Config) {
			c.AnthropicKey, c.AnthropicBaseURL = key, prov.URL
			c.ModelBudget.Tokens = 1
			c.ClientOptions = []client.Option{client.WithRetry(3, time.Second, time.Second)}
		})
	if err := p.wait(t, ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(out); len(strings.Fields(string(b))) != 2 || strings.Fields(string(b))[0] != "200" || strings.Fields(string(b))[1] == "200" {
		t.Fatalf("the agent's calls answered %q; want 200, then a refusal at the cap", b)
	}
	s := f.Snapshot()
	escalation := callOrder(s, func(c fakeapi.Call) bool { return c.Post != nil && c.Post.Kind == protocol.MsgEscalation })
	exited := callOrder(s, func(c fakeapi.Call) bool { return c.Exited != nil })
	if escalation < 0 || exited < 0 || escalation > exited {
		t.Errorf("the escalation was posted at %d, the exit at %d (of %d calls): want the escalation first", escalation, exited, len(s.Calls))
	}
}
