package stack_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// tempRoots are the synth folders to remove when the tests end.
var (
	tempMu    sync.Mutex
	tempRoots []string
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, dir := range tempRoots {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// repoRoot is the repository root, two levels above this package.
var repoRoot = filepath.Join("..", "..")

// synthed is one synthesized deployment and its template as JSON.
type synthed struct {
	g    *stack.Galley
	tmpl assertions.Template
	json map[string]any
}

var (
	defaultOnce sync.Once
	defaultApp  *synthed
	defaultErr  error
)

// deployment synthesizes the default deployment once per test binary (a
// synth takes seconds; every read-only test shares it).
func deployment(t *testing.T) *synthed {
	t.Helper()
	defaultOnce.Do(func() {
		defaultApp, defaultErr = synth(map[string]any{
			"house":      "kitchen_1",
			"repository": "https://git.example.com/house.git",
		})
	})
	if defaultErr != nil {
		t.Fatal(defaultErr)
	}
	return defaultApp
}

// synth builds the app the way infra's main does, with cdk.json's feature
// flags, a throwaway asset dir holding a dummy bootstrap per function (so
// the tests need no function build) and a throwaway build context holding
// the real worker/Dockerfile and worker/.dockerignore.
func synth(extra map[string]any) (s *synthed, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("synth panicked: %v", r)
		}
	}()
	root, err := os.MkdirTemp("", "galley-infra-")
	if err != nil {
		return nil, err
	}
	tempMu.Lock()
	tempRoots = append(tempRoots, root)
	tempMu.Unlock()
	for _, name := range contract.FunctionNames {
		dir := filepath.Join(root, "bin", "lambda", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte("dummy "+name), 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "worker"), 0o755); err != nil {
		return nil, err
	}
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "worker", f))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, "worker", f), b, 0o644); err != nil {
			return nil, err
		}
	}
	ctx, err := cdkContext()
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		ctx[k] = v
	}
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(filepath.Join(root, "cdk.out"))})
	g, err := stack.Build(app, root)
	if err != nil {
		return nil, err
	}
	tmpl := assertions.Template_FromStack(g.Stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return &synthed{g: g, tmpl: tmpl, json: m}, nil
}

// cdkContext reads the feature flags from the root cdk.json, so the tests
// synthesize what `cdk synth` does.
func cdkContext() (map[string]any, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "cdk.json"))
	if err != nil {
		return nil, err
	}
	var c struct {
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	return c.Context, nil
}

// check runs a CDK assertions call: a failing one panics, which would end
// every other test of the package; turn it into this test's failure.
func check(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s: %v", what, r)
		}
	}()
	f()
}

func (s *synthed) resources(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.json["Resources"].(map[string]any) {
		r := r.(map[string]any)
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// id is a construct's logical ID in the template.
func (s *synthed) id(c constructs.IConstruct) string {
	if e, ok := c.(awscdk.CfnElement); ok {
		return *s.g.Stack.GetLogicalId(e)
	}
	return *s.g.Stack.GetLogicalId(c.Node().DefaultChild().(awscdk.CfnElement))
}

func ref(id string) map[string]any    { return map[string]any{"Ref": id} }
func getArn(id string) map[string]any { return map[string]any{"Fn::GetAtt": []any{id, "Arn"}} }

// jsonEq compares two JSON values structurally.
func jsonEq(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func list(v any) []any {
	switch v := v.(type) {
	case nil:
		return nil
	case []any:
		return v
	}
	return []any{v}
}

// statement is one IAM policy statement, actions and resources as lists.
type statement struct {
	Sid        string
	Effect     string
	Actions    []string
	Resources  []any
	Conditions map[string]any
}

// statements are every statement of every policy attached to the role.
func (s *synthed) statements(roleID string) []statement {
	var out []statement
	add := func(doc map[string]any) {
		for _, st := range list(doc["Statement"]) {
			st := st.(map[string]any)
			x := statement{Effect: fmt.Sprint(st["Effect"]), Resources: list(st["Resource"])}
			x.Sid, _ = st["Sid"].(string)
			for _, a := range list(st["Action"]) {
				x.Actions = append(x.Actions, a.(string))
			}
			x.Conditions, _ = st["Condition"].(map[string]any)
			out = append(out, x)
		}
	}
	for _, p := range s.resources("AWS::IAM::Policy") {
		for _, r := range list(props(p)["Roles"]) {
			if jsonEq(r, ref(roleID)) {
				add(props(p)["PolicyDocument"].(map[string]any))
			}
		}
	}
	role := s.resources("AWS::IAM::Role")[roleID]
	for _, p := range list(props(role)["Policies"]) {
		add(p.(map[string]any)["PolicyDocument"].(map[string]any))
	}
	if len(list(props(role)["ManagedPolicyArns"])) > 0 {
		panic("role " + roleID + " has managed policies: the tests cannot see their statements")
	}
	return out
}

func actionMatches(pattern, action string) bool {
	re := "^" + strings.ReplaceAll(regexp.QuoteMeta(strings.ToLower(pattern)), `\*`, ".*") + "$"
	return regexp.MustCompile(re).MatchString(strings.ToLower(action))
}

// allows reports whether any Allow statement grants action on the resource
// (a Ref/GetAtt value as in the template) or on "*".
func allows(sts []statement, action string, resource any) bool {
	for _, st := range sts {
		if st.Effect != "Allow" || !slices.ContainsFunc(st.Actions, func(a string) bool { return actionMatches(a, action) }) {
			continue
		}
		for _, r := range st.Resources {
			if r == "*" || jsonEq(r, resource) {
				return true
			}
		}
	}
	return false
}

func actionsOf(sts []statement) []string {
	var out []string
	for _, st := range sts {
		out = append(out, st.Actions...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func TestEachRouteReachesItsFunction(t *testing.T) {
	s := deployment(t)
	routes := s.resources("AWS::ApiGatewayV2::Route")
	if len(routes) != len(stack.Routes) {
		t.Errorf("template has %d routes, want exactly the %d of stack.Routes", len(routes), len(stack.Routes))
	}
	integrations := s.resources("AWS::ApiGatewayV2::Integration")
	for _, want := range stack.Routes {
		t.Run(want.Key(), func(t *testing.T) {
			var route map[string]any
			for _, r := range routes {
				if props(r)["RouteKey"] == want.Key() {
					route = props(r)
				}
			}
			if route == nil {
				t.Fatalf("no route %q", want.Key())
			}
			// Target is "integrations/<integration id>".
			parts := route["Target"].(map[string]any)["Fn::Join"].([]any)[1].([]any)
			if parts[0] != "integrations/" {
				t.Fatalf("target %v", parts)
			}
			integ := props(integrations[parts[1].(map[string]any)["Ref"].(string)])
			if integ["IntegrationType"] != "AWS_PROXY" || integ["PayloadFormatVersion"] != "2.0" {
				t.Errorf("integration type %v payload %v, want AWS_PROXY 2.0", integ["IntegrationType"], integ["PayloadFormatVersion"])
			}
			fnID := s.id(s.g.Functions[want.Function])
			if !jsonEq(integ["IntegrationUri"], getArn(fnID)) {
				t.Errorf("route %s reaches %v, want function %s (%s)", want.Key(), integ["IntegrationUri"], want.Function, fnID)
			}
			if auth := route["AuthorizationType"]; auth != nil && auth != "NONE" {
				t.Errorf("authorization %v: the functions authenticate", auth)
			}
		})
	}
	// Each route may invoke its function: API Gateway has a permission.
	perms := 0
	for _, p := range s.resources("AWS::Lambda::Permission") {
		if props(p)["Principal"] == "apigateway.amazonaws.com" {
			perms++
		}
	}
	if perms != len(stack.Routes) {
		t.Errorf("%d API Gateway invoke permissions, want one per route (%d)", perms, len(stack.Routes))
	}
}

func TestFunctionsRunGoOnArm(t *testing.T) {
	s := deployment(t)
	for _, name := range contract.FunctionNames {
		p := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[name])])
		if p["Runtime"] != "provided.al2023" || !jsonEq(p["Architectures"], []any{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v arch %v handler %v, want provided.al2023 arm64 bootstrap", name, p["Runtime"], p["Architectures"], p["Handler"])
		}
		if !jsonEq(p["Role"], getArn(s.id(s.g.Roles[name]))) {
			t.Errorf("%s: role %v, want its own", name, p["Role"])
		}
		timeout := p["Timeout"].(float64)
		switch name {
		case contract.FnMailbox:
			// Long enough for the await cap, short of the gateway's 30 s.
			if timeout < 29 || timeout >= 30 {
				t.Errorf("mailbox timeout %v s, want 29 <= t < 30", timeout)
			}
		default:
			if timeout > 30 {
				t.Errorf("%s timeout %v s", name, timeout)
			}
		}
		if lc, _ := p["LoggingConfig"].(map[string]any); lc["LogFormat"] != "JSON" || lc["LogGroup"] == nil {
			t.Errorf("%s: logging %v, want JSON to its own log group", name, lc)
		}
	}
	// Roles are not shared.
	seen := map[string]string{}
	for _, name := range contract.FunctionNames {
		id := s.id(s.g.Roles[name])
		if other, ok := seen[id]; ok {
			t.Errorf("%s and %s share role %s", name, other, id)
		}
		seen[id] = name
	}
}

func TestFunctionEnvironment(t *testing.T) {
	s := deployment(t)
	common := []string{contract.EnvTable, contract.EnvHouse, contract.EnvBackend, contract.EnvCredential, contract.EnvQueuePrefix,
		contract.EnvCluster, contract.EnvTaskDefinition, contract.EnvSubnets, contract.EnvSecurityGroup, contract.EnvAwaitCapMs,
		contract.EnvMaxWorkers, contract.EnvAgentFamilies, contract.EnvRepository, contract.EnvWorkerEndpoint}
	tests := []struct {
		fn                           string
		token, worker, git, operator bool
	}{
		{contract.FnEffects, true, true, true, false},
		{contract.FnReads, true, false, true, false},
		{contract.FnMailbox, true, false, false, false},
		{contract.FnWorkerAPI, false, true, false, false},
		// The reconciler signs a parked worker's resumed credential.
		{contract.FnReconciler, false, true, false, false},
		// The operator function reads the operator token, and no other.
		{contract.FnOperator, false, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			p := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[tt.fn])])
			env := p["Environment"].(map[string]any)["Variables"].(map[string]any)
			for _, k := range common {
				if _, ok := env[k]; !ok {
					t.Errorf("missing %s", k)
				}
			}
			if env[contract.EnvHouse] != "kitchen_1" || env[contract.EnvQueuePrefix] != "galley-kitchen_1" || env[contract.EnvAwaitCapMs] != "25000" {
				t.Errorf("house %v prefix %v cap %v", env[contract.EnvHouse], env[contract.EnvQueuePrefix], env[contract.EnvAwaitCapMs])
			}
			for _, c := range []struct {
				name  string
				want  bool
				value any
			}{
				{contract.EnvTokenSecretArn, tt.token, ref(s.id(s.g.TokenSecret))},
				{contract.EnvWorkerSecretArn, tt.worker, ref(s.id(s.g.WorkerSecret))},
				{contract.EnvSecretGit, tt.git, ref(s.id(s.g.ProviderSecrets[stack.SecretGit]))},
				{contract.EnvOperatorTokenSecretArn, tt.operator, ref(s.id(s.g.OperatorTokenSecret))},
			} {
				v, ok := env[c.name]
				if ok != c.want || (ok && !jsonEq(v, c.value)) {
					t.Errorf("%s = %v (set %v), want set %v", c.name, v, ok, c.want)
				}
			}
			// Only the reconciler sweeps doorbell queues.
			if _, ok := env[contract.EnvQueueIdleHours]; ok != (tt.fn == contract.FnReconciler) {
				t.Errorf("%s set: %v", contract.EnvQueueIdleHours, ok)
			}
			// The git user name goes with the git credential.
			if v, ok := env[contract.EnvGitUsername]; ok != tt.git || (ok && v != "x-access-token") {
				t.Errorf("%s = %v (set %v), want x-access-token where the credential is", contract.EnvGitUsername, v, ok)
			}
			// The scripted agent is off by default: no default agent set.
			if v, ok := env[contract.EnvDefaultAgent]; ok {
				t.Errorf("%s = %v without scriptAgent", contract.EnvDefaultAgent, v)
			}
			// Only references to secrets, never a resolved value.
			raw, _ := json.Marshal(env)
			if strings.Contains(string(raw), "resolve:secretsmanager") {
				t.Errorf("environment resolves a secret value: %s", raw)
			}
		})
	}
}

