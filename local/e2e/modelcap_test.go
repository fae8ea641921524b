package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/eventlog"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/store"
)

// realCLIs is the folder with the pinned claude and codex (make test
// installs them: scripts/agent-clis.sh), or the test skips (fails when
// GALLEY_REQUIRE_REAL_CLIS=1).
func realCLIs(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GALLEY_AGENT_CLIS_BIN")
	if dir == "" {
		if os.Getenv("GALLEY_REQUIRE_REAL_CLIS") == "1" {
			t.Fatal("GALLEY_REQUIRE_REAL_CLIS=1 but GALLEY_AGENT_CLIS_BIN is unset: run scripts/agent-clis.sh")
		}
		t.Skip("GALLEY_AGENT_CLIS_BIN unset: the real CLIs are not installed (scripts/agent-clis.sh)")
	}
	return dir
}

// TestModelCapThroughGalleyServe (issue 28, item 2): galley serve with a
// token cap and --anthropic-base-url naming the provider stand-in runs the
// real Claude Code as a worker. Its model calls go through its harness's
// model proxy, which forwards them to the base URL with the house key; once
// the worker's count reaches the cap the proxy refuses further calls, the
// worker escalates to its coordinator, the operator's event log says why,
// no call is admitted past the cap, and the usage kitchn reads is the
// proxy's count of what the provider answered.
func TestModelCapThroughGalleyServe(t *testing.T) {
	clis := realCLIs(t)
	key := "sk-ant-test-" + randomHex(t)
	// Every scripted step is a tool call: the CLI calls the model again
	// after each, until the proxy refuses it.
	var steps []providerstandin.Step
	for i := 0; i < 12; i++ {
		steps = append(steps, providerstandin.Step{Tool: "Bash", Input: map[string]any{"command": "echo step " + strconv.Itoa(i), "description": "a step"}})
	}
	prov := providerstandin.New(key, steps)
	t.Cleanup(prov.Close)
	u := providerstandin.MessagesUsage
	perCall := u.Input + u.Output + u.CacheRead + u.CacheWrite
	capTokens := 3 * perCall

	env := serveEnv{"HOME": t.TempDir(), "ANTHROPIC_API_KEY": key}
	openForAgents(t, "", false)
	s := startServerEnv(t, env, t.TempDir(), "--families", "claude", "--agent-bin-dir", clis,
		"--anthropic-base-url", prov.URL, "--model-cap-tokens", strconv.FormatInt(capTokens, 10))
	t.Cleanup(func() { dumpWorkerLogs(t, s) })

	run := "run-cap"
	w, ans := agentLaunch(t, s, run, "k-cap", "Run the steps.", "cap/claude", map[string]string{"agent": "claude"})
	if w == "" {
		t.Fatalf("launch not applied: %s", ans)
	}
	defer workerEffect(t, s, run, "k-cap-cancel", `{"type":"cancel-worker","worker":`+workerRes(w)+`}`)
	// The token the CLI holds, read while it runs: the provider must
	// never see it.
	token := proxyTokenOf(t, s.Data, w, "ANTHROPIC_API_KEY")
	mb := &mailbox{s: s, run: run}
	esc := mb.next(t, "the escalation at the cap", func(r mailRow) bool {
		return r.Kind == protocol.MsgEscalation && r.Subject == "Model budget reached"
	})
	if !strings.Contains(esc.Body, "galley") || !strings.Contains(esc.Body, strconv.FormatInt(capTokens, 10)) {
		t.Errorf("the escalation does not say which budget was spent: %q", esc.Body)
	}

	// The operator's event log says why.
	var es []store.Event
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if es = eventsOf(t, s, w); hasEvent(es, eventlog.KindWarning, map[string]string{"budget": "reached"}) {
			break
		}
	}
	if !hasEvent(es, eventlog.KindWarning, map[string]string{"budget": "reached"}) {
		t.Errorf("the worker's event log has no warning that its model budget was spent: %v", es)
	}

	// No call was admitted once the count had reached the cap: the calls
	// that ran reached it, and the ones before the last were under it.
	calls := int64(len(prov.Calls()))
	if calls*perCall < capTokens || (calls-1)*perCall >= capTokens {
		t.Errorf("the provider answered %d calls of %d tokens against a cap of %d", calls, perCall, capTokens)
	}
	if prov.SawWrongKey() || prov.SawSecret(token) || !prov.SawSecret(key) {
		t.Errorf("the provider saw another key than the house's (the CLI's token: %v; the house key: %v): %v",
			prov.SawSecret(token), prov.SawSecret(key), prov.Refused())
	}
	// kitchn's usage is the proxy's count of the provider's answers.
	var rep protocol.UsageReport
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var status string
		if status, rep = usageOf(t, s, w); status == "reported" && rep.Tokens != nil && rep.Tokens.Input != nil && *rep.Tokens.Input == calls*u.Input {
			break
		}
	}
	tok := rep.Tokens
	if tok == nil || tok.Input == nil || *tok.Input != calls*u.Input || tok.Output == nil || *tok.Output != calls*u.Output ||
		tok.CacheRead == nil || *tok.CacheRead != calls*u.CacheRead || tok.CacheWrite == nil || *tok.CacheWrite != calls*u.CacheWrite {
		t.Errorf("usage %s is not the proxy's count of %d calls of %+v", jsonOf(rep), calls, u)
	}
	if rep.Agent != "claude" {
		t.Errorf("usage names agent %q", rep.Agent)
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// proxyTokenOf reads the model proxy's token that a worker's agent holds
// in its environment as name, from a process under the worker's harness,
// while it runs (as root, for the test alone: no value is logged).
func proxyTokenOf(t *testing.T, data, handle, name string) string {
	t.Helper()
	harness := harnessPid(t, data, handle)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			pid, err := strconv.Atoi(filepath.Base(d))
			if err != nil || pid == harness || !descendsFrom(pid, harness) {
				continue
			}
			b, err := os.ReadFile(filepath.Join(d, "environ"))
			if err != nil {
				continue
			}
			for _, kv := range strings.Split(string(b), "\x00") {
				if v, ok := strings.CutPrefix(kv, name+"="); ok && strings.HasPrefix(v, "galley-model-") {
					return v
				}
			}
		}
	}
	t.Fatalf("no process under worker %s's harness holds a model proxy token in %s", handle, name)
	return ""
}

// descendsFrom reports whether pid is ancestor or runs under it.
func descendsFrom(pid, ancestor int) bool {
	for range 64 {
		if pid == ancestor {
			return true
		}
		if pid <= 1 {
			return false
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}
