package awslocal_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials/endpointcreds"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"
	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/local/providerstandin"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/egress"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/workerapi"
)

// kitchn is a kitchn client of one stack: effects, observe, usage and a
// coordinator's mailbox.
type kitchn struct {
	t     *testing.T
	s     *awslocal.Stack
	token string
	house string
	run   string
	// pending rows read and acknowledged, not yet looked at.
	pending []protocol.MailMessage
	// patience bounds each wait for a row (default 90 s).
	patience time.Duration
}

func newKitchn(t *testing.T, s *awslocal.Stack, token, run string) *kitchn {
	return &kitchn{t: t, s: s, token: token, house: s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse], run: run}
}

func (k *kitchn) effect(key, effect string) (status string, receipt protocol.Receipt) {
	k.t.Helper()
	body := fmt.Sprintf(`{"run":%q,"request":{"house":%q,"backend":"galley","credential":"galley-token","task":"t-1",`+
		`"attempt":1,"key":%q,"effect":{"executor":"worker","effect":%s}}}`, k.run, k.house, key, effect)
	var out struct {
		Status  string
		Reason  string
		Receipt protocol.Receipt
	}
	kitchnCall(k.t, k.s, k.token, contract.RouteEffects, body, &out)
	return out.Status + out.Reason, out.Receipt
}

func (k *kitchn) worker(handle string) string {
	return fmt.Sprintf(`{"kind":"worker","backend":"galley","handle":%q}`, handle)
}

func (k *kitchn) observe(handle string) protocol.Observation {
	var obs protocol.Observation
	kitchnCall(k.t, k.s, k.token, contract.RouteObserve, `{"worker":`+k.worker(handle)+`}`, &obs)
	return obs
}

// next returns the first mailbox row from now on that match accepts,
// acknowledging every batch it reads.
func (k *kitchn) next(what string, match func(protocol.MailMessage) bool) protocol.MailMessage {
	k.t.Helper()
	patience := k.patience
	if patience == 0 {
		patience = 90 * time.Second
	}
	var passed []string // what was read meanwhile, for the failure's message
	for deadline := time.Now().Add(patience); time.Now().Before(deadline); {
		for len(k.pending) > 0 {
			r := k.pending[0]
			k.pending = k.pending[1:]
			if match(r) {
				return r
			}
			passed = append(passed, fmt.Sprintf("%s %.60q", r.Kind, r.Body))
			if r.Kind == protocol.MsgWorkerDone && !strings.Contains(what, "worker-done") {
				k.t.Fatalf("waiting for %s, the worker ended: %+v", what, r)
			}
		}
		var a protocol.MailboxAnswer
		kitchnCall(k.t, k.s, k.token, contract.RouteAwait, fmt.Sprintf(`{"run":%q,"coordinator":"c1","waitMs":10000}`, k.run), &a)
		if a.Delivery == nil {
			continue
		}
		var ack protocol.MailboxAnswer
		kitchnCall(k.t, k.s, k.token, contract.RouteAcknowledge, fmt.Sprintf(`{"run":%q,"coordinator":"c1","delivery":%q}`, k.run, a.Delivery.ID), &ack)
		k.pending = append(k.pending, a.Delivery.Messages...)
	}
	k.t.Fatalf("no %s in the mailbox within %s; passed over meanwhile: %v", what, patience, passed)
	return protocol.MailMessage{}
}

func kind(kind, prefix string) func(protocol.MailMessage) bool {
	return func(r protocol.MailMessage) bool { return r.Kind == kind && strings.HasPrefix(r.Body, prefix) }
}

func hash16(v string) string {
	h := sha256.Sum256([]byte(v))
	return hex.EncodeToString(h[:])[:16]
}

func randomValue(t *testing.T, prefix string) string {
	return prefix + suffix() + suffix() + suffix()
}