func TestFunctionPoliciesNameOnlyTheirResources(t *testing.T) {
	s := deployment(t)
	dynamoRead := []string{"dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem", "dynamodb:DescribeTable",
		"dynamodb:GetItem", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:Query", "dynamodb:Scan"}
	dynamoWrite := append(slices.Clone(dynamoRead), "dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem")
	logs := []string{"logs:CreateLogStream", "logs:PutLogEvents"}
	listen := []string{"sqs:CreateQueue", "sqs:DeleteMessage", "sqs:ReceiveMessage", "sqs:TagQueue"}
	ring := []string{"sqs:CreateQueue", "sqs:SendMessage", "sqs:TagQueue"}
	secret := []string{"secretsmanager:GetSecretValue"}
	// CDK's SQS destination grants what sending takes (grantSendMessages).
	failures := []string{"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		sort.Strings(out)
		return slices.Compact(out)
	}
	// Starting worker tasks (a launch's, a resumed parked worker's).
	runs := []string{"ecs:RunTask", "ecs:StopTask", "ecs:DescribeTasks", "ecs:ListTasks", "ecs:TagResource", "iam:PassRole"}
	tests := []struct {
		fn      string
		actions []string
	}{
		{contract.FnEffects, join(logs, dynamoWrite, ring, secret, runs, []string{"s3:DeleteObject"})},
		{contract.FnReads, join(logs, dynamoRead, secret, []string{"ecs:DescribeTasks", "ecs:ListTasks"})},
		{contract.FnMailbox, join(logs, dynamoWrite, listen, secret)},
		// It makes a worker's queue and grants its harness the wait; it
		// never listens itself. A parking that input raced resumes the
		// worker in a new task (docs/parking.md).
		{contract.FnWorkerAPI, join(logs, dynamoWrite, ring, secret, runs, []string{"sts:AssumeRole"})},
		// The sweep of idle doorbell queues: exactly these three; and
		// what the on-failure destination needs of its queue. The only
		// task it starts is a parked worker's resumed one, and it deletes
		// a settled worker's session archive; it reads the worker signing
		// key to sign the resumed task's credential.
		{contract.FnReconciler, join(logs, dynamoWrite, ring, failures, runs, secret, []string{"sqs:ListQueues", "sqs:ListQueueTags",
			"sqs:DeleteQueue", "s3:DeleteObject"})},
		// It long polls a worker's event doorbell, and a cancel rings the
		// coordinator's, stops the worker's task and deletes its session
		// archive; it starts none.
		{contract.FnOperator, join(logs, dynamoWrite, listen, ring, secret, []string{"ecs:StopTask", "ecs:DescribeTasks", "ecs:ListTasks",
			"s3:DeleteObject"})},
	}
	table := s.id(s.g.Table)
	cluster := getArn(s.id(s.g.Cluster))
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			sts := s.statements(s.id(s.g.Roles[tt.fn]))
			if got := actionsOf(sts); !slices.Equal(got, tt.actions) {
				t.Errorf("actions\n got %v\nwant %v", got, tt.actions)
			}
			for _, st := range sts {
				if st.Effect != "Allow" {
					continue
				}
				for _, a := range st.Actions {
					if strings.Contains(a, "*") {
						t.Errorf("wildcard action %s", a)
					}
				}
				raw, _ := json.Marshal(st.Resources)
				switch {
				case slices.Contains(st.Resources, any("*")):
					// Only what names no resource: ListTasks within the
					// worker cluster, and the reconciler's ListQueues (over
					// TLS) for its sweep.
					listTasks := slices.Equal(st.Actions, []string{"ecs:ListTasks"}) &&
						jsonEq(st.Conditions, map[string]any{"ArnEquals": map[string]any{"ecs:cluster": cluster}})
					listQueues := tt.fn == contract.FnReconciler && slices.Equal(st.Actions, []string{"sqs:ListQueues"}) &&
						jsonEq(st.Conditions, map[string]any{"Bool": map[string]any{"aws:SecureTransport": "true"}})
					if len(st.Resources) != 1 || (!listTasks && !listQueues) {
						t.Errorf("Resource %v for %v with %v", st.Resources, st.Actions, st.Conditions)
					}
				case strings.HasPrefix(st.Actions[0], "dynamodb:"):
					if !jsonEq(st.Resources, []any{getArn(table), map[string]any{"Fn::Join": []any{"", []any{getArn(table), "/index/*"}}}}) {
						t.Errorf("dynamodb on %s, want the table and its indexes", raw)
					}
				case tt.fn == contract.FnReconciler && jsonEq(st.Resources, []any{getArn(s.id(s.g.ReconcilerFailures))}):
					// The on-failure destination: sending, on that queue only.
					if !slices.Equal(st.Actions, failures) {
						t.Errorf("on the failures queue: %v, want %v", st.Actions, failures)
					}
				case strings.HasPrefix(st.Actions[0], "sqs:"):
					if !strings.Contains(string(raw), `":galley-kitchen_1-*"`) || strings.Count(string(raw), "*") != 1 {
						t.Errorf("sqs on %s, want only queues named galley-kitchen_1-*", raw)
					}
					if !jsonEq(st.Conditions, map[string]any{"Bool": map[string]any{"aws:SecureTransport": "true"}}) {
						t.Errorf("sqs without aws:SecureTransport: %v", st.Conditions)
					}
				case strings.HasPrefix(st.Actions[0], "ecs:"):
					if st.Conditions == nil {
						t.Errorf("ecs %v without a condition", st.Actions)
					}
					if strings.Contains(string(raw), "*") && (!strings.Contains(string(raw), `":task/",`) || !strings.HasSuffix(string(raw), `"/*"]]}]`)) {
						t.Errorf("ecs on %s", raw)
					}
				case st.Actions[0] == "iam:PassRole":
					want := []any{getArn(s.id(s.g.ExecutionRole)), getArn(s.id(s.g.TaskRole))}
					if !jsonEq(st.Resources, want) {
						t.Errorf("PassRole on %s, want only the worker task and execution roles", raw)
					}
					if !jsonEq(st.Conditions, map[string]any{"StringEquals": map[string]any{"iam:PassedToService": "ecs-tasks.amazonaws.com"}}) {
						t.Errorf("PassRole condition %v", st.Conditions)
					}
				case st.Actions[0] == "s3:DeleteObject":
					// A released worktree's snapshot, a settled worker's
					// session archive, below the house's prefix.
					want := []any{map[string]any{"Fn::Join": []any{"", []any{getArn(s.id(s.g.Snapshots)), "/kitchen_1/*"}}}}
					if len(st.Actions) != 1 || !jsonEq(st.Resources, want) {
						t.Errorf("%s may %v on %s, want only s3:DeleteObject on %v", tt.fn, st.Actions, raw, want)
					}
				case st.Actions[0] == "sts:AssumeRole":
					if tt.fn != contract.FnWorkerAPI || !jsonEq(st.Resources, []any{getArn(s.id(s.g.WakeRole))}) {
						t.Errorf("%s assumes %s, want only the worker API the wake role", tt.fn, raw)
					}
				case strings.HasPrefix(st.Actions[0], "logs:"):
					if !jsonEq(st.Resources, []any{getArn(s.id(s.g.FunctionLogs[tt.fn]))}) {
						t.Errorf("logs on %s, want the function's own log group", raw)
					}
				case strings.HasPrefix(st.Actions[0], "secretsmanager:"):
					for _, r := range st.Resources {
						if _, ok := r.(map[string]any)["Ref"]; !ok {
							t.Errorf("secret %v, want a named secret", r)
						}
					}
				default:
					t.Errorf("unexpected statement %+v", st)
				}
			}
			if slices.Contains(tt.actions, "ecs:RunTask") {
				if !allows(sts, "ecs:RunTask", ref(s.id(s.g.TaskDefinition))) {
					t.Errorf("%s cannot run the worker task definition", tt.fn)
				}
			}
		})
	}
}

