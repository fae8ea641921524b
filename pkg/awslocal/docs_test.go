package awslocal_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

// shellCommands are the commands of a Markdown file's sh code blocks, with
// continuation lines joined and comments dropped.
func shellCommands(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cmds []string
	in, cur := false, ""
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
		cmds = append(cmds, strings.Join(strings.Fields(cur+line), " "))
		cur = ""
	}
	return cmds
}

// awsClients are the SDK clients whose operations the docs' aws commands
// name; service-quotas has no SDK in this module, so its one operation is
// written out from the API reference (GetServiceQuota: ServiceCode,
// QuotaCode).
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
	if args[1] == "service-quotas" && args[2] == "get-service-quota" {
		fields = map[string]bool{"ServiceCode": true, "QuotaCode": true}
	} else {
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
// can be checked here: the smoke test's `galley conformance` commands run
// against the stack deployed from the template (the house's name and the
// endpoint substituted), make targets are dry-run, cdk commands' context
// keys are the app's, aws commands' operations and parameters are the
// SDK's, and anything else must be a shell builtin or a known tool. A
// command the check does not know fails it, so the walk-through stays
// checkable.
func TestDeployDocCommands(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmds := shellCommands(t, filepath.Join(root, "docs", "deploy.md"))
	if len(cmds) < 10 {
		t.Fatalf("only %d commands in docs/deploy.md", len(cmds))
	}
	s, _ := startStack(t)
	house := s.FunctionEnv(lambdaapp.Effects)[lambdaapp.EnvHouse]
	galley := filepath.Join(filepath.Dir(binaries(t).ECS), "galley")
	keys := cdkContextKeys(t, root)
	conformance := 0
	for _, c := range cmds {
		args := strings.Fields(c)
		switch {
		case strings.HasPrefix(c, "bin/galley conformance"):
			conformance++
			var run []string
			for i := 2; i < len(args); i++ {
				a := strings.Trim(args[i], `"`)
				switch {
				case a == "$ENDPOINT":
					a = s.Endpoint()
				case args[i-1] == "--token-file":
					a = s.TokenFile()
				case a == "myhouse":
					a = house
				}
				run = append(run, a)
			}
			out, err := exec.Command(galley, append([]string{"conformance"}, run...)...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", c, err, out)
			}
		case args[0] == "make":
			cmd := exec.Command("make", append([]string{"-n"}, args[1:]...)...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: %v\n%s", c, err, out)
			}
		case args[0] == "npx" && (args[1] == "cdk" || args[1] == "cdklocal"):
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
		case args[0] == "aws" || strings.HasPrefix(c, "for t in $(aws") || strings.HasPrefix(c, "aws ecs stop-task"):
			if args[0] == "for" {
				args = strings.Fields(strings.TrimPrefix(strings.SplitN(c, "$(", 2)[1], ""))
			}
			if why := checkAWSCommand(args); why != "" {
				t.Errorf("%s: %s", c, why)
			}
		case args[0] == "umask", args[0] == "export", args[0] == "done", args[0] == "npm",
			strings.HasPrefix(c, "for f in effects reads mailbox workerapi reconciler; do"),
			strings.HasPrefix(c, "CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build"):
			// The LocalStack path's build loop: the Makefile's lambdas
			// target for x86_64.
		default:
			t.Errorf("docs/deploy.md: no check knows the command %q", c)
		}
	}
	if conformance == 0 {
		t.Error("docs/deploy.md has no galley conformance smoke test")
	}
}