// TestWorkerFromTemplateAWSLocal runs the deployed worker path end to end
// through the stack deployed from its template, with the stand-in Claude
// Code and Codex CLIs in the worker image: the worker clones the house
// repository over authenticated git, gets its provider key from Secrets
// Manager through the task definition's secrets (resolved with the
// execution role, through the IAM gate), asks a question and gets the
// reply, receives a message in the middle of its turn, commits and pushes
// its branch, reports usage and settles. The agent's environment holds its
// provider key and none of kitchn's token, the task role's credentials, the
// worker signing key or the git credential.
func TestWorkerFromTemplateAWSLocal(t *testing.T) {
	t.Parallel()
	const (
		anthropicOrigin = "https://anthropic.llm-gateway.example"
		openaiOrigin    = "https://openai.llm-gateway.example"
	)
	keys := map[string]string{"anthropic": randomValue(t, "sk-ant-test-"), "openai": randomValue(t, "sk-test-")}
	provs := map[string]*providerstandin.Server{"claude": providerstandin.New(keys["anthropic"], nil),
		"codex": providerstandin.New(keys["openai"], nil)}
	for _, p := range provs {
		t.Cleanup(p.Close)
	}
	s, token := startStack(t, func(c *awslocal.Config) {
		c.Template = mutatedTemplate(t, withGateways(anthropicOrigin, openaiOrigin))
		c.WorkerServices = map[string]http.Handler{anthropicOrigin: provs["claude"].Config.Handler, openaiOrigin: provs["codex"].Config.Handler}
	})
	ctx := context.Background()
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	for name, v := range keys {
		if err := s.PutSecret(ctx, "galley/"+house+"/"+name, v); err != nil {
			t.Fatal(err)
		}
	}
	gitCred, err := s.SecretValue(ctx, s.FunctionEnv(lambdaapp.Effects)[contract.EnvSecretGit])
	if err != nil {
		t.Fatal(err)
	}
	signingKey, err := s.SecretValue(ctx, s.FunctionEnv(lambdaapp.Effects)[contract.EnvWorkerSecretArn])
	if err != nil {
		t.Fatal(err)
	}

	// The forge is strict: no credential, or a wrong one, reads nothing.
	scheme, _, _ := strings.Cut(s.GitURL(), "://")
	for _, url := range []string{s.GitURL(), strings.Replace(s.GitURL(), scheme+"://", scheme+"://x-access-token:wrong@", 1)} {
		cmd := exec.Command("git", "ls-remote", url)
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GIT_SSL_CAINFO="+s.CAFile())
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Authentication failed") &&
			!strings.Contains(string(out), "could not read Username") {
			t.Fatalf("git ls-remote without the credential: %v %s", err, out)
		}
	}

	for _, tc := range []struct{ family, keyVar, key string }{
		{"claude", "ANTHROPIC_API_KEY", keys["anthropic"]},
		{"codex", "CODEX_API_KEY", keys["openai"]},
	} {
		t.Run(tc.family, func(t *testing.T) {
			k := newKitchn(t, s, token, "run-"+tc.family)
			branch := "template/" + tc.family
			brief := strings.Join([]string{
				"#!standin",
				"env-report",
				"model which colour?",
				`tool ask_coordinator {"subject":"colour","body":"red or blue?"}`,
				`tool post_status {"body":"reply: $LAST"}`,
				"commit agent.txt written by " + tc.family,
				`tool finish {"outcome":"succeeded","body":"all done"}`,
			}, "\n")
			b, _ := json.Marshal(brief)
			st, rc := k.effect("k-launch-"+tc.family, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook",`+
				`"workspace":{"type":"isolated"},"brief":%s,"branch":%q,"agent":{"agent":%q}}`, b, branch, tc.family))
			if st != "applied" {
				t.Fatalf("launch: %s", st)
			}
			w := rc.Created[0].Handle

			env := k.next("env report", func(r protocol.MailMessage) bool {
				return r.Kind == protocol.MsgStatus && strings.HasPrefix(r.Body, "{")
			})
			var report map[string]string
			if err := json.Unmarshal([]byte(env.Body), &report); err != nil {
				t.Fatalf("env report: %v: %s", err, env.Body)
			}
			// The agent holds its model proxy's token, never the key the
			// harness read from Secrets Manager.
			if report[tc.keyVar] == "" || report[tc.keyVar] == hash16(tc.key) {
				t.Errorf("the agent's %s is not its model proxy's token (have %q)", tc.keyVar, report[tc.keyVar])
			}
			forbidden := map[string]string{"kitchn's token": token, "the git credential": gitCred, "the worker signing key": signingKey,
				"the anthropic key": keys["anthropic"], "the openai key": keys["openai"]}
			for name, h := range report {
				for what, v := range forbidden {
					if h == hash16(v) {
						t.Errorf("the agent's %s holds %s", name, what)
					}
				}
				if strings.HasPrefix(name, "AWS_") || strings.HasPrefix(name, "ECS_CONTAINER_METADATA") ||
					strings.HasPrefix(name, "GALLEY_") && name != "GALLEY_MCP_URL" && name != "GALLEY_MCP_SECRET" && name != "GALLEY_WORKSPACE" {
					t.Errorf("the agent's environment has %s", name)
				}
			}
			other := map[string]string{"claude": "CODEX_API_KEY", "codex": "ANTHROPIC_API_KEY"}[tc.family]
			if _, ok := report[other]; ok {
				t.Errorf("the %s agent has the other family's %s", tc.family, other)
			}

			q := k.next("question", kind(protocol.MsgQuestion, ""))
			if q.Subject != "colour" || q.Body != "red or blue?" {
				t.Fatalf("question: %+v", q)
			}
			if obs := k.observe(w); obs.State != protocol.StateAwaitingReply {
				t.Fatalf("state while the question waits: %+v", obs)
			}
			// A message while the agent works reaches it in the middle of
			// its turn, riding on its next tool result.
			if st, _ := k.effect("k-msg-"+tc.family, fmt.Sprintf(`{"type":"message-worker","worker":%s,"body":"hurry up"}`, k.worker(w))); st != "applied" {
				t.Fatalf("message: %s", st)
			}
			if st, _ := k.effect("k-reply-"+tc.family, fmt.Sprintf(`{"type":"reply-to-worker","worker":%s,"question":%q,"body":"blue"}`, k.worker(w), q.ID)); st != "applied" {
				t.Fatalf("reply: %s", st)
			}
			if r := k.next("reply status", kind(protocol.MsgStatus, "reply: ")); r.Body != "reply: blue\nMessage from the coordinator: hurry up" {
				t.Fatalf("the agent saw %q", r.Body)
			}
			done := k.next("worker-done", kind(protocol.MsgWorkerDone, ""))
			if done.Outcome != protocol.OutcomeSucceeded || done.Body != "all done" {
				t.Fatalf("worker-done: %+v", done)
			}
			if obs := k.observe(w); obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeSucceeded {
				t.Fatalf("settled as %+v", obs)
			}
			got, err := exec.Command("git", "--git-dir", s.Repository(), "show", branch+":agent.txt").CombinedOutput()
			if err != nil || string(got) != "written by "+tc.family {
				t.Fatalf("pushed file on %s: %q %v", branch, got, err)
			}
			// The reads function reads the private repository's branches
			// with the git credential: the branch is live, not
			// unverifiable.
			var inv struct {
				Resources []struct {
					Resource protocol.Resource
					Liveness string
				}
			}
			kitchnCall(t, s, token, contract.RouteInventory, "", &inv)
			liveness := ""
			for _, r := range inv.Resources {
				if r.Resource.Kind == "branch" && r.Resource.Handle == branch {
					liveness = r.Liveness
				}
			}
			if liveness != "live" {
				t.Errorf("the inventory lists branch %s as %q", branch, liveness)
			}
			var usage struct {
				Status string
				Report protocol.UsageReport
			}
			for deadline := time.Now().Add(30 * time.Second); usage.Status != "reported" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				kitchnCall(t, s, token, contract.RouteUsage, `{"worker":`+k.worker(w)+`}`, &usage)
			}
			// The stand-in CLI's model call went through its harness's model
			// proxy and the egress service to the provider, with the key
			// from Secrets Manager; the usage is the proxy's count.
			prov := provs[tc.family]
			u := providerstandin.MessagesUsage
			if tc.family == "codex" {
				u = providerstandin.ResponsesUsage
			}
			if n := len(prov.Calls()); n != 1 || prov.SawWrongKey() {
				t.Errorf("the provider answered %d calls (refused %v), want the agent's one", n, prov.Refused())
			}
			if usage.Status != "reported" || usage.Report.Tokens == nil || usage.Report.Agent != tc.family ||
				usage.Report.Tokens.Input == nil || *usage.Report.Tokens.Input != u.Input || *usage.Report.Tokens.Output != u.Output {
				t.Fatalf("usage %+v is not the proxy's count of one call of %+v", usage, u)
			}
		})
	}

	// The provider keys came from Secrets Manager through the task
	// definition: read by the execution role, through the IAM gate.
	read := map[string]bool{}
	for _, d := range s.Gate(iamgate.SecretsManager).Decisions() {
		if d.Allowed && d.Action == "secretsmanager:GetSecretValue" && strings.Contains(d.Role, "ExecutionRole") {
			read[d.Resource] = true
		}
	}
	for _, name := range []string{"anthropic", "openai", "git-credential"} {
		found := false
		for arn := range read {
			found = found || strings.Contains(arn, ":secret:galley/"+house+"/"+name+"-")
		}
		if !found {
			t.Errorf("the execution role never read the %s secret (read: %v)", name, read)
		}
	}
}