// TestWakeRoleWaitsOnlyOnDoorbells: the role the worker API assumes per
// worker (with a session policy naming the worker's queue) can only
// receive and delete on this house's doorbell queues over TLS, is
// assumable by the worker API's role alone, and lasts an hour.
func TestWakeRoleWaitsOnlyOnDoorbells(t *testing.T) {
	s := deployment(t)
	id := s.id(s.g.WakeRole)
	p := props(s.resources("AWS::IAM::Role")[id])
	trust, _ := json.Marshal(p["AssumeRolePolicyDocument"])
	want, _ := json.Marshal(map[string]any{"Statement": []any{map[string]any{"Action": "sts:AssumeRole", "Effect": "Allow",
		"Principal": map[string]any{"AWS": getArn(s.id(s.g.Roles[contract.FnWorkerAPI]))}}}, "Version": "2012-10-17"})
	if string(trust) != string(want) {
		t.Errorf("trust %s\nwant %s", trust, want)
	}
	if p["MaxSessionDuration"] != 3600.0 {
		t.Errorf("MaxSessionDuration %v, want 3600 (role chaining allows no more)", p["MaxSessionDuration"])
	}
	sts := s.statements(id)
	if got := actionsOf(sts); !slices.Equal(got, []string{"sqs:DeleteMessage", "sqs:ReceiveMessage"}) {
		t.Errorf("actions %v", got)
	}
	for _, st := range sts {
		raw, _ := json.Marshal(st.Resources)
		if !strings.Contains(string(raw), `":galley-kitchen_1-*"`) || !jsonEq(st.Conditions, map[string]any{"Bool": map[string]any{"aws:SecureTransport": "true"}}) {
			t.Errorf("on %s with %v, want this house's queues over TLS", raw, st.Conditions)
		}
	}
	env := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[contract.FnWorkerAPI])])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if !jsonEq(env[contract.EnvWakeRoleArn], getArn(id)) {
		t.Errorf("the worker API's %s = %v", contract.EnvWakeRoleArn, env[contract.EnvWakeRoleArn])
	}
}

// TestEffectsHaveReservedConcurrency: launches and cancels keep a floor of
// the account's concurrency that awaits cannot take; nothing else
// reserves any.
func TestEffectsHaveReservedConcurrency(t *testing.T) {
	s := deployment(t)
	for _, name := range contract.FunctionNames {
		got := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[name])])["ReservedConcurrentExecutions"]
		want := any(nil)
		if name == contract.FnEffects {
			want = float64(stack.Defaults().EffectsReservedConcurrency)
		}
		if got != want {
			t.Errorf("%s: ReservedConcurrentExecutions %v, want %v", name, got, want)
		}
	}
}

