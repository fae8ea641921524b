package awslocal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/galley-run/galley/local/awslocal"
	"github.com/galley-run/galley/local/iamgate"
	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/harness"
	"github.com/galley-run/galley/pkg/lambdaapp"
	"github.com/galley-run/galley/pkg/protocol"
	"github.com/galley-run/galley/pkg/protocol/client"
)

// smoke drives the deployment's main paths as kitchn and a worker would —
// the descriptor, a scripted worker launched on a branch that reports
// and settles, observe, and a Claude Code worker (the stand-in CLI) that
// needs its provider key — and returns the first failure, explained from
// what the stack saw: the HTTP answer, the functions' init errors, and
// the IAM gates' denials.
func smoke(s *awslocal.Stack, token string, logs *syncBuffer) error {
	explain := func(err error) error {
		var why []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "function init failed") {
				why = append(why, strings.TrimSpace(line))
			}
		}
		for _, svc := range []iamgate.Service{iamgate.DynamoDB, iamgate.SQS, iamgate.SecretsManager, iamgate.ECS} {
			for _, d := range s.Gate(svc).Decisions() {
				if !d.Allowed {
					why = append(why, fmt.Sprintf("AccessDeniedException: %s is not authorized to perform: %s on resource: %s", d.Caller, d.Action, d.Resource))
				}
			}
		}
		if len(why) == 0 {
			return err
		}
		return fmt.Errorf("%w\n  %s", err, strings.Join(why, "\n  "))
	}
	kc := client.New(s.Endpoint(), token, client.WithTimeout(0))
	do := func(route contract.Route, body string, out any) error {
		var b []byte
		if body != "" {
			b = []byte(body)
		}
		a, err := kc.Call(context.Background(), route, b, "", 0)
		if err != nil {
			return err
		}
		if a.Status != http.StatusOK {
			return fmt.Errorf("%s: %d %s", route.Pattern(), a.Status, strings.TrimSpace(string(a.Body)))
		}
		return json.Unmarshal(a.Body, out)
	}
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	launch := func(run, key, brief, branch, agent string) (string, error) {
		b, _ := json.Marshal(brief)
		sel := ""
		if agent != "" {
			sel = fmt.Sprintf(`,"agent":{"agent":%q}`, agent)
		}
		body := fmt.Sprintf(`{"run":%q,"request":{"house":%q,"backend":"galley","credential":"galley-token","task":"t","attempt":1,`+
			`"key":%q,"effect":{"executor":"worker","effect":{"type":"launch-worker","role":"station-cook",`+
			`"workspace":{"type":"isolated"},"brief":%s,"branch":%q%s}}}}`, run, house, key, b, branch, sel)
		var out struct {
			Status, Reason string
			Receipt        protocol.Receipt
		}
		if err := do(contract.RouteEffects, body, &out); err != nil {
			return "", err
		}
		if out.Status != "applied" || len(out.Receipt.Created) == 0 {
			return "", fmt.Errorf("launch %s: %s %s", key, out.Status, out.Reason)
		}
		return out.Receipt.Created[0].Handle, nil
	}
	settled := func(run, handle string) error {
		var obs protocol.Observation
		for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); {
			var a protocol.MailboxAnswer
			if err := do(contract.RouteAwait, fmt.Sprintf(`{"run":%q,"coordinator":"c","waitMs":5000}`, run), &a); err != nil {
				return err
			}
			if a.Delivery != nil {
				for _, m := range a.Delivery.Messages {
					if m.Kind == protocol.MsgWorkerDone {
						if m.Outcome != protocol.OutcomeSucceeded {
							return fmt.Errorf("worker %s settled %s: %s", handle, m.Outcome, m.Body)
						}
						if err := do(contract.RouteObserve, `{"worker":{"kind":"worker","backend":"galley","handle":"`+handle+`"}}`, &obs); err != nil {
							return err
						}
						if obs.State != protocol.StateSettled {
							return fmt.Errorf("worker %s reported done, observe says %s", handle, obs.State)
						}
						return nil
					}
				}
				var ack protocol.MailboxAnswer
				if err := do(contract.RouteAcknowledge, fmt.Sprintf(`{"run":%q,"coordinator":"c","delivery":%q}`, run, a.Delivery.ID), &ack); err != nil {
					return err
				}
			}
		}
		return fmt.Errorf("worker %s never reported", handle)
	}
	var d map[string]any
	if err := do(contract.RouteDescriptor, "", &d); err != nil {
		return explain(err)
	}
	w, err := launch("smoke-script", "k-smoke-script", "#!galley-script\nstatus hello\ncommit smoke.txt smoke\ndone succeeded ok", "smoke/script", "")
	if err != nil {
		return explain(err)
	}
	if err := settled("smoke-script", w); err != nil {
		return explain(err)
	}
	w, err = launch("smoke-claude", "k-smoke-claude", "#!standin\ntool finish {\"outcome\":\"succeeded\",\"body\":\"ok\"}", "smoke/claude", "claude")
	if err != nil {
		return explain(err)
	}
	return explain(settled("smoke-claude", w))
}