// TestTaskRoleIsCheckedAWSLocal: what a worker task's role may do is
// checked like any other role's. Whoever gets the task role's credentials
// from the task's credentials endpoint (the agent must not: its
// environment has no URL, TestWorkerFromTemplateAWSLocal) still cannot
// read the house's secrets with them: the IAM gate answers
// AccessDeniedException naming the action.
func TestTaskRoleIsCheckedAWSLocal(t *testing.T) {
	t.Parallel()
	s, token := sharedStack(t)
	k := newKitchn(t, s, token, "run-role")
	st, receipt := k.effect("k-role", `{"type":"launch-worker","role":"station-cook","workspace":{"type":"isolated"},"brief":"idle"}`)
	if st != "applied" || len(receipt.Created) == 0 {
		t.Fatalf("launch: %s", st)
	}
	var uri string
	for deadline := time.Now().Add(30 * time.Second); uri == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, task := range s.ECS().Tasks() {
			if task.Env["GALLEY_WORKER_HANDLE"] == receipt.Created[0].Handle { // its own task: the stack is shared
				uri = task.Env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
			}
		}
	}
	if uri == "" {
		t.Fatal("the worker task has no credentials endpoint")
	}
	ctx := context.Background()
	creds := endpointcreds.New(uri, func(o *endpointcreds.Options) { o.HTTPClient = caClient(t, s) })
	sm := secretsmanager.New(secretsmanager.Options{Region: "us-east-1", Credentials: aws.NewCredentialsCache(creds),
		BaseEndpoint: aws.String(s.GateURL(iamgate.SecretsManager)), HTTPClient: caClient(t, s)})
	for _, env := range []string{contract.EnvSecretGit, contract.EnvTokenSecretArn, contract.EnvWorkerSecretArn} {
		arn := s.FunctionEnv(lambdaapp.Effects)[env]
		_, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "AccessDeniedException" || !strings.Contains(api.ErrorMessage(), "secretsmanager:GetSecretValue") {
			t.Errorf("the task role read %s's secret: %v", env, err)
		}
	}
}