// TestSecretsReadOnlyByTheirUsers: who can read which secret. In
// particular, no worker task and no worker-facing function can read
// kitchn's bearer token, and no worker task the worker signing key.
func TestSecretsReadOnlyByTheirUsers(t *testing.T) {
	s := deployment(t)
	g := s.g
	secrets := map[string]awssecretsmanager.Secret{
		"token":     g.TokenSecret,
		"workerKey": g.WorkerSecret,
		"anthropic": g.ProviderSecrets[stack.SecretAnthropic],
		"openai":    g.ProviderSecrets[stack.SecretOpenAI],
		"git":       g.ProviderSecrets[stack.SecretGit],
		"operator":  g.OperatorTokenSecret,
		"egress":    g.EgressSecret,
	}
	tests := []struct {
		who   string
		role  constructs.IConstruct
		reads []string
	}{
		// The agent might reach the task role's credentials: no secret.
		{"worker task role", g.TaskRole, nil},
		// ECS injects the container's secrets with the execution role.
		{"worker execution role", g.ExecutionRole, []string{"anthropic", "egress", "git", "openai"}},
		// The proxy's task holds no permission; its execution role reads
		// the one secret ECS injects into it.
		{"egress proxy task role", g.EgressTaskRole, nil},
		{"egress proxy execution role", g.EgressExecutionRole, []string{"egress"}},
		{"effects", g.Roles[contract.FnEffects], []string{"git", "token", "workerKey"}},
		{"reads", g.Roles[contract.FnReads], []string{"git", "token"}},
		{"mailbox", g.Roles[contract.FnMailbox], []string{"token"}},
		{"workerapi", g.Roles[contract.FnWorkerAPI], []string{"workerKey"}},
		// It signs a parked worker's resumed credential (an owed resume).
		{"reconciler", g.Roles[contract.FnReconciler], []string{"workerKey"}},
		// kitchn's token does not open the operator routes: the operator
		// function cannot even read it.
		{"operator", g.Roles[contract.FnOperator], []string{"operator"}},
	}
	for _, tt := range tests {
		t.Run(tt.who, func(t *testing.T) {
			sts := s.statements(s.id(tt.role))
			var got []string
			for _, name := range []string{"anthropic", "egress", "git", "openai", "operator", "token", "workerKey"} {
				secretRef := ref(s.id(secrets[name]))
				for _, action := range []string{"secretsmanager:GetSecretValue", "secretsmanager:BatchGetSecretValue"} {
					if allows(sts, action, secretRef) {
						got = append(got, name)
						break
					}
				}
			}
			if !slices.Equal(got, tt.reads) {
				t.Errorf("can read %v, want %v", got, tt.reads)
			}
			// No Secrets Manager action at all beyond those reads: not on
			// any other secret, not on "*".
			for _, st := range sts {
				for _, a := range st.Actions {
					if !strings.HasPrefix(a, "secretsmanager:") {
						continue
					}
					for _, r := range st.Resources {
						id, _ := r.(map[string]any)["Ref"].(string)
						if r == "*" || id == "" {
							t.Errorf("%s on %v", a, r)
						}
					}
				}
			}
		})
	}
	// The task roles have no Secrets Manager action whatever.
	for _, role := range []constructs.IConstruct{g.TaskRole, g.EgressTaskRole} {
		for _, st := range s.statements(s.id(role)) {
			for _, a := range st.Actions {
				if strings.HasPrefix(a, "secretsmanager:") {
					t.Errorf("task role %s may %s on %v", s.id(role), a, st.Resources)
				}
			}
		}
	}
	// Nothing else in the stack may read the egress secret: every role's
	// statements, CDK's own included.
	for id := range s.resources("AWS::IAM::Role") {
		if id == s.id(g.ExecutionRole) || id == s.id(g.EgressExecutionRole) {
			continue
		}
		if len(list(props(s.resources("AWS::IAM::Role")[id])["ManagedPolicyArns"])) > 0 {
			// CDK's custom resource providers: their managed policy is
			// AWSLambdaBasicExecutionRole, logs only.
			for _, m := range list(props(s.resources("AWS::IAM::Role")[id])["ManagedPolicyArns"]) {
				if raw, _ := json.Marshal(m); !strings.Contains(string(raw), "AWSLambdaBasicExecutionRole") {
					t.Errorf("role %s has managed policy %s", id, raw)
				}
			}
			continue
		}
		if allows(s.statements(id), "secretsmanager:GetSecretValue", ref(s.id(g.EgressSecret))) {
			t.Errorf("role %s may read the egress secret", id)
		}
	}
}

// secretPolicies are each secret's DeletionPolicy and UpdateReplacePolicy,
// by secret name (nil where the template sets none: CloudFormation then
// deletes).
func secretPolicies(s *synthed) map[string][2]any {
	out := map[string][2]any{}
	for _, r := range s.resources("AWS::SecretsManager::Secret") {
		name := fmt.Sprint(props(r)["Name"])
		out[name[strings.LastIndex(name, "/")+1:]] = [2]any{r["DeletionPolicy"], r["UpdateReplacePolicy"]}
	}
	return out
}

// TestSecretsSurviveTeardown: by default kitchn's token and the signing
// key are retained when the stack is deleted or the secret replaced; the
// secrets the operator fills in are deleted with the stack.
func TestSecretsSurviveTeardown(t *testing.T) {
	got := secretPolicies(deployment(t))
	want := map[string][2]any{
		stack.SecretBearerToken:   {"Retain", "Retain"},
		stack.SecretWorkerKey:     {"Retain", "Retain"},
		stack.SecretOperatorToken: {"Retain", "Retain"},
		stack.SecretAnthropic:     {"Delete", "Delete"},
		stack.SecretOpenAI:        {"Delete", "Delete"},
		stack.SecretGit:           {"Delete", "Delete"},
		// Nothing outside the stack holds it.
		stack.SecretEgress: {"Delete", "Delete"},
	}
	if !jsonEq(got, want) {
		t.Errorf("secrets' DeletionPolicy/UpdateReplacePolicy %v, want %v", got, want)
	}
}

func TestTableHasPITRTTLAndProtection(t *testing.T) {
	s := deployment(t)
	check(t, "table", func() {
		s.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), map[string]any{
			"DeletionPolicy":      "Retain",
			"UpdateReplacePolicy": "Retain",
			"Properties": map[string]any{
				"BillingMode": "PAY_PER_REQUEST",
				"KeySchema": []any{
					map[string]any{"AttributeName": "pk", "KeyType": "HASH"},
					map[string]any{"AttributeName": "sk", "KeyType": "RANGE"},
				},
				"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
				"TimeToLiveSpecification":          map[string]any{"AttributeName": "expires", "Enabled": true},
				"DeletionProtectionEnabled":        true,
				"SSESpecification":                 map[string]any{"SSEEnabled": true},
				"GlobalSecondaryIndexes": []any{map[string]any{
					"IndexName": "gsi1",
					"KeySchema": []any{
						map[string]any{"AttributeName": "gsi1pk", "KeyType": "HASH"},
						map[string]any{"AttributeName": "gsi1sk", "KeyType": "RANGE"},
					},
					"Projection": map[string]any{"ProjectionType": "ALL"},
				}},
			},
		})
	})
	check(t, "one table", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1)) })
}

// notCredentials are the container variables whose names only look like
// a credential's: a cap counted in model tokens.
var notCredentials = map[string]bool{contract.EnvModelCapTokens: true}

