package awslocal_test

import (
	"bufio"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/pkg/contract"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// shellCommands are the commands of a Markdown file's sh code blocks, with
// continuation lines joined and comments dropped, each with the heading of
// the section (## or ###) it is in.
func shellCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []docCommand
	in, cur, section, top := false, "", "", ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in && strings.HasPrefix(line, "## "):
			top, section = strings.TrimPrefix(line, "## "), strings.TrimPrefix(line, "## ")
		case !in && strings.HasPrefix(line, "### "):
			section = strings.TrimPrefix(line, "### ")
		}
		if !in {
			continue
		}
		if i := strings.Index(line, "  #"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cmds = append(cmds, docCommand{cmd: strings.Join(strings.Fields(cur+line), " "), section: section, top: top})
		cur = ""
	}
	return cmds
}

// docCommand is one command of a doc and where it is.
type docCommand struct {
	cmd     string
	section string // its ## or ### heading
	top     string // its ## heading
}

// awsClients are the SDK clients whose operations the docs' aws commands
// name; service-quotas has no SDK in this module, so its one operation is
// written out from the API reference (GetServiceQuota: ServiceCode,
// QuotaCode), as is CloudFormation's DescribeStacks.
var awsClients = map[string]any{"secretsmanager": &secretsmanager.Client{}, "ecs": &ecs.Client{}}

var awsGlobalFlags = map[string]bool{"--query": true, "--output": true, "--region": true, "--endpoint-url": true}

// checkAWSCommand checks an aws CLI command's operation and parameters
// against the SDK's: the CLI's `put-secret-value --secret-id` is the API's
// PutSecretValue with SecretId.
func checkAWSCommand(args []string) string {
	if len(args) < 3 {
		return "too short"
	}
	pascal := func(kebab string) string {
		var b strings.Builder
		for _, p := range strings.Split(strings.TrimPrefix(kebab, "--"), "-") {
			if p != "" {
				b.WriteString(strings.ToUpper(p[:1]) + p[1:])
			}
		}
		return b.String()
	}
	var fields map[string]bool
	switch {
	case args[1] == "service-quotas" && args[2] == "get-service-quota":
		fields = map[string]bool{"ServiceCode": true, "QuotaCode": true}
	case args[1] == "cloudformation" && args[2] == "describe-stacks":
		// No CloudFormation SDK in this module: DescribeStacks from the
		// API reference.
		fields = map[string]bool{"StackName": true, "NextToken": true}
	default:
		client, ok := awsClients[args[1]]
		if !ok {
			return "no SDK client for service " + args[1]
		}
		m, ok := reflect.TypeOf(client).MethodByName(pascal(args[2]))
		if !ok {
			return args[1] + " has no operation " + pascal(args[2])
		}
		in := m.Type.In(2).Elem()
		fields = map[string]bool{}
		for i := 0; i < in.NumField(); i++ {
			fields[in.Field(i).Name] = true
		}
	}
	for _, a := range args[3:] {
		if !strings.HasPrefix(a, "--") || awsGlobalFlags[a] {
			continue
		}
		if !fields[pascal(a)] {
			return "no parameter " + a + " (" + pascal(a) + ")"
		}
	}
	return ""
}