// withGateways sets the provider base URLs to the LLM gateways at the two
// origins as context keys anthropicBaseUrl and openaiBaseUrl set them: in
// the worker's environment, and the gateways' hosts among the harness's
// destinations at the egress proxy.
func withGateways(anthropicOrigin, openaiOrigin string) func(res map[string]any) error {
	return func(res map[string]any) error {
		cs, err := workerContainers(res)
		if err != nil {
			return err
		}
		for _, c := range cs {
			env, _ := c["Environment"].([]any)
			c["Environment"] = append(env,
				map[string]any{"Name": harness.EnvAnthropicBaseURL, "Value": anthropicOrigin},
				map[string]any{"Name": harness.EnvOpenAIBaseURL, "Value": openaiOrigin + "/v1"})
		}
		e, err := egressContainer(res)
		if err != nil {
			return err
		}
		for _, kv := range e["Environment"].([]any) {
			if kv := kv.(map[string]any); kv["Name"] == egress.EnvHarnessAllow {
				kv["Value"] = map[string]any{"Fn::Join": []any{",", []any{kv["Value"],
					strings.TrimPrefix(anthropicOrigin, "https://") + "," + strings.TrimPrefix(openaiOrigin, "https://")}}}
				return nil
			}
		}
		return fmt.Errorf("the egress proxy's task sets no %s", egress.EnvHarnessAllow)
	}
}