func TestTaskDefinitionHoldsNoSecretValue(t *testing.T) {
	s := deployment(t)
	td := props(s.resources("AWS::ECS::TaskDefinition")[s.id(s.g.TaskDefinition)])
	if !jsonEq(td["RuntimePlatform"], map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}) {
		t.Errorf("runtime platform %v, want ARM64 Linux", td["RuntimePlatform"])
	}
	if td["Cpu"] != "1024" || td["Memory"] != "4096" || !jsonEq(td["RequiresCompatibilities"], []any{"FARGATE"}) {
		t.Errorf("cpu %v memory %v compat %v", td["Cpu"], td["Memory"], td["RequiresCompatibilities"])
	}
	if !jsonEq(td["TaskRoleArn"], getArn(s.id(s.g.TaskRole))) || !jsonEq(td["ExecutionRoleArn"], getArn(s.id(s.g.ExecutionRole))) {
		t.Errorf("roles %v %v", td["TaskRoleArn"], td["ExecutionRoleArn"])
	}
	containers := td["ContainerDefinitions"].([]any)
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0].(map[string]any)
	if c["Name"] != contract.WorkerContainer {
		t.Errorf("container %v, want %s", c["Name"], contract.WorkerContainer)
	}
	// The provider keys, the git credential and the egress secret are
	// container secrets: ECS reads each by its ARN (the secret's Ref) at
	// task start.
	wantSecrets := []any{
		map[string]any{"Name": contract.EnvAnthropicAPIKey, "ValueFrom": ref(s.id(s.g.ProviderSecrets[stack.SecretAnthropic]))},
		map[string]any{"Name": contract.EnvEgressSecret, "ValueFrom": ref(s.id(s.g.EgressSecret))},
		map[string]any{"Name": contract.EnvGitCredential, "ValueFrom": ref(s.id(s.g.ProviderSecrets[stack.SecretGit]))},
		map[string]any{"Name": contract.EnvOpenAIAPIKey, "ValueFrom": ref(s.id(s.g.ProviderSecrets[stack.SecretOpenAI]))},
	}
	gotSecrets := slices.Clone(list(c["Secrets"]))
	slices.SortFunc(gotSecrets, func(a, b any) int {
		return strings.Compare(a.(map[string]any)["Name"].(string), b.(map[string]any)["Name"].(string))
	})
	if !jsonEq(gotSecrets, wantSecrets) {
		t.Errorf("container secrets %v, want %v", gotSecrets, wantSecrets)
	}
	check(t, "container secrets", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"Name":    contract.WorkerContainer,
				"Secrets": assertions.Match_ArrayWith(&[]any{wantSecrets[0], wantSecrets[1], wantSecrets[2], wantSecrets[3]}),
			})},
		})
	})
	raw, _ := json.Marshal(td)
	if strings.Contains(string(raw), "resolve:secretsmanager") || strings.Contains(string(raw), "SecretString") {
		t.Errorf("task definition resolves a secret value")
	}
	// Every variable is plain configuration: no secret's ARN at all (the
	// harness has no business with Secrets Manager), nothing named like a
	// credential.
	secretIDs := map[string]bool{}
	for id := range s.resources("AWS::SecretsManager::Secret") {
		secretIDs[id] = true
	}
	names := map[string]any{}
	for _, e := range c["Environment"].([]any) {
		e := e.(map[string]any)
		name := e["Name"].(string)
		names[name] = e["Value"]
		if regexp.MustCompile(`(?i)token|password|api_?key|credential|secret`).MatchString(name) && !notCredentials[name] {
			t.Errorf("variable %s looks like a credential", name)
		}
		if r, ok := e["Value"].(map[string]any); ok {
			if id, ok := r["Ref"].(string); ok && secretIDs[id] {
				t.Errorf("variable %s names secret %s", name, id)
			}
		}
	}
	for _, want := range []string{contract.EnvWorkerEndpoint, contract.EnvWorkspace, contract.EnvHouse, contract.EnvRepository, contract.EnvGitUsername} {
		if _, ok := names[want]; !ok {
			t.Errorf("missing %s", want)
		}
	}
	if names[contract.EnvGitUsername] != "x-access-token" {
		t.Errorf("%s = %v, want x-access-token", contract.EnvGitUsername, names[contract.EnvGitUsername])
	}
	for _, gone := range []string{"GALLEY_SECRET_ANTHROPIC", "GALLEY_SECRET_OPENAI", contract.EnvSecretGit} {
		if _, ok := names[gone]; ok {
			t.Errorf("container still has %s", gone)
		}
	}
	// Capabilities: TestWorkerKeepsOnlyTheHarnessCapabilities.
	if lp := c["LinuxParameters"].(map[string]any); lp["InitProcessEnabled"] != true {
		t.Errorf("linux parameters %v, want an init process", lp)
	}
	if lc := c["LogConfiguration"].(map[string]any); lc["LogDriver"] != "awslogs" {
		t.Errorf("log driver %v", lc["LogDriver"])
	}
}

func TestWorkersNetworkAndCluster(t *testing.T) {
	s := deployment(t)
	check(t, "no NAT", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0)) })
	// Two AZs: a workers' (isolated) and an egress (public) subnet in each.
	check(t, "four subnets", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::Subnet"), jsii.Number(4)) })
	check(t, "flow log", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::FlowLog"), jsii.Number(1)) })
	// The network itself: TestWorkerSubnetsHaveNoRouteOut,
	// TestWorkerSecurityGroupLetsOutOnlyWhatItNeeds.
	check(t, "container insights", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ECS::Cluster"), map[string]any{
			"ClusterSettings": []any{map[string]any{"Name": "containerInsights", "Value": "enabled"}},
		})
	})
}

func TestEventRuleTargetsReconciler(t *testing.T) {
	s := deployment(t)
	rules := s.resources("AWS::Events::Rule")
	rule := props(rules[s.id(s.g.TaskStateRule)])
	if len(rules) != 2 {
		t.Errorf("%d rules, want 2 (task state changes, housekeeping)", len(rules))
	}
	wantPattern := map[string]any{
		"detail":      map[string]any{"clusterArn": []any{getArn(s.id(s.g.Cluster))}},
		"detail-type": []any{"ECS Task State Change"},
		"source":      []any{"aws.ecs"},
	}
	if !jsonEq(rule["EventPattern"], wantPattern) {
		t.Errorf("pattern %v, want %v", rule["EventPattern"], wantPattern)
	}
	targets := rule["Targets"].([]any)
	if len(targets) != 1 {
		t.Fatalf("%d targets", len(targets))
	}
	target := targets[0].(map[string]any)
	if !jsonEq(target["Arn"], getArn(s.id(s.g.Functions[contract.FnReconciler]))) {
		t.Errorf("target %v, want the reconciler", target["Arn"])
	}
	if !jsonEq(target["DeadLetterConfig"], map[string]any{"Arn": getArn(s.id(s.g.ReconcilerDLQ))}) {
		t.Errorf("dead letters %v", target["DeadLetterConfig"])
	}
	// EventBridge retries delivery for up to 6 hours.
	if !jsonEq(target["RetryPolicy"], map[string]any{"MaximumEventAgeInSeconds": 21600.0, "MaximumRetryAttempts": 20.0}) {
		t.Errorf("retry policy %v, want 6 h and 20 attempts", target["RetryPolicy"])
	}
	check(t, "events may invoke the reconciler", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
			"Action":       "lambda:InvokeFunction",
			"FunctionName": getArn(s.id(s.g.Functions[contract.FnReconciler])),
			"Principal":    "events.amazonaws.com",
			"SourceArn":    getArn(s.id(s.g.TaskStateRule)),
		})
	})
	// The dead-letter queue refuses plain HTTP.
	check(t, "queue policy enforces TLS", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), map[string]any{
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{map[string]any{
				"Action":    "sqs:*",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				"Effect":    "Deny",
				"Principal": map[string]any{"AWS": "*"},
				"Resource":  getArn(s.id(s.g.ReconcilerDLQ)),
			}})},
		})
	})
}

// The five-minute housekeeping schedule reaches the reconciler, which
// emits the worker gauges and sweeps the idle doorbell queues; only the
// reconciler may delete them, and only this house's.
func TestHousekeepingScheduleTargetsReconciler(t *testing.T) {
	s := deployment(t)
	rule := props(s.resources("AWS::Events::Rule")[s.id(s.g.HousekeepingRule)])
	if stack.HousekeepingRate != "rate(5 minutes)" {
		t.Errorf("HousekeepingRate %s", stack.HousekeepingRate)
	}
	if rule["ScheduleExpression"] != stack.HousekeepingRate || rule["State"] != "ENABLED" {
		t.Errorf("schedule %v state %v, want rate(5 minutes) ENABLED", rule["ScheduleExpression"], rule["State"])
	}
	if _, ok := rule["EventPattern"]; ok {
		t.Errorf("the housekeeping rule matches events too: %v", rule["EventPattern"])
	}
	targets := list(rule["Targets"])
	if len(targets) != 1 {
		t.Fatalf("%d targets, want the reconciler only", len(targets))
	}
	reconciler := getArn(s.id(s.g.Functions[contract.FnReconciler]))
	if target := targets[0].(map[string]any); !jsonEq(target["Arn"], reconciler) {
		t.Errorf("target %v, want the reconciler", target["Arn"])
	} else if _, ok := target["Input"]; ok {
		t.Errorf("target input %v: the reconciler recognises the Scheduled Event itself", target["Input"])
	} else {
		// A missed tick is left to the next: no dead letters, and no
		// delivery tried past the next tick.
		if dl, ok := target["DeadLetterConfig"]; ok {
			t.Errorf("housekeeping target has dead letters %v", dl)
		}
		rp, _ := target["RetryPolicy"].(map[string]any)
		if age, _ := rp["MaximumEventAgeInSeconds"].(float64); age < 60 || age > 300 {
			t.Errorf("housekeeping event age %v, want 60 to 300 s (within a tick)", rp["MaximumEventAgeInSeconds"])
		}
	}
	check(t, "the schedule may invoke the reconciler", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), map[string]any{
			"Action":       "lambda:InvokeFunction",
			"FunctionName": reconciler,
			"Principal":    "events.amazonaws.com",
			"SourceArn":    getArn(s.id(s.g.HousekeepingRule)),
		})
	})
	env := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[contract.FnReconciler])])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if env[contract.EnvQueueIdleHours] != "24" {
		t.Errorf("%s = %v, want 24", contract.EnvQueueIdleHours, env[contract.EnvQueueIdleHours])
	}

	queues := map[string]any{"Fn::Join": []any{"", []any{"arn:", ref("AWS::Partition"), ":sqs:", ref("AWS::Region"), ":",
		ref("AWS::AccountId"), ":galley-kitchen_1-*"}}}
	for _, fn := range contract.FunctionNames {
		sts := s.statements(s.id(s.g.Roles[fn]))
		for _, action := range []string{"sqs:ListQueues", "sqs:ListQueueTags", "sqs:DeleteQueue"} {
			want := fn == contract.FnReconciler
			if got := allows(sts, action, queues); got != want {
				t.Errorf("%s may %s on the house's queues: %v, want %v", fn, action, got, want)
			}
		}
		// Only ListQueues, which names no queue, on every queue.
		for _, action := range []string{"sqs:ListQueueTags", "sqs:DeleteQueue", "sqs:DeleteMessage", "sqs:SendMessage"} {
			if allows(sts, action, "arn:aws:sqs:us-east-1:111111111111:another-queue") {
				t.Errorf("%s may %s on any queue", fn, action)
			}
		}
	}
}

