package harness_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/galley-run/galley/local/standin-cli/standin"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
	"github.com/galley-run/galley/pkg/workerapi/fakeapi"
)

// These tests run the real galley-worker binary as an ECS worker runs it:
// with a bootstrap code instead of a token, the secrets in GALLEY_
// variables, the task role's variables in its environment, and the
// stand-in claude and codex CLIs (local/standin-cli) as the agents.

var (
	standinOnce sync.Once
	standinDir  string
	standinErr  error
)

// standinCLIs builds the stand-in claude and codex once.
func standinCLIs(t *testing.T) string {
	t.Helper()
	standinOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(workerBin), "standin")
		for _, name := range []string{"claude", "codex"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name),
				"github.com/galley-run/galley/local/standin-cli/"+name).CombinedOutput()
			if err != nil {
				standinErr = &buildError{name, string(out), err}
				return
			}
		}
		standinDir = dir
	})
	if standinErr != nil {
		t.Fatal(standinErr)
	}
	return standinDir
}

type buildError struct {
	name, out string
	err       error
}

func (e *buildError) Error() string { return "build " + e.name + ": " + e.err.Error() + "\n" + e.out }

// randomSecret is a fresh value for a test secret: no fixture holds one.
func randomSecret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + hex.EncodeToString(b)
}