// mutatedTemplate writes a mutated copy of the stack template into a
// folder of its own, beside links to the original's assets.
func mutatedTemplate(t *testing.T, mutate func(resources map[string]any) error) string {
	t.Helper()
	src := template(t)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var tpl map[string]any
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	if err := mutate(tpl["Resources"].(map[string]any)); err != nil {
		t.Fatalf("mutation: %v", err)
	}
	dir := t.TempDir()
	assets, _ := filepath.Glob(filepath.Join(filepath.Dir(src), "asset.*"))
	for _, a := range assets {
		if err := os.Symlink(a, filepath.Join(dir, filepath.Base(a))); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := json.Marshal(tpl)
	p := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// resourcesOf lists the resources of one type with their properties.
func resourcesOf(res map[string]any, typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range res {
		m := r.(map[string]any)
		if m["Type"] == typ {
			p, _ := m["Properties"].(map[string]any)
			out[id] = p
		}
	}
	return out
}

// taskContainer is the container of the template's task definitions that
// is: the worker's (named "worker") or the egress proxy's (which runs
// the egress-proxy command).
func taskContainer(res map[string]any, is func(c map[string]any) bool) (map[string]any, error) {
	for _, p := range resourcesOf(res, "AWS::ECS::TaskDefinition") {
		for _, c := range p["ContainerDefinitions"].([]any) {
			if c := c.(map[string]any); is(c) {
				return c, nil
			}
		}
	}
	return nil, fmt.Errorf("no such task definition container")
}

// workerContainer is the worker container of the default task definition
// (the effects function's GALLEY_TASK_DEFINITION), which the scripted
// agent's workers run.
func workerContainer(res map[string]any) (map[string]any, error) {
	effects, err := functionByPath(res, "Effects")
	if err != nil {
		return nil, err
	}
	vars, _ := effects["Environment"].(map[string]any)["Variables"].(map[string]any)
	ref, _ := vars[contract.EnvTaskDefinition].(map[string]any)
	id, _ := ref["Ref"].(string)
	r, _ := res[id].(map[string]any)
	if r == nil {
		return nil, fmt.Errorf("the effects function's %s is no Ref to a task definition of the template", contract.EnvTaskDefinition)
	}
	p, _ := r["Properties"].(map[string]any)
	for _, c := range p["ContainerDefinitions"].([]any) {
		if c := c.(map[string]any); c["Name"] == "worker" {
			return c, nil
		}
	}
	return nil, fmt.Errorf("task definition %s has no worker container", id)
}

// workerContainers are the worker containers of every worker task
// definition (one per agent family).
func workerContainers(res map[string]any) ([]map[string]any, error) {
	var out []map[string]any
	for _, p := range resourcesOf(res, "AWS::ECS::TaskDefinition") {
		for _, c := range p["ContainerDefinitions"].([]any) {
			if c := c.(map[string]any); c["Name"] == "worker" {
				out = append(out, c)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no worker task definition")
	}
	return out, nil
}

func egressContainer(res map[string]any) (map[string]any, error) {
	return taskContainer(res, func(c map[string]any) bool {
		cmd, _ := c["Command"].([]any)
		return len(cmd) > 0 && cmd[0] == "egress-proxy"
	})
}

// functionByPath finds a function by its construct path's name (Effects).
func functionByPath(res map[string]any, name string) (map[string]any, error) {
	for _, r := range res {
		m := r.(map[string]any)
		path, _ := m["Metadata"].(map[string]any)["aws:cdk:path"].(string)
		if m["Type"] == "AWS::Lambda::Function" && strings.Split(path, "/")[1] == name {
			return m["Properties"].(map[string]any), nil
		}
	}
	return nil, fmt.Errorf("no function %s", name)
}

// TestTemplateMutations deploys copies of the synthesized template, each
// missing one thing, and shows that the smoke run fails on each with a
// message naming what is missing — and passes on the template as it is.
// A local stack configured beside the template could not tell.
func TestTemplateMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(res map[string]any) error
		want   []string // every one must appear in the smoke failure
	}{
		{name: "unchanged", mutate: func(map[string]any) error { return nil }},
		{name: "route removed", want: []string{contract.RouteEffects.Pattern(), "404"}, mutate: func(res map[string]any) error {
			for id, p := range resourcesOf(res, "AWS::ApiGatewayV2::Route") {
				if p["RouteKey"] == contract.RouteEffects.Pattern() {
					delete(res, id)
					return nil
				}
			}
			return fmt.Errorf("no route POST /v1/effects")
		}},
		{name: "function environment variable removed", want: []string{"GALLEY_TABLE", "function init failed"}, mutate: func(res map[string]any) error {
			p, err := functionByPath(res, "Reads")
			if err != nil {
				return err
			}
			vars := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			if _, ok := vars["GALLEY_TABLE"]; !ok {
				return fmt.Errorf("reads has no GALLEY_TABLE")
			}
			delete(vars, "GALLEY_TABLE")
			return nil
		}},
		{name: "IAM statement removed", want: []string{"AccessDeniedException", "ecs:RunTask"}, mutate: func(res map[string]any) error {
			// The launching function's: the worker API and the reconciler
			// run worker tasks too (to resume parked workers).
			effects, err := functionByPath(res, "Effects")
			if err != nil {
				return err
			}
			role, _ := effects["Role"].(map[string]any)["Fn::GetAtt"].([]any)
			if len(role) == 0 {
				return fmt.Errorf("the effects function's role is not a GetAtt: %v", effects["Role"])
			}
			for _, p := range resourcesOf(res, "AWS::IAM::Policy") {
				if !slices.ContainsFunc(p["Roles"].([]any), func(r any) bool { return r.(map[string]any)["Ref"] == role[0] }) {
					continue
				}
				doc := p["PolicyDocument"].(map[string]any)
				sts := doc["Statement"].([]any)
				for i, st := range sts {
					if st.(map[string]any)["Sid"] == "RunWorkerTasks" {
						doc["Statement"] = append(sts[:i:i], sts[i+1:]...)
						return nil
					}
				}
			}
			return fmt.Errorf("no statement RunWorkerTasks in the effects role's policies")
		}},
		{name: "task definition secret removed", want: []string{"GALLEY_ANTHROPIC_API_KEY"}, mutate: func(res map[string]any) error {
			c, err := workerContainer(res)
			if err != nil {
				return err
			}
			secrets := c["Secrets"].([]any)
			for i, sc := range secrets {
				if sc.(map[string]any)["Name"] == "GALLEY_ANTHROPIC_API_KEY" {
					c["Secrets"] = append(secrets[:i:i], secrets[i+1:]...)
					return nil
				}
			}
			return fmt.Errorf("no secret GALLEY_ANTHROPIC_API_KEY")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := mutatedTemplate(t, tc.mutate)
			s, token, logs := startStackLogged(t, func(c *awslocal.Config) { c.Template = tpl })
			house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
			if err := s.PutSecret(context.Background(), "galley/"+house+"/anthropic", randomValue(t, "sk-ant-test-")); err != nil {
				t.Fatal(err)
			}
			err := smoke(s, token, logs)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("the unchanged template fails its smoke run: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("with the %s, the smoke run passed", tc.name)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("with the %s, the failure does not name %q:\n%v", tc.name, w, err)
				}
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// TestTemplateDropsACapabilityTheHarnessNeeds: a copy of the template whose
// worker drops one more capability of harness.UIDCapabilities does not run
// its agents under anything weaker than their own uid: the worker fails,
// and the failure kitchn sees names the capability and the operation that
// needed it. SETUID is what becoming the agent's uid takes, FOWNER what the
// task definition once lacked (the worktree's chmod 0700). Only
// containers apply a task definition's capabilities: this test needs the
// worker image, and fails without it under GALLEY_REQUIRE_STANDINS=1.
func TestTemplateDropsACapabilityTheHarnessNeeds(t *testing.T) {
	t.Parallel()
	if img := requireWorkerImage(t); img == "" {
		t.Skipf("%s is not set: a task definition's capabilities apply only to containers", awslocal.EnvWorkerImage)
	}
	for _, drop := range []string{"SETUID", "FOWNER"} {
		t.Run(drop, func(t *testing.T) {
			why := ""
			for _, c := range harness.UIDCapabilities {
				if c.Name == drop {
					why = c.Why
				}
			}
			if why == "" {
				t.Fatalf("%s is not among harness.UIDCapabilities", drop)
			}
			tpl := mutatedTemplate(t, func(res map[string]any) error {
				lp, err := workerLinux(res)
				if err != nil {
					return err
				}
				caps, _ := lp["Capabilities"].(map[string]any)
				drops, _ := caps["Drop"].([]any)
				for _, d := range drops {
					if d == drop || d == "ALL" {
						return fmt.Errorf("the worker already drops %s", d)
					}
				}
				caps["Drop"] = append(drops, drop)
				return nil
			})
			s, token, logs := startStackLogged(t, func(c *awslocal.Config) { c.Template = tpl })
			house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
			if err := s.PutSecret(context.Background(), "galley/"+house+"/anthropic", randomValue(t, "sk-ant-test-")); err != nil {
				t.Fatal(err)
			}
			err := smoke(s, token, logs)
			if err == nil {
				t.Fatalf("without %s the smoke run passed: an agent ran under weaker confinement than its own uid", drop)
			}
			// What kitchn heard: the worker's settled body.
			for _, w := range []string{"CAP_" + drop, why} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("without %s, the failure does not name %q:\n%v", drop, w, err)
				}
			}
			// No agent ran: no container's harness confined one, under
			// any mode.
			for _, task := range s.ECS().Tasks() {
				b, _ := s.ECS().ContainerLog(task.ID)
				if strings.Contains(string(b), `"msg":"agent confined"`) {
					t.Errorf("without %s, task %s's harness confined an agent:\n%s", drop, task.ID, b)
				}
			}
			t.Logf("without %s: %v", drop, err)
		})
	}
}