// TestImageCLIsWorkerAWSLocal runs the worker image's own pinned Claude
// Code and Codex CLIs (worker/agent-clis, installed in the image) as the
// deployed workers, against the provider stand-in (local/providerstandin)
// that the template's provider base URLs name: what context keys
// anthropicBaseUrl and openaiBaseUrl set in the task definition
// (GALLEY_ANTHROPIC_BASE_URL, GALLEY_OPENAI_BASE_URL), an https URL of a
// gateway that aws-local serves on the container network with the
// stack's CA (Config.WorkerServices). Each CLI, under the agent's own uid
// in its container, follows the stand-in's script through galley's MCP
// tools: it commits and pushes its branch through the harness's push gate
// and finishes. Each runs in its own family's image (worker/Dockerfile's
// target, the template's task definition of that family): the claude
// image holds Claude Code and no Node, the codex image Codex and Node.
func TestImageCLIsWorkerAWSLocal(t *testing.T) {
	t.Parallel()
	if img := requireWorkerImage(t); img == "" {
		t.Skipf("%s is not set: the image's CLIs run only in its containers", awslocal.EnvWorkerImage)
	}
	const (
		anthropicOrigin = "https://anthropic.llm-gateway.example"
		openaiOrigin    = "https://openai.llm-gateway.example"
	)
	keys := map[string]string{"claude": randomValue(t, "sk-ant-test-"), "codex": randomValue(t, "sk-test-")}
	// What the task's image holds: its agent CLIs, and Node or none.
	shell := "{ ls /opt/agents/bin; command -v node || echo no-node; } > image.txt && " +
		"id -u > agent-uid.txt && printf 'hello\\n' > greeting.txt && git add greeting.txt agent-uid.txt image.txt && " +
		"git -c user.name=agent -c user.email=agent@example.com commit -qm 'add greeting' && git push -q origin HEAD"
	codexCall := func(tool, args string) string {
		return "const r = await tools." + tool + "(" + args + ");\n" +
			"text(typeof r === \"string\" ? r : (r.content || []).map((c) => c.text).join(\"\\n\"));\n"
	}
	shellJS, _ := json.Marshal(shell)
	provs := map[string]*providerstandin.Server{
		"claude": providerstandin.New(keys["claude"], []providerstandin.Step{
			{Tool: "ToolSearch", Input: map[string]any{"query": "select:mcp__galley__finish"}},
			{Tool: "Bash", Input: map[string]any{"command": shell, "description": "commit and push the greeting"}},
			{Tool: "mcp__galley__finish", Input: map[string]any{"outcome": "succeeded", "body": "greeting pushed"}},
			{Text: "Done."},
		}),
		// codex 0.171's code mode: one exec tool whose JavaScript calls the
		// nested tools (realcli's script).
		"codex": providerstandin.New(keys["codex"], []providerstandin.Step{
			{Tool: "exec", Code: "text(ALL_TOOLS.filter((t) => t.name.startsWith(\"mcp__galley__\")).map((t) => t.name).sort().join(\",\"));\n"},
			{Tool: "exec", Code: "const r = await tools.exec_command({cmd: " + string(shellJS) + "});\ntext(JSON.stringify(r));\n"},
			{Tool: "exec", Code: codexCall("mcp__galley__finish", `{outcome: "succeeded", body: "greeting pushed"}`)},
			{Text: "Done."},
		}),
	}
	for _, p := range provs {
		t.Cleanup(p.Close)
	}
	tpl := mutatedTemplate(t, withGateways(anthropicOrigin, openaiOrigin))
	s, token := startStack(t, func(c *awslocal.Config) {
		c.Template = tpl
		c.ImageAgentCLIs = true
		c.WorkerServices = map[string]http.Handler{anthropicOrigin: provs["claude"].Config.Handler, openaiOrigin: provs["codex"].Config.Handler}
	})
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	for name, fam := range map[string]string{"anthropic": "claude", "openai": "codex"} {
		if err := s.PutSecret(context.Background(), "galley/"+house+"/"+name, keys[fam]); err != nil {
			t.Fatal(err)
		}
	}
	for _, fam := range []string{"claude", "codex"} {
		t.Run(fam, func(t *testing.T) {
			prov := provs[fam]
			defer func() {
				if t.Failed() {
					for _, c := range prov.Calls() {
						t.Logf("provider call: api=%s step=%d ua=%q results=%q", c.API, c.Step, c.UserAgent, c.Results)
					}
					t.Logf("provider refusals: %v", prov.Refused())
				}
			}()
			k := newKitchn(t, s, token, "run-image-"+fam)
			// A real CLI's start and its model turns, on a loaded machine:
			// a bound against a hang, not a time to meet.
			k.patience = 10 * time.Minute
			branch := "image-cli/" + fam
			st, rc := k.effect("k-image-"+fam, fmt.Sprintf(`{"type":"launch-worker","role":"station-cook",`+
				`"workspace":{"type":"isolated"},"brief":"Add a greeting file, push it, and finish.","branch":%q,"agent":{"agent":%q}}`, branch, fam))
			if st != "applied" {
				t.Fatalf("launch: %s", st)
			}
			w := rc.Created[0].Handle
			done := k.next("worker-done", kind(protocol.MsgWorkerDone, ""))
			if done.Outcome != protocol.OutcomeSucceeded || done.Body != "greeting pushed" {
				t.Fatalf("worker-done: %+v", done)
			}
			if obs := k.observe(w); obs.State != protocol.StateSettled || obs.Outcome != protocol.OutcomeSucceeded {
				t.Fatalf("settled as %+v", obs)
			}
			show := func(file string) string {
				out, err := exec.Command("git", "--git-dir", s.Repository(), "show", branch+":"+file).CombinedOutput()
				if err != nil {
					t.Fatalf("%s on the pushed branch %s: %v %s", file, branch, err, out)
				}
				return string(out)
			}
			if got := show("greeting.txt"); got != "hello\n" {
				t.Errorf("pushed greeting.txt = %q", got)
			}
			if got, want := show("image.txt"), map[string]string{"claude": "claude\nno-node\n", "codex": "codex\n/usr/local/bin/node\n"}[fam]; got != want {
				t.Errorf("the %s worker's task ran an image holding %q, want its family's (%q)", fam, got, want)
			}
			uid, err := strconv.Atoi(strings.TrimSpace(show("agent-uid.txt")))
			if err != nil || uid < workerapi.AgentUIDBase || uid >= workerapi.AgentUIDEnd {
				t.Errorf("the agent ran as uid %q, not one of the service's agent uids", show("agent-uid.txt"))
			}
			// The real CLI called the provider stand-in (the stand-in CLIs
			// call no provider), with the key, for every step.
			steps, ua := 0, ""
			for _, c := range prov.Calls() {
				if c.Step >= 0 {
					steps++
					ua = c.UserAgent
				}
			}
			// Up to finish's call; the text after it may come or not before
			// the harness ends the agent.
			if steps < 3 {
				t.Errorf("the provider played %d scripted steps, want the 3 up to finish", steps)
			}
			if want := map[string]string{"claude": "claude-cli/2.1.332", "codex": "0.171.0"}[fam]; !strings.Contains(ua, want) {
				t.Errorf("the model calls' User-Agent %q is not the image's pinned %s (%s)", ua, fam, want)
			}
			// The CLI called its harness's model proxy, which alone holds
			// the key and answers claude's connectivity check (HEAD
			// /api/hello) itself: the provider saw the house's key on
			// every call and was asked nothing else.
			if r := prov.Refused(); len(r) > 0 || prov.SawWrongKey() {
				t.Errorf("the provider refused: %v", r)
			}
			// galley's usage is the proxy's count of what the provider
			// answered (each call's fixed usage), reported once the agent
			// ended.
			u := providerstandin.MessagesUsage
			if fam == "codex" {
				u = providerstandin.ResponsesUsage
			}
			calls := int64(len(prov.Calls()))
			var usage struct {
				Status string
				Report protocol.UsageReport
			}
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				kitchnCall(t, s, token, contract.RouteUsage, `{"worker":`+k.worker(w)+`}`, &usage)
				if tok := usage.Report.Tokens; usage.Status == "reported" && tok != nil && tok.Input != nil && *tok.Input == calls*u.Input {
					break
				}
			}
			tok := usage.Report.Tokens
			if usage.Status != "reported" || tok == nil || tok.Input == nil || *tok.Input != calls*u.Input || tok.Output == nil ||
				*tok.Output != calls*u.Output || tok.CacheRead == nil || *tok.CacheRead != calls*u.CacheRead || usage.Report.Agent != fam {
				t.Errorf("usage %+v is not the provider's count over %d calls of %+v", usage, calls, u)
			}
		})
	}
}