func TestApiStageLogsAndThrottles(t *testing.T) {
	s := deployment(t)
	stages := s.resources("AWS::ApiGatewayV2::Stage")
	if len(stages) != 1 {
		t.Fatalf("%d stages", len(stages))
	}
	for _, st := range stages {
		p := props(st)
		if p["StageName"] != "$default" || p["AutoDeploy"] != true {
			t.Errorf("stage %v autodeploy %v", p["StageName"], p["AutoDeploy"])
		}
		thr := p["DefaultRouteSettings"].(map[string]any)
		if thr["ThrottlingRateLimit"] != 50.0 || thr["ThrottlingBurstLimit"] != 100.0 {
			t.Errorf("throttling %v", thr)
		}
		als := p["AccessLogSettings"].(map[string]any)
		if !jsonEq(als["DestinationArn"], getArn(s.id(s.g.AccessLogs))) {
			t.Errorf("access logs go to %v", als["DestinationArn"])
		}
		// The format is JSON once API Gateway fills in numbers.
		format := strings.NewReplacer("$context.status", "200").Replace(als["Format"].(string))
		var line map[string]any
		if err := json.Unmarshal([]byte(format), &line); err != nil {
			t.Fatalf("access log format is not JSON: %v", err)
		}
		if line["house"] != "kitchen_1" || line["routeKey"] != "$context.routeKey" {
			t.Errorf("format %v", line)
		}
		if strings.Contains(strings.ToLower(als["Format"].(string)), "authorization") {
			t.Error("access logs carry the Authorization header")
		}
	}
	for id, lg := range s.resources("AWS::Logs::LogGroup") {
		if props(lg)["RetentionInDays"] != 30.0 {
			t.Errorf("log group %s retention %v, want 30 days", id, props(lg)["RetentionInDays"])
		}
	}
}

// TestDashboardUntagged: every taggable resource carries the house's tags
// but the dashboard, whose Tags us-east-1's resource schema lacks.
func TestDashboardUntagged(t *testing.T) {
	s := deployment(t)
	for id, r := range s.resources("AWS::CloudWatch::Dashboard") {
		if tags, ok := props(r)["Tags"]; ok {
			t.Errorf("dashboard %s has Tags %v", id, tags)
		}
	}
	tagged := 0
	for _, r := range s.json["Resources"].(map[string]any) {
		for _, tag := range list(props(r.(map[string]any))["Tags"]) {
			if m, ok := tag.(map[string]any); ok && m["Key"] == "galley:house" {
				tagged++
			}
		}
	}
	if tagged < 10 {
		t.Errorf("%d resources carry galley:house, want the stack's resources tagged", tagged)
	}
}

func TestAlarmsAndDashboardExist(t *testing.T) {
	s := deployment(t)
	byName := map[string]map[string]any{}
	for _, a := range s.resources("AWS::CloudWatch::Alarm") {
		byName[props(a)["AlarmName"].(string)] = props(a)
	}
	want := []string{stack.AlarmAPI5xx, stack.AlarmAwaitFailures, stack.AlarmStuckWorkers, stack.AlarmWorkersOverCap,
		stack.AlarmReconcilerDLQ, stack.AlarmReconcilerFails}
	for _, fn := range contract.FunctionNames {
		want = append(want, fn+"-errors", fn+"-throttles")
	}
	for _, name := range want {
		if _, ok := byName["galley-kitchen_1-"+name]; !ok {
			t.Errorf("no alarm galley-kitchen_1-%s", name)
		}
	}
	if len(byName) != len(want) {
		t.Errorf("%d alarms, want %d", len(byName), len(want))
	}
	// Both gauges are the reconciler's (namespace galley, House dimension),
	// at their 5-minute maximum.
	house := []any{map[string]any{"Name": "House", "Value": "kitchen_1"}}
	for _, c := range []struct {
		alarm, metric, op  string
		threshold, periods float64
	}{
		{stack.AlarmStuckWorkers, "StuckWorkers", "GreaterThanOrEqualToThreshold", 1, 3},
		// At the cap launches are refused as rate-limited: alarm at it.
		{stack.AlarmWorkersOverCap, "LiveWorkers", "GreaterThanOrEqualToThreshold", 10, 2},
	} {
		a := byName["galley-kitchen_1-"+c.alarm]
		if a["Namespace"] != "galley" || a["MetricName"] != c.metric || !jsonEq(a["Dimensions"], house) ||
			a["Statistic"] != "Maximum" || a["Period"] != 300.0 {
			t.Errorf("%s watches %v/%v %v %v/%v, want galley/%s House=kitchen_1 Maximum/300", c.alarm,
				a["Namespace"], a["MetricName"], a["Dimensions"], a["Statistic"], a["Period"], c.metric)
		}
		if a["ComparisonOperator"] != c.op || a["Threshold"] != c.threshold || a["EvaluationPeriods"] != c.periods {
			t.Errorf("%s fires %v %v for %v periods, want %s %v for %v", c.alarm,
				a["ComparisonOperator"], a["Threshold"], a["EvaluationPeriods"], c.op, c.threshold, c.periods)
		}
	}
	if contract.MetricLiveWorkers != "LiveWorkers" || contract.MetricStuckWorkers != "StuckWorkers" {
		t.Errorf("metric names %s %s", contract.MetricLiveWorkers, contract.MetricStuckWorkers)
	}
	// No alarm watches a metric nothing emits: Container Insights' per-
	// service counts never exist for a cluster without services.
	for name, a := range byName {
		if ns, _ := a["Namespace"].(string); ns == "ECS/ContainerInsights" {
			t.Errorf("%s watches %s/%v", name, ns, a["MetricName"])
		}
	}
	mailboxErrors := byName["galley-kitchen_1-mailbox-errors"]
	if mailboxErrors["MetricName"] != "Errors" || !jsonEq(mailboxErrors["Dimensions"], []any{map[string]any{"Name": "FunctionName", "Value": ref(s.id(s.g.Functions[contract.FnMailbox]))}}) {
		t.Errorf("mailbox errors alarm %v", mailboxErrors)
	}
	check(t, "await failures filter", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Logs::MetricFilter"), map[string]any{
			"LogGroupName":  ref(s.id(s.g.AccessLogs)),
			"FilterPattern": `{ ($.routeKey = "POST /v1/deliveries/await") && ($.status >= 500) }`,
			"MetricTransformations": []any{map[string]any{
				"MetricName": "AwaitFailures", "MetricNamespace": "galley", "MetricValue": "1", "Unit": "Count",
				"Dimensions": []any{map[string]any{"Key": "House", "Value": "$.house"}},
			}},
		})
	})
	check(t, "dashboard", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Dashboard"), map[string]any{"DashboardName": "galley-kitchen_1"})
	})
}