// cdkContextKeys are the context keys the CDK app reads (infra/stack's
// Config, its json names).
func cdkContextKeys(t *testing.T, root string) map[string]bool {
	b, err := os.ReadFile(filepath.Join(root, "infra", "stack", "config.go"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile("json:\"([A-Za-z]+)\"").FindAllStringSubmatch(string(b), -1) {
		keys[m[1]] = true
	}
	return keys
}

// TestDeployDocCommands checks every command of docs/deploy.md the way it
// can be checked here. From a copy of the repository as a fresh clone has
// it, with no AWS credentials, the deploy path's commands run as written
// (npx cdk bootstrap, deploy and destroy, make deploy, lambdas and
// destroy, every aws command, the assignments that read the stack's
// outputs) and must fail only for want of credentials, past synthesis and
// their argument checks; make lambdas and make synth need none and must
// succeed (make test-infra, which make test runs anyway, is dry-run). The
// smoke test's `galley conformance` commands run against the stack
// deployed from the template (the house's name and the endpoint the
// ENDPOINT assignment would read substituted), and `galley stop-workers`
// against its ECS stand-in at the wire. cdk context keys must be the app's
// and aws operations and parameters the SDK's. The LocalStack section,
// which no machine here runs, gets only those static checks. A command no
// check knows fails the test, so the walk-through stays checkable.
func TestDeployDocCommands(t *testing.T) {
	// Parallel: builds and synthesizes in its own clone, touching no
	// stack; it runs beside the idle workers' minute.
	t.Parallel()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmds := shellCommands(t, filepath.Join(root, "docs", "deploy.md"))
	if len(cmds) < 10 {
		t.Fatalf("only %d commands in docs/deploy.md", len(cmds))
	}
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatalf("the AWS CLI, which docs/deploy.md's commands use, is not installed: %v", err)
	}
	keys := cdkContextKeys(t, root)
	// The deploy path, in the doc's order, in one fresh clone: a user's
	// walk-through (make lambdas before the cdk deploy that needs it).
	clone, work := freshClone(t, root), docWorkDir(t)
	var runs []func()
	ran := map[string]bool{}
	for _, dc := range cmds {
		c, args := dc.cmd, strings.Fields(dc.cmd)
		static := dc.top == "LocalStack"
		if args[0] == "npx" && (args[1] == "cdk" || args[1] == "cdklocal") {
			switch args[2] {
			case "bootstrap", "deploy", "destroy", "synth", "diff":
			default:
				t.Errorf("%s: cdk has no command %s", c, args[2])
			}
			for i, a := range args {
				if a == "-c" && i+1 < len(args) {
					k, _, _ := strings.Cut(args[i+1], "=")
					if !keys[k] {
						t.Errorf("%s: the CDK app reads no context key %s", c, k)
					}
				}
			}
		}
		if inner := awsCommand(c); inner != nil {
			if why := checkAWSCommand(inner); why != "" {
				t.Errorf("%s: %s", c, why)
			}
		}
		switch {
		case static:
			switch {
			case args[0] == "npx", args[0] == "npm", args[0] == "export", args[0] == "done",
				strings.HasPrefix(c, "for f in effects reads mailbox workerapi reconciler operator; do"),
				strings.HasPrefix(c, "CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build"):
				// The LocalStack path's build loop is the Makefile's lambdas
				// target for x86_64; cdklocal is checked above.
			default:
				t.Errorf("docs/deploy.md (LocalStack): no check knows the command %q", c)
			}
		case strings.HasPrefix(c, "bin/galley conformance"), strings.HasPrefix(c, "bin/galley stop-workers"),
			strings.HasPrefix(c, "bin/galley workers"):
			// Below, against the stack.
		case c == "make test-infra":
			// make test runs it itself: a dry run here.
			cmd := exec.Command("make", "-n", "test-infra")
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: %v\n%s", c, err, out)
			}
		case c == "make lambdas", strings.HasPrefix(c, "make synth "):
			// No credentials needed: these must succeed.
			runs = append(runs, func() {
				cmd := exec.Command("make", args[1:]...)
				cmd.Dir, cmd.Env = clone, noCredentials()
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Errorf("%s: %v\n%s", c, err, tail(string(out), 4000))
				}
			})
		case args[0] == "npx", args[0] == "make":
			ran[args[0]+" "+args[1]] = true
			runs = append(runs, func() { runUntilCredentials(t, clone, c) })
		case awsCommand(c) != nil:
			ran["aws"] = true
			runs = append(runs, func() { runUntilCredentials(t, work, c) })
		case args[0] == "umask":
		default:
			t.Errorf("docs/deploy.md: no check knows the command %q", c)
		}
	}
	for _, want := range []string{"npx cdk", "make deploy", "make destroy", "aws"} {
		if !ran[want] {
			t.Errorf("docs/deploy.md has no %s command to run", want)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, r := range runs {
			r()
		}
	}()
	defer func() { <-done }()

	s, _ := startStack(t)
	house := s.FunctionEnv(lambdaapp.Effects)[contract.EnvHouse]
	cluster := s.FunctionEnv(lambdaapp.Effects)[contract.EnvCluster]
	galley := filepath.Join(filepath.Dir(binaries(t).ECS), "galley")
	ecsURL := httptest.NewServer(s.ECS())
	defer ecsURL.Close()
	conformance, stops := 0, 0
	for _, dc := range cmds {
		c, args := dc.cmd, strings.Fields(dc.cmd)
		if !strings.HasPrefix(c, "bin/galley conformance") && !strings.HasPrefix(c, "bin/galley stop-workers") &&
			!strings.HasPrefix(c, "bin/galley workers") {
			continue
		}
		operator := args[1] == "workers" // the operator's command, with the operator token
		var run []string
		for i := 1; i < len(args); i++ {
			a := strings.Trim(args[i], `"`)
			switch {
			case a == "$ENDPOINT":
				a = s.Endpoint()
			case a == "$CLUSTER":
				a = cluster
			case args[i-1] == "--token-file" && operator:
				a = s.OperatorTokenFile()
			case args[i-1] == "--token-file":
				a = s.TokenFile()
			case a == "myhouse":
				a = house
			}
			run = append(run, a)
		}
		cmd := exec.Command(galley, run...)
		if args[1] == "stop-workers" {
			stops++
			// The real SDK, at the stand-in's wire, with credentials it
			// takes without checking them.
			cmd.Env = noCredentials("AWS_ENDPOINT_URL_ECS="+ecsURL.URL, "AWS_ACCESS_KEY_ID=AKIDDOCTEST", "AWS_SECRET_ACCESS_KEY=doctest")
		} else if !operator {
			conformance++
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c, err, out)
		}
		if args[1] == "stop-workers" {
			for _, ti := range s.ECS().Tasks() {
				if ti.LastStatus != "STOPPED" {
					t.Errorf("%s: task %s is %s after it returned", c, ti.ARN, ti.LastStatus)
				}
			}
		}
	}
	if conformance == 0 || stops == 0 {
		t.Errorf("docs/deploy.md has %d galley conformance and %d galley stop-workers commands, want both", conformance, stops)
	}
}

// awsCommand is the aws command a doc command runs (itself, or the one in
// its leading assignment or loop's $(...)), as arguments; nil if none.
func awsCommand(c string) []string {
	if i := strings.Index(c, "$(aws "); i >= 0 && (strings.HasPrefix(c, "for ") || strings.Contains(c[:i], "=")) {
		inner := c[i+2:]
		if j := strings.LastIndex(inner, ")"); j >= 0 {
			inner = inner[:j]
		}
		return strings.Fields(inner)
	}
	if strings.HasPrefix(c, "aws ") {
		return strings.Fields(c)
	}
	return nil
}
