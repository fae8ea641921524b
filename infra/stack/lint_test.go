package stack_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/galley-run/galley/infra/stack"
)

// TestTemplatesPassCfnLint runs cfn-lint, for every region of
// stack.LintRegions, over the templates of the default deployment and of
// one with every option the tests set (custom domain, alarm topic, base
// URLs, x86 functions, no retained secrets, an egress allowlist, model
// caps, one AZ), and of one without the DNS Firewall: no finding but those the
// stack suppresses with a reason. cfn-lint missing skips it, or fails it
// with GALLEY_REQUIRE_CFN_LINT=1 (make test-infra, which installs it).
func TestTemplatesPassCfnLint(t *testing.T) {
	lint, err := exec.LookPath("cfn-lint")
	if err != nil {
		if os.Getenv("GALLEY_REQUIRE_CFN_LINT") == "1" {
			t.Fatal("GALLEY_REQUIRE_CFN_LINT=1 but cfn-lint is not installed (make cfn-lint installs it)")
		}
		t.Skip("cfn-lint is not installed")
	}
	options, err := synth(map[string]any{
		"house": "lintme", "repository": "https://git.example.com/house.git",
		"domainName": "galley.example.com", "certificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/abc",
		"alarmTopicArn": "arn:aws:sns:us-east-1:123456789012:alarms", "lambdaArchitecture": "x86_64",
		"anthropicBaseUrl": "https://gw.example/anthropic", "openaiBaseUrl": "https://gw.example/openai/v1",
		"retainSecrets": "false", "effectsReservedConcurrency": 0,
		"egressAllowlist": "pypi.org,*.pythonhosted.org", "modelCapTokens": 1000000, "modelCapUsd": "12.50",
		"availabilityZones": 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	args := append([]string{"--regions"}, stack.LintRegions...)
	args = append(args, "--")
	noFirewall, err := synth(map[string]any{"house": "nofw", "repository": "https://git.example.com/house.git", "dnsFirewall": "false"})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*synthed{"default": deployment(t), "options": options, "nofirewall": noFirewall} {
		b, err := json.Marshal(s.json)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".template.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, p)
		// Every function carries the suppression with its reason.
		for id, r := range s.resources("AWS::Lambda::Function") {
			md, _ := r["Metadata"].(map[string]any)["cfn-lint"].(map[string]any)
			checks, _ := md["config"].(map[string]any)["ignore_checks"].([]any)
			if !slices.Contains(checks, any("W3005")) {
				t.Errorf("%s: function %s has no cfn-lint W3005 suppression: %v", name, id, r["Metadata"])
			}
		}
	}
	if out, err := exec.Command(lint, args...).CombinedOutput(); err != nil {
		t.Errorf("cfn-lint %v: %v\n%s", stack.LintRegions, err, out)
	}
}