func TestOutputs(t *testing.T) {
	s := deployment(t)
	outs := s.json["Outputs"].(map[string]any)
	for _, name := range []string{"Endpoint", "KitchnBinding", "TokenSecretArn", "ReadTokenCommand",
		"AnthropicKeySecretArn", "OpenAIKeySecretArn", "GitCredentialSecretArn", "EgressClusterName", "EgressServiceName"} {
		if _, ok := outs[name]; !ok {
			t.Errorf("no output %s", name)
		}
	}
	value := func(name string) string {
		raw, _ := json.Marshal(outs[name].(map[string]any)["Value"])
		return string(raw)
	}
	tokenRef, _ := json.Marshal(ref(s.id(s.g.TokenSecret)))
	if v := value("TokenSecretArn"); v != string(tokenRef) {
		t.Errorf("TokenSecretArn = %s", v)
	}
	if v := value("ReadTokenCommand"); !strings.Contains(v, "aws secretsmanager get-secret-value --region ") ||
		!strings.Contains(v, string(tokenRef)) || !strings.Contains(v, "--query SecretString --output text") {
		t.Errorf("ReadTokenCommand = %s", v)
	}
	apiEndpoint := map[string]any{"Fn::GetAtt": []any{s.id(s.g.API), "ApiEndpoint"}}
	if v := outs["Endpoint"].(map[string]any)["Value"]; !jsonEq(v, apiEndpoint) {
		t.Errorf("Endpoint = %v, want the API's endpoint", v)
	}
	// The binding is JSON once CloudFormation fills in the endpoint.
	parts := outs["KitchnBinding"].(map[string]any)["Value"].(map[string]any)["Fn::Join"].([]any)[1].([]any)
	var text strings.Builder
	for _, p := range parts {
		if jsonEq(p, apiEndpoint) {
			text.WriteString("https://abc.execute-api.us-east-1.amazonaws.com")
			continue
		}
		text.WriteString(p.(string))
	}
	var binding map[string]map[string]string
	if err := json.Unmarshal([]byte(text.String()), &binding); err != nil {
		t.Fatalf("binding %q: %v", text.String(), err)
	}
	want := map[string]string{"kind": "http", "backend": "galley", "credential": "galley-token", "endpoint": "https://abc.execute-api.us-east-1.amazonaws.com"}
	if !jsonEq(binding, map[string]any{"backend": want}) {
		t.Errorf("binding %v, want %v", binding, want)
	}
}

func TestCustomDomain(t *testing.T) {
	s, err := synth(map[string]any{
		"house":          "dom",
		"repository":     "https://git.example.com/house.git",
		"domainName":     "galley.example.com",
		"certificateArn": "arn:aws:acm:us-east-1:111111111111:certificate/abc",
		"awaitCapMs":     "20000",
		"maxWorkers":     3,
	})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "domain", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::DomainName"), map[string]any{
			"DomainName": "galley.example.com",
			"DomainNameConfigurations": []any{map[string]any{
				"CertificateArn": "arn:aws:acm:us-east-1:111111111111:certificate/abc", "EndpointType": "REGIONAL",
			}},
		})
	})
	check(t, "mapping", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::ApiGatewayV2::ApiMapping"), jsii.Number(1)) })
	check(t, "execute-api endpoint off", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Api"), map[string]any{"DisableExecuteApiEndpoint": true})
	})
	outs := s.json["Outputs"].(map[string]any)
	if v := outs["Endpoint"].(map[string]any)["Value"]; v != "https://galley.example.com" {
		t.Errorf("Endpoint = %v", v)
	}
	env := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[contract.FnEffects])])["Environment"].(map[string]any)["Variables"].(map[string]any)
	if env[contract.EnvWorkerEndpoint] != "https://galley.example.com" || env[contract.EnvAwaitCapMs] != "20000" || env[contract.EnvMaxWorkers] != "3" {
		t.Errorf("env %v %v %v", env[contract.EnvWorkerEndpoint], env[contract.EnvAwaitCapMs], env[contract.EnvMaxWorkers])
	}
	if _, ok := outs["CustomDomainTarget"]; !ok {
		t.Error("no CustomDomainTarget output")
	}
}

// TestNagHasNoUnsuppressedErrors: the app with cdk-nag's AwsSolutions
// checks synthesizes with no error left. The control shows the checks run
// in this harness: the same pack flags a secret left unsuppressed.
func TestNagHasNoUnsuppressedErrors(t *testing.T) {
	s := deployment(t)
	var errs []string
	check(t, "annotations", func() {
		for _, m := range *assertions.Annotations_FromStack(s.g.Stack).FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*"))) {
			raw, _ := json.Marshal(m.Entry.Data)
			errs = append(errs, *m.Id+": "+string(raw))
		}
	})
	if len(errs) > 0 {
		t.Errorf("%d unsuppressed errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	// Every suppression has a written reason.
	for id, r := range s.json["Resources"].(map[string]any) {
		meta, _ := r.(map[string]any)["Metadata"].(map[string]any)
		nag, _ := meta["cdk_nag"].(map[string]any)
		for _, rule := range list(nag["rules_to_suppress"]) {
			rule := rule.(map[string]any)
			if reason, _ := rule["reason"].(string); len(reason) < 40 {
				t.Errorf("%s: suppression %v has no real reason", id, rule["id"])
			}
		}
	}

	t.Run("control", func(t *testing.T) {
		var found int
		check(t, "control synth", func() {
			app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
			st := awscdk.NewStack(app, jsii.String("control"), nil)
			awssecretsmanager.NewSecret(st, jsii.String("Unrotated"), nil)
			awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(nil), nil)
			found = len(*assertions.Annotations_FromStack(st).FindError(jsii.String("*"),
				assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-SMG4"))))
		})
		if found != 1 {
			t.Errorf("control: %d SMG4 errors, want 1", found)
		}
	})
}

// TestReconcilerFailuresKeptAndAlarmed: the reconciler's asynchronous
// invocations that fail in the function go, after Lambda's two retries, to
// an encrypted TLS-only queue kept 14 days, which is alarmed; the
// EventBridge dead-letter queue stays beside it.
func TestReconcilerFailuresKeptAndAlarmed(t *testing.T) {
	s := deployment(t)
	fn := s.id(s.g.Functions[contract.FnReconciler])
	failures := s.id(s.g.ReconcilerFailures)
	if failures == s.id(s.g.ReconcilerDLQ) {
		t.Fatal("the failures queue is the dead-letter queue")
	}
	check(t, "async invoke config", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventInvokeConfig"), map[string]any{
			"FunctionName":             ref(fn),
			"Qualifier":                "$LATEST",
			"MaximumRetryAttempts":     2,
			"MaximumEventAgeInSeconds": 21600,
			"DestinationConfig": map[string]any{
				"OnFailure": map[string]any{"Destination": getArn(failures)},
			},
		})
	})
	// Only the reconciler's asynchronous invocations are configured so.
	check(t, "one async invoke config", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::Lambda::EventInvokeConfig"), jsii.Number(1))
	})
	q := props(s.resources("AWS::SQS::Queue")[failures])
	if q["SqsManagedSseEnabled"] != true || q["MessageRetentionPeriod"] != 1209600.0 {
		t.Errorf("failures queue %v, want SQS-managed encryption and 14 days", q)
	}
	check(t, "failures queue refuses plain HTTP", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::SQS::QueuePolicy"), map[string]any{
			"PolicyDocument": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{map[string]any{
				"Action":    "sqs:*",
				"Condition": map[string]any{"Bool": map[string]any{"aws:SecureTransport": "false"}},
				"Effect":    "Deny",
				"Principal": map[string]any{"AWS": "*"},
				"Resource":  getArn(failures),
			}})},
		})
	})
	// The reconciler's role may send to it (Lambda sends with the
	// function's role); no other function's may.
	for _, name := range contract.FunctionNames {
		got := allows(s.statements(s.id(s.g.Roles[name])), "sqs:SendMessage", getArn(failures))
		if got != (name == contract.FnReconciler) {
			t.Errorf("%s may send to the failures queue: %v", name, got)
		}
	}
	var alarm map[string]any
	for _, a := range s.resources("AWS::CloudWatch::Alarm") {
		if props(a)["AlarmName"] == "galley-kitchen_1-"+stack.AlarmReconcilerFails {
			alarm = props(a)
		}
	}
	if alarm == nil {
		t.Fatal("no reconciler-failures alarm")
	}
	if alarm["Namespace"] != "AWS/SQS" || alarm["MetricName"] != "ApproximateNumberOfMessagesVisible" ||
		!jsonEq(alarm["Dimensions"], []any{map[string]any{"Name": "QueueName", "Value": map[string]any{"Fn::GetAtt": []any{failures, "QueueName"}}}}) {
		t.Errorf("reconciler-failures watches %v/%v %v", alarm["Namespace"], alarm["MetricName"], alarm["Dimensions"])
	}
	if alarm["ComparisonOperator"] != "GreaterThanThreshold" || alarm["Threshold"] != 0.0 {
		t.Errorf("reconciler-failures fires %v %v, want > 0", alarm["ComparisonOperator"], alarm["Threshold"])
	}
}