// bootstrapFront serves the worker API's credential exchange in front of
// the fake (which serves only the token-authenticated calls): code for
// handle is exchanged for token, for the first claim only, as galley does.
func bootstrapFront(t *testing.T, f *fakeapi.Server, handle, code, token string) string {
	t.Helper()
	target, err := url.Parse(f.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	claim := ""
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != workerapi.PathCredential {
			proxy.ServeHTTP(w, r)
			return
		}
		var req workerapi.CredentialRequest
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, `{"error":"malformed"}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if req.Handle != handle || req.Code != code || req.Claim == "" || (claim != "" && req.Claim != claim) {
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		claim = req.Claim
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(workerapi.CredentialAnswer{Token: token})
	}))
	t.Cleanup(front.Close)
	return front.URL
}

// ecsSecrets are an ECS worker's secrets and the task role's variables,
// each a fresh random value.
type ecsSecrets struct {
	anthropic, openai, git, bootstrap string
	// forbidden are variables the agent must never see, by name.
	forbidden map[string]string
}

func newECSSecrets(t *testing.T) ecsSecrets {
	s := ecsSecrets{
		anthropic: randomSecret(t, "sk-ant-"),
		openai:    randomSecret(t, "sk-oai-"),
		git:       randomSecret(t, "ghs_"),
		bootstrap: randomSecret(t, "gb1."),
		forbidden: map[string]string{},
	}
	for _, k := range []string{
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_REGION", "AWS_DEFAULT_REGION", "ECS_CONTAINER_METADATA_URI", "ECS_CONTAINER_METADATA_URI_V4",
		"GALLEY_KITCHN_TOKEN", "GALLEY_WORKER_SECRET", "SOME_OPERATOR_SETTING",
	} {
		s.forbidden[k] = randomSecret(t, "v-")
	}
	return s
}

// startECSHarness runs galley-worker as an ECS task's container runs it,
// for a worker of family, against f behind a credential exchange, with
// extra variables in its environment.
func startECSHarness(t *testing.T, f *fakeapi.Server, sec ecsSecrets, extra ...string) *proc {
	t.Helper()
	bin := standinCLIs(t)
	endpoint := bootstrapFront(t, f, "w-1", sec.bootstrap, testToken)
	p := &proc{stderr: &syncBuffer{}, done: make(chan struct{}), bare: bareRepo(t), ws: filepath.Join(t.TempDir(), "ws")}
	env := []string{
		"GALLEY_WORKER_ENDPOINT=" + endpoint,
		"GALLEY_WORKER_BOOTSTRAP=" + sec.bootstrap,
		"GALLEY_WORKER_HANDLE=w-1",
		"GALLEY_WORKSPACE=" + p.ws,
		"GALLEY_REPOSITORY=" + p.bare,
		"GALLEY_AGENT_BIN_DIR=" + bin,
		"GALLEY_HEARTBEAT_INTERVAL=1h",
		"GALLEY_ANTHROPIC_API_KEY=" + sec.anthropic,
		"GALLEY_OPENAI_API_KEY=" + sec.openai,
		"GALLEY_GIT_CREDENTIAL=" + sec.git,
		"HOME=" + t.TempDir(),
		"LC_ALL=C.UTF-8",
		"NODE_OPTIONS=--max-old-space-size=256",
	}
	for k, v := range sec.forbidden {
		env = append(env, k+"="+v)
	}
	env = append(env, extra...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GALLEY_"), strings.HasPrefix(k, "AWS_"), strings.HasSuffix(k, "_API_KEY"),
			k == "HOME", k == "LC_ALL", k == "NODE_OPTIONS":
		default:
			env = append(env, kv)
		}
	}
	p.cmd = exec.Command(workerBin)
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() || os.Getenv("GALLEY_TEST_LOGS") != "" {
			t.Logf("harness stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// TestCLIAgentOnECS runs each CLI family as an ECS worker: the agent sees
// its own provider key under the name its CLI reads and nothing it must
// not hold, and a message sent while it waits in a tool call mid-turn is
// appended to that call's result (the harness decides this after the
// bootstrap exchange, from the driver).
func TestCLIAgentOnECS(t *testing.T) {
	for _, tc := range []struct {
		family  string
		keyEnv  string
		ownKey  func(ecsSecrets) string
		notKeys []string
	}{
		{"claude", "ANTHROPIC_API_KEY", func(s ecsSecrets) string { return s.anthropic }, []string{"OPENAI_API_KEY", "CODEX_API_KEY"}},
		{"codex", "CODEX_API_KEY", func(s ecsSecrets) string { return s.openai }, []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}},
	} {
		t.Run(tc.family, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			sec := newECSSecrets(t)
			f := fakeapi.New(workerapi.Self{
				Handle: "w-1", Run: "run-1", Brief: strings.Join([]string{
					standin.Shebang,
					"env-report",
					`tool ask_coordinator {"subject":"Which API?","body":"v1 or v2?"}`,
					`tool post_status {"body":"after the question: $LAST"}`,
					`tool finish {"outcome":"succeeded","body":"done"}`,
				}, "\n"),
				Branch: testBranch, Agent: protocol.AgentSelection{Agent: tc.family},
			}, testToken)
			t.Cleanup(f.Close)
			p := startECSHarness(t, f, sec)

			s := waitFor(t, ctx, f, "the question", func(s fakeapi.Snapshot) bool {
				return s.State == protocol.StateAwaitingReply
			})
			posts := s.Posts()
			if len(posts) != 2 || posts[0].Kind != protocol.MsgStatus || posts[1].Kind != protocol.MsgQuestion {
				t.Fatalf("posts = %+v", posts)
			}
			checkAgentEnv(t, posts[0].Body, sec, tc.keyEnv, tc.ownKey(sec), tc.notKeys)

			// The message is queued before the reply, so the harness holds
			// it when the reply ends the agent's ask_coordinator call.
			f.Message("rebase onto main first")
			f.Reply(s.Calls[len(s.Calls)-1].PostID, "v2, please")
			if code := p.wait(t, ctx); code != 0 {
				t.Fatalf("harness exit code %d", code)
			}
			s = f.Snapshot()
			checkReadyFirst(t, s)
			var after string
			for _, post := range s.Posts() {
				if strings.HasPrefix(post.Body, "after the question: ") {
					after = post.Body
				}
			}
			if !strings.Contains(after, "v2, please") || !strings.Contains(after, "Message from the coordinator: rebase onto main first") {
				t.Errorf("the agent's tool result after the message was %q, want the reply and the message", after)
			}
			if s.State != protocol.StateSettled || s.Outcome != protocol.OutcomeSucceeded {
				t.Errorf("state %s/%s", s.State, s.Outcome)
			}
			log := p.stderr.String()
			for name, v := range map[string]string{"anthropic key": sec.anthropic, "openai key": sec.openai,
				"git credential": sec.git, "bootstrap code": sec.bootstrap} {
				if strings.Contains(log, v) {
					t.Errorf("the harness log holds the %s", name)
				}
			}
			p.checkNoToken(t)
		})
	}
}

// checkAgentEnv reads the stand-in's env-report: names and value hashes
// of the CLI's environment.
func checkAgentEnv(t *testing.T, report string, sec ecsSecrets, keyEnv, key string, notKeys []string) {
	t.Helper()
	var env map[string]string
	if err := json.Unmarshal([]byte(report), &env); err != nil {
		t.Fatalf("env report %q: %v", report, err)
	}
	// The agent's key is its model proxy's token, never the house's key.
	if env[keyEnv] == "" || env[keyEnv] == standin.HashValue(key) {
		t.Errorf("the agent's %s is not its model proxy's token (present: %v)", keyEnv, env[keyEnv] != "")
	}
	for _, k := range notKeys {
		if _, ok := env[k]; ok {
			t.Errorf("the agent has %s", k)
		}
	}
	for k := range env {
		switch {
		case strings.HasPrefix(k, "AWS_"), strings.HasPrefix(k, "ECS_"):
			t.Errorf("the agent has %s", k)
		case strings.HasPrefix(k, "GALLEY_") && !(keyEnv == "CODEX_API_KEY" && k == "GALLEY_MCP_SECRET"):
			// codex reads its MCP bearer token from GALLEY_MCP_SECRET.
			t.Errorf("the agent has %s", k)
		}
	}
	if _, ok := env["SOME_OPERATOR_SETTING"]; ok {
		t.Error("a variable off the allow-list reached the agent")
	}
	for _, k := range []string{"HOME", "PATH", "LC_ALL", "NODE_OPTIONS"} {
		if _, ok := env[k]; !ok {
			t.Errorf("the agent lacks %s, which the allow-list passes", k)
		}
	}
	// No value the agent must not hold is there under any name.
	bad := map[string]string{standin.HashValue(sec.git): "the git credential", standin.HashValue(sec.bootstrap): "the bootstrap code",
		standin.HashValue(testToken): "the worker token"}
	for _, k := range []string{sec.anthropic, sec.openai} {
		bad[standin.HashValue(k)] = "a provider key"
	}
	for k, v := range sec.forbidden {
		bad[standin.HashValue(v)] = "the value of " + k
	}
	for k, h := range env {
		if what, ok := bad[h]; ok {
			t.Errorf("the agent's %s holds %s", k, what)
		}
	}
}