// TestDeploymentOptions: gitUsername, lambdaArchitecture and scriptAgent
// reach the template, and scriptAgent leaves a warning on the stack.
func TestDeploymentOptions(t *testing.T) {
	s, err := synth(map[string]any{
		"house":              "smoke",
		"repository":         "https://git.example.com/house.git",
		"gitUsername":        "oauth2",
		"lambdaArchitecture": "x86_64",
		"scriptAgent":        "true",
		"retainSecrets":      "false",
		"anthropicBaseUrl":   "https://llm-gateway.example/anthropic",
		"openaiBaseUrl":      "https://llm-gateway.example/openai/v1",
		// Throttles from context reach the stage.
		"throttleRate":            "7",
		"throttleBurst":           "8",
		"workerThrottleRate":      "20",
		"workerThrottleBurst":     "30",
		"credentialThrottleRate":  "1",
		"credentialThrottleBurst": "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range s.resources("AWS::ApiGatewayV2::Stage") {
		p := props(st)
		want := map[string]any{
			"DefaultRouteSettings": map[string]any{"ThrottlingBurstLimit": 8.0, "ThrottlingRateLimit": 7.0},
			"RouteSettings": map[string]any{
				stack.CredentialRouteKey:       map[string]any{"ThrottlingBurstLimit": 2.0, "ThrottlingRateLimit": 1.0},
				stack.WorkerRouteKey:           map[string]any{"ThrottlingBurstLimit": 30.0, "ThrottlingRateLimit": 20.0},
				stack.CatchAllRouteKey:         map[string]any{"ThrottlingBurstLimit": 10.0, "ThrottlingRateLimit": 5.0},
				stack.OperatorRouteKey:         map[string]any{"ThrottlingBurstLimit": 20.0, "ThrottlingRateLimit": 10.0},
				stack.OperatorRedirectRouteKey: map[string]any{"ThrottlingBurstLimit": 20.0, "ThrottlingRateLimit": 10.0},
				stack.OperatorLoginRouteKey:    map[string]any{"ThrottlingBurstLimit": 5.0, "ThrottlingRateLimit": 1.0},
			},
		}
		got := map[string]any{"DefaultRouteSettings": p["DefaultRouteSettings"], "RouteSettings": p["RouteSettings"]}
		if !jsonEq(got, want) {
			t.Errorf("stage throttles %v, want %v", got, want)
		}
	}
	fns := s.resources("AWS::Lambda::Function")
	for _, name := range contract.FunctionNames {
		env := func(g *synthed) map[string]any {
			return props(g.resources("AWS::Lambda::Function")[g.id(g.g.Functions[name])])["Environment"].(map[string]any)["Variables"].(map[string]any)
		}
		p := props(fns[s.id(s.g.Functions[name])])
		if !jsonEq(p["Architectures"], []any{"x86_64"}) {
			t.Errorf("%s: architectures %v, want x86_64", name, p["Architectures"])
		}
		e := env(s)
		if v, ok := e[contract.EnvGitUsername]; ok != (name == contract.FnEffects || name == contract.FnReads) || (ok && v != "oauth2") {
			t.Errorf("%s: %s = %v (set %v)", name, contract.EnvGitUsername, v, ok)
		}
		// The scripted agent is the default for launches (effects) only;
		// the families the descriptor declares are unchanged.
		if v, ok := e[contract.EnvDefaultAgent]; ok != (name == contract.FnEffects) || (ok && v != "script") {
			t.Errorf("%s: %s = %v (set %v), want script on effects only", name, contract.EnvDefaultAgent, v, ok)
		}
		if e[contract.EnvAgentFamilies] != "claude,codex" {
			t.Errorf("%s: %s = %v, want claude,codex", name, contract.EnvAgentFamilies, e[contract.EnvAgentFamilies])
		}
		// The default deployment: arm64, and no default agent anywhere.
		d := deployment(t)
		if p := props(d.resources("AWS::Lambda::Function")[d.id(d.g.Functions[name])]); !jsonEq(p["Architectures"], []any{"arm64"}) {
			t.Errorf("default %s: architectures %v, want arm64", name, p["Architectures"])
		}
		if v, ok := env(d)[contract.EnvDefaultAgent]; ok {
			t.Errorf("default %s: %s = %v", name, contract.EnvDefaultAgent, v)
		}
	}
	// The worker task stays ARM64 whatever the functions run on.
	td := props(s.resources("AWS::ECS::TaskDefinition")[s.id(s.g.TaskDefinition)])
	if !jsonEq(td["RuntimePlatform"], map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}) {
		t.Errorf("runtime platform %v, want ARM64 Linux", td["RuntimePlatform"])
	}
	check(t, "container git user name", func() {
		s.tmpl.HasResourceProperties(jsii.String("AWS::ECS::TaskDefinition"), map[string]any{
			"ContainerDefinitions": []any{assertions.Match_ObjectLike(&map[string]any{
				"Environment": assertions.Match_ArrayWith(&[]any{map[string]any{"Name": contract.EnvGitUsername, "Value": "oauth2"}}),
			})},
		})
	})

	warnings := func(st awscdk.Stack) int {
		n := 0
		check(t, "annotations", func() {
			n = len(*assertions.Annotations_FromStack(st).FindWarning(jsii.String("*"),
				assertions.Match_StringLikeRegexp(jsii.String("scriptAgent.*not for production"))))
		})
		return n
	}
	// The providers' base URLs reach the worker container as plain
	// configuration, and only when given.
	containerEnv := func(g *synthed) map[string]any {
		out := map[string]any{}
		td := props(g.resources("AWS::ECS::TaskDefinition")[g.id(g.g.TaskDefinition)])
		for _, kv := range list(list(td["ContainerDefinitions"])[0].(map[string]any)["Environment"]) {
			out[fmt.Sprint(kv.(map[string]any)["Name"])] = kv.(map[string]any)["Value"]
		}
		return out
	}
	if e := containerEnv(s); e[contract.EnvAnthropicBaseURL] != "https://llm-gateway.example/anthropic" || e[contract.EnvOpenAIBaseURL] != "https://llm-gateway.example/openai/v1" {
		t.Errorf("worker container base URLs %v and %v, want the context's", e[contract.EnvAnthropicBaseURL], e[contract.EnvOpenAIBaseURL])
	}
	for _, k := range []string{contract.EnvAnthropicBaseURL, contract.EnvOpenAIBaseURL} {
		if v, ok := containerEnv(deployment(t))[k]; ok {
			t.Errorf("default deployment: worker container sets %s = %v", k, v)
		}
	}
	// retainSecrets=false: every secret goes with the stack.
	for name, pol := range secretPolicies(s) {
		if pol != [2]any{"Delete", "Delete"} {
			t.Errorf("retainSecrets=false: secret %s has DeletionPolicy/UpdateReplacePolicy %v, want Delete", name, pol)
		}
	}
	if n := warnings(s.g.Stack); n != 1 {
		t.Errorf("scriptAgent on: %d warnings, want 1", n)
	}
	if n := warnings(deployment(t).g.Stack); n != 0 {
		t.Errorf("scriptAgent off: %d warnings, want none", n)
	}
	// Still clean under cdk-nag.
	check(t, "nag", func() {
		if errs := *assertions.Annotations_FromStack(s.g.Stack).FindError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(".*"))); len(errs) > 0 {
			t.Errorf("%d unsuppressed errors, first %s", len(errs), *errs[0].Id)
		}
	})
}
