package stack_test

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/galley-run/galley/infra/stack"
)

func TestFromContext(t *testing.T) {
	tests := []struct {
		name    string
		ctx     map[string]any
		wantErr string // substring; empty: valid
		check   func(t *testing.T, c stack.Config)
	}{
		{name: "defaults", check: func(t *testing.T, c stack.Config) {
			if c.House != "main" || c.Backend != "galley" || c.Credential != "galley-token" || c.AwaitCapMs != 25000 ||
				c.MaxWorkers != 10 || c.WorkerCPU != 1024 || c.WorkerMemory != 4096 || strings.Join(c.AgentFamilies, ",") != "claude,codex" ||
				c.QueueIdleHours != 24 || c.GitUsername != "x-access-token" || c.LambdaArchitecture != "arm64" || c.ScriptAgent {
				t.Errorf("defaults %+v", c)
			}
			if c.QueuePrefix() != "galley-main-" || c.SecretPrefix() != "galley/main/" || c.StackName() != "galley-main" {
				t.Errorf("names %s %s %s", c.QueuePrefix(), c.SecretPrefix(), c.StackName())
			}
		}},
		{name: "strings from -c", ctx: map[string]any{"workerCpu": "2048", "workerMemory": "8192", "maxWorkers": "50", "agentFamilies": "codex, claude"},
			check: func(t *testing.T, c stack.Config) {
				if c.WorkerCPU != 2048 || c.WorkerMemory != 8192 || c.MaxWorkers != 50 || strings.Join(c.AgentFamilies, ",") != "codex,claude" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "json values from cdk.json", ctx: map[string]any{"maxWorkers": 200.0, "agentFamilies": []any{"claude"}},
			check: func(t *testing.T, c stack.Config) {
				if c.MaxWorkers != 200 || strings.Join(c.AgentFamilies, ",") != "claude" {
					t.Errorf("%+v", c)
				}
			}},
		{name: "underscore house", ctx: map[string]any{"house": "a_b"}, check: func(t *testing.T, c stack.Config) {
			if c.StackName() != "galley-a-b" {
				t.Errorf("stack name %s", c.StackName())
			}
		}},
		{name: "bad house", ctx: map[string]any{"house": "a b"}, wantErr: "house"},
		{name: "long house", ctx: map[string]any{"house": strings.Repeat("h", 33)}, wantErr: "at most 32"},
		{name: "bad number", ctx: map[string]any{"maxWorkers": "many"}, wantErr: "maxWorkers"},
		{name: "zero workers", ctx: map[string]any{"maxWorkers": 0}, wantErr: "maxWorkers"},
		{name: "cap beyond gateway", ctx: map[string]any{"awaitCapMs": 29000}, wantErr: "awaitCapMs"},
		{name: "fargate size", ctx: map[string]any{"workerCpu": 1024, "workerMemory": 1024}, wantErr: "workerMemory"},
		{name: "smallest fargate", ctx: map[string]any{"workerCpu": 256, "workerMemory": 1536}, wantErr: "workerMemory"},
		{name: "cpu", ctx: map[string]any{"workerCpu": 3000}, wantErr: "workerCpu"},
		{name: "disk below fargate's", ctx: map[string]any{"workerEphemeralStorageGiB": 20}, wantErr: "workerEphemeralStorageGiB"},
		{name: "disk above fargate's", ctx: map[string]any{"workerEphemeralStorageGiB": "201"}, wantErr: "workerEphemeralStorageGiB"},
		{name: "disk", ctx: map[string]any{"workerEphemeralStorageGiB": "64"}, check: func(t *testing.T, c stack.Config) {
			if c.WorkerEphemeralStorageGiB != 64 {
				t.Errorf("workerEphemeralStorageGiB = %d, want 64", c.WorkerEphemeralStorageGiB)
			}
		}},
		{name: "family", ctx: map[string]any{"agentFamilies": "claude,gpt"}, wantErr: `"gpt"`},
		{name: "script is local only", ctx: map[string]any{"agentFamilies": "script"}, wantErr: `"script"`},
		{name: "domain without certificate", ctx: map[string]any{"domainName": "g.example.com"}, wantErr: "both or neither"},
		{name: "ssh repository", ctx: map[string]any{"repository": "git@example.com:h.git"}, wantErr: "https://"},
		{name: "http base URL", ctx: map[string]any{"anthropicBaseUrl": "http://gw.example"}, wantErr: "anthropicBaseUrl: want an https:// URL"},
		{name: "base URL with a password", ctx: map[string]any{"openaiBaseUrl": "https://u:p@gw.example/v1"}, wantErr: "openaiBaseUrl: must not carry a user"},
		{name: "base URL with a query", ctx: map[string]any{"openaiBaseUrl": "https://gw.example/v1?k=1"}, wantErr: "openaiBaseUrl: want no query"},
		{name: "repository required", ctx: map[string]any{"repository": ""}, wantErr: "repository: required"},
		{name: "repository blank", ctx: map[string]any{"repository": "  "}, wantErr: "repository: required"},
		{name: "git username", ctx: map[string]any{"gitUsername": "oauth2"}, check: func(t *testing.T, c stack.Config) {
			if c.GitUsername != "oauth2" {
				t.Errorf("gitUsername %q", c.GitUsername)
			}
		}},
		{name: "git username longest", ctx: map[string]any{"gitUsername": strings.Repeat("u", 256)}, check: func(t *testing.T, c stack.Config) {
			if len(c.GitUsername) != 256 {
				t.Errorf("gitUsername of %d characters", len(c.GitUsername))
			}
		}},
		{name: "git username empty", ctx: map[string]any{"gitUsername": ""}, wantErr: "gitUsername"},
		{name: "git username too long", ctx: map[string]any{"gitUsername": strings.Repeat("u", 257)}, wantErr: "gitUsername"},
		{name: "git username colon", ctx: map[string]any{"gitUsername": "user:pass"}, wantErr: "gitUsername"},
		{name: "git username control", ctx: map[string]any{"gitUsername": "us\ter"}, wantErr: "gitUsername"},
		{name: "git username non-ascii", ctx: map[string]any{"gitUsername": "usér"}, wantErr: "gitUsername"},
		{name: "x86 functions", ctx: map[string]any{"lambdaArchitecture": "x86_64"}, check: func(t *testing.T, c stack.Config) {
			if c.LambdaArchitecture != "x86_64" {
				t.Errorf("lambdaArchitecture %q", c.LambdaArchitecture)
			}
		}},
		{name: "architecture", ctx: map[string]any{"lambdaArchitecture": "amd64"}, wantErr: "lambdaArchitecture"},
		{name: "script agent from -c", ctx: map[string]any{"scriptAgent": "true"}, check: func(t *testing.T, c stack.Config) {
			if !c.ScriptAgent {
				t.Error("scriptAgent off")
			}
		}},
		{name: "script agent from cdk.json", ctx: map[string]any{"scriptAgent": true}, check: func(t *testing.T, c stack.Config) {
			if !c.ScriptAgent {
				t.Error("scriptAgent off")
			}
		}},
		{name: "script agent off", ctx: map[string]any{"scriptAgent": "false"}, check: func(t *testing.T, c stack.Config) {
			if c.ScriptAgent {
				t.Error("scriptAgent on")
			}
		}},
		{name: "script agent not a bool", ctx: map[string]any{"scriptAgent": "yes please"}, wantErr: "scriptAgent"},
		{name: "retention", ctx: map[string]any{"logRetentionDays": 31}, wantErr: "logRetentionDays"},
		{name: "queue idle age", ctx: map[string]any{"queueIdleHours": "48"}, check: func(t *testing.T, c stack.Config) {
			if c.QueueIdleHours != 48 {
				t.Errorf("queueIdleHours %d", c.QueueIdleHours)
			}
		}},
		{name: "queue idle age under twice the touch", ctx: map[string]any{"queueIdleHours": 1}, wantErr: "queueIdleHours"},
		{name: "route throttles by default", check: func(t *testing.T, c stack.Config) {
			want := map[string]stack.Throttle{
				stack.CredentialRouteKey:       {Rate: 5, Burst: 10},
				stack.WorkerRouteKey:           {Rate: 50, Burst: 100},
				stack.CatchAllRouteKey:         {Rate: 5, Burst: 10},
				stack.OperatorRouteKey:         {Rate: 10, Burst: 20},
				stack.OperatorRedirectRouteKey: {Rate: 10, Burst: 20},
				stack.OperatorLoginRouteKey:    {Rate: 1, Burst: 5},
			}
			if got := c.RouteThrottles(); !maps.Equal(got, want) {
				t.Errorf("route throttles %+v, want %+v", got, want)
			}
			if c.ThrottleRate != 50 || c.ThrottleBurst != 100 {
				t.Errorf("stage throttle %d/%d, want 50/100", c.ThrottleRate, c.ThrottleBurst)
			}
		}},
		{name: "route throttles from -c", ctx: map[string]any{"credentialThrottleRate": "2", "credentialThrottleBurst": "4",
			"workerThrottleRate": 20.0, "workerThrottleBurst": 40.0}, check: func(t *testing.T, c stack.Config) {
			got := c.RouteThrottles()
			if got[stack.CredentialRouteKey] != (stack.Throttle{Rate: 2, Burst: 4}) || got[stack.WorkerRouteKey] != (stack.Throttle{Rate: 20, Burst: 40}) {
				t.Errorf("route throttles %+v", got)
			}
		}},
		{name: "credential throttle off", ctx: map[string]any{"credentialThrottleRate": 0}, wantErr: "credentialThrottleRate"},
		{name: "worker burst off", ctx: map[string]any{"workerThrottleBurst": 0}, wantErr: "workerThrottleBurst"},
		{name: "stage throttle off", ctx: map[string]any{"throttleRate": 0}, wantErr: "throttleRate"},

		// The network (issue 28): the egress allowlist, the model caps,
		// the DNS Firewall and the AZs.
		{name: "network defaults", check: func(t *testing.T, c stack.Config) {
			if len(c.EgressAllowlist) != 0 || c.ModelCapTokens != 0 || c.ModelCapUSD != "" || !c.DNSFirewall || c.AvailabilityZones != 2 {
				t.Errorf("allowlist %q caps %d %q dnsFirewall %v azs %d, want none, none, on, 2",
					c.EgressAllowlist, c.ModelCapTokens, c.ModelCapUSD, c.DNSFirewall, c.AvailabilityZones)
			}
			if c.EgressHost() != "egress.galley-main.internal" || c.EgressUpstream() != "http://egress.galley-main.internal:3128" {
				t.Errorf("egress host %s upstream %s", c.EgressHost(), c.EgressUpstream())
			}
		}},
		{name: "allowlist from -c", ctx: map[string]any{"egressAllowlist": "pypi.org, *.pythonhosted.org,registry.npmjs.org"},
			check: func(t *testing.T, c stack.Config) {
				if !slices.Equal(c.EgressAllowlist, []string{"pypi.org", "*.pythonhosted.org", "registry.npmjs.org"}) {
					t.Errorf("allowlist %q", c.EgressAllowlist)
				}
			}},
		{name: "allowlist from cdk.json", ctx: map[string]any{"egressAllowlist": []any{"xn--bcher-kva.example", "*.github.com"}},
			check: func(t *testing.T, c stack.Config) {
				if !slices.Equal(c.EgressAllowlist, []string{"xn--bcher-kva.example", "*.github.com"}) {
					t.Errorf("allowlist %q", c.EgressAllowlist)
				}
			}},
		{name: "allowlist empty", ctx: map[string]any{"egressAllowlist": ""}, check: func(t *testing.T, c stack.Config) {
			if len(c.EgressAllowlist) != 0 {
				t.Errorf("allowlist %q", c.EgressAllowlist)
			}
		}},
		{name: "allowlist everything", ctx: map[string]any{"egressAllowlist": "*"}, wantErr: `egressAllowlist: entry "*": matches every host`},
		{name: "allowlist tld glob", ctx: map[string]any{"egressAllowlist": "*.com"}, wantErr: `egressAllowlist: entry "*.com": a glob over a top-level domain`},
		{name: "allowlist url", ctx: map[string]any{"egressAllowlist": "https://pypi.org"}, wantErr: `egressAllowlist: entry "https://pypi.org": want a host name`},
		{name: "allowlist path", ctx: map[string]any{"egressAllowlist": "pypi.org/simple"}, wantErr: `egressAllowlist: entry "pypi.org/simple"`},
		{name: "allowlist port", ctx: map[string]any{"egressAllowlist": "pypi.org:443"}, wantErr: `egressAllowlist: entry "pypi.org:443": want a host name without a port`},
		{name: "allowlist ipv4", ctx: map[string]any{"egressAllowlist": "203.0.113.7"}, wantErr: `egressAllowlist: entry "203.0.113.7": an IP address`},
		{name: "allowlist ipv6", ctx: map[string]any{"egressAllowlist": "2001:db8::1"}, wantErr: `egressAllowlist: entry "2001:db8::1": an IP address`},
		{name: "allowlist numeric tld", ctx: map[string]any{"egressAllowlist": "host.123"}, wantErr: `egressAllowlist: entry "host.123"`},
		{name: "allowlist inner wildcard", ctx: map[string]any{"egressAllowlist": "api.*.example.com"}, wantErr: "a wildcard only as a whole first label"},
		{name: "allowlist single label", ctx: map[string]any{"egressAllowlist": "localhost"}, wantErr: "at least two labels"},
		{name: "allowlist upper case", ctx: map[string]any{"egressAllowlist": "PyPI.org"}, wantErr: "lower case"},
		{name: "allowlist unicode", ctx: map[string]any{"egressAllowlist": "bücher.example"}, wantErr: "xn--"},
		{name: "allowlist bad label", ctx: map[string]any{"egressAllowlist": "-bad.example.com"}, wantErr: "labels of letters"},
		{name: "allowlist too long", ctx: map[string]any{"egressAllowlist": strings.TrimSuffix(strings.Repeat("h.example.com,", stack.MaxEgressAllowlist+1), ",")},
			wantErr: "egressAllowlist: 201 entries, at most 200"},
		{name: "caps from -c", ctx: map[string]any{"modelCapTokens": "2000000", "modelCapUsd": "12.50"}, check: func(t *testing.T, c stack.Config) {
			if c.ModelCapTokens != 2000000 || c.ModelCapUSD != "12.50" {
				t.Errorf("caps %d %q", c.ModelCapTokens, c.ModelCapUSD)
			}
		}},
		{name: "caps from cdk.json", ctx: map[string]any{"modelCapTokens": 5e6, "modelCapUsd": 7.25}, check: func(t *testing.T, c stack.Config) {
			if c.ModelCapTokens != 5000000 || c.ModelCapUSD != "7.25" {
				t.Errorf("caps %d %q", c.ModelCapTokens, c.ModelCapUSD)
			}
		}},
		{name: "token cap zero", ctx: map[string]any{"modelCapTokens": 0}, wantErr: "modelCapTokens"},
		{name: "token cap fraction", ctx: map[string]any{"modelCapTokens": 1.5}, wantErr: "modelCapTokens"},
		{name: "token cap words", ctx: map[string]any{"modelCapTokens": "a million"}, wantErr: "modelCapTokens"},
		{name: "token cap huge", ctx: map[string]any{"modelCapTokens": "2000000000000"}, wantErr: "modelCapTokens"},
		{name: "dollar cap sign", ctx: map[string]any{"modelCapUsd": "$20"}, wantErr: "modelCapUsd"},
		{name: "dollar cap negative", ctx: map[string]any{"modelCapUsd": "-1"}, wantErr: "modelCapUsd"},
		{name: "dollar cap zero", ctx: map[string]any{"modelCapUsd": "0.00"}, wantErr: "modelCapUsd"},
		{name: "dollar cap exponent", ctx: map[string]any{"modelCapUsd": "1e3"}, wantErr: "modelCapUsd"},
		{name: "dollar cap too fine", ctx: map[string]any{"modelCapUsd": "0.0000001"}, wantErr: "modelCapUsd"},
		{name: "dollar cap huge", ctx: map[string]any{"modelCapUsd": "2000000"}, wantErr: "modelCapUsd"},
		{name: "dollar cap empty", ctx: map[string]any{"modelCapUsd": " "}, wantErr: "modelCapUsd"},
		{name: "dns firewall off", ctx: map[string]any{"dnsFirewall": "false"}, check: func(t *testing.T, c stack.Config) {
			if c.DNSFirewall {
				t.Error("dnsFirewall on")
			}
		}},
		{name: "dns firewall not a bool", ctx: map[string]any{"dnsFirewall": "sometimes"}, wantErr: "dnsFirewall"},
		{name: "one az", ctx: map[string]any{"availabilityZones": 1}, check: func(t *testing.T, c stack.Config) {
			if c.AvailabilityZones != 1 {
				t.Errorf("availabilityZones %d", c.AvailabilityZones)
			}
		}},
		{name: "three azs", ctx: map[string]any{"availabilityZones": "3"}, wantErr: "availabilityZones 3: want 1 or 2"},
		{name: "repository on another port", ctx: map[string]any{"repository": "https://git.example.com:8443/h.git"}, wantErr: "repository: port 8443"},
		{name: "repository on 443", ctx: map[string]any{"repository": "https://git.example.com:443/h.git"}, check: func(t *testing.T, c stack.Config) {
			if c.GitHost() != "git.example.com" {
				t.Errorf("git host %q", c.GitHost())
			}
		}},
		{name: "base URL on another port", ctx: map[string]any{"openaiBaseUrl": "https://gw.example:8080/v1"}, wantErr: "openaiBaseUrl: port 8080"},
		{name: "provider hosts", ctx: map[string]any{"agentFamilies": "codex", "openaiBaseUrl": "https://gw.example/v1"},
			check: func(t *testing.T, c stack.Config) {
				if !slices.Equal(c.ProviderHosts(), []string{"gw.example"}) {
					t.Errorf("provider hosts %q", c.ProviderHosts())
				}
			}},
		{name: "namespace of an odd house", ctx: map[string]any{"house": "My_House-"}, check: func(t *testing.T, c stack.Config) {
			if c.EgressNamespace() != "galley-my-house.internal" {
				t.Errorf("namespace %q", c.EgressNamespace())
			}
		}},
		{name: "parkAfter defaults to 10 minutes", check: func(t *testing.T, c stack.Config) {
			if c.ParkAfter != 10*time.Minute {
				t.Errorf("parkAfter %s, want 10m", c.ParkAfter)
			}
		}},
		{name: "parkAfter 0 turns parking off", ctx: map[string]any{"parkAfter": "0"}, check: func(t *testing.T, c stack.Config) {
			if c.ParkAfter != 0 {
				t.Errorf("parkAfter %s, want 0", c.ParkAfter)
			}
		}},
		{name: "parkAfter the number 0 from cdk.json", ctx: map[string]any{"parkAfter": 0.0}, check: func(t *testing.T, c stack.Config) {
			if c.ParkAfter != 0 {
				t.Errorf("parkAfter %s, want 0", c.ParkAfter)
			}
		}},
		{name: "parkAfter a duration", ctx: map[string]any{"parkAfter": "90s"}, check: func(t *testing.T, c stack.Config) {
			if c.ParkAfter != 90*time.Second {
				t.Errorf("parkAfter %s, want 1m30s", c.ParkAfter)
			}
		}},
		{name: "parkAfter below a second", ctx: map[string]any{"parkAfter": "500ms"}, wantErr: "parkAfter"},
		{name: "parkAfter not a duration", ctx: map[string]any{"parkAfter": "ten minutes"}, wantErr: "parkAfter"},
		{name: "parkAfter a bare number", ctx: map[string]any{"parkAfter": "600"}, wantErr: "parkAfter"},
		{name: "a family listed twice", ctx: map[string]any{"agentFamilies": "claude,claude"}, wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Every case has a repository unless it sets its own.
			ctx := map[string]any{"repository": "https://git.example.com/house.git"}
			for k, v := range tt.ctx {
				ctx[k] = v
			}
			c, err := stack.FromContext(func(k string) any { return ctx[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// TestRepositoryRequired: with no repository at all the configuration is
// refused, and the app makes only a placeholder stack whose errors fail
// synth and deploy (and whose rule CloudFormation refuses), while a wrong
// value beside the missing repository is still an error at once.
func TestRepositoryRequired(t *testing.T) {
	if _, err := stack.FromContext(func(string) any { return nil }); err == nil || !strings.Contains(err.Error(), "repository: required") {
		t.Errorf("no context: err %v, want repository required", err)
	}
	s, err := synth(map[string]any{"house": "norepo"})
	if err != nil {
		t.Fatalf("synth without repository: %v, want a placeholder stack", err)
	}
	assertPlaceholder(t, s, "galley-norepo", "repository: required")
	if _, err := synth(map[string]any{"house": "norepo", "maxWorkers": 0}); err == nil || !strings.Contains(err.Error(), "maxWorkers") {
		t.Errorf("synth without repository and with maxWorkers 0: err %v, want the maxWorkers error", err)
	}
	cfg := stack.Defaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "repository") {
		t.Errorf("Defaults().Validate() = %v, want repository required", err)
	}
}

// TestFunctionsNotBuilt: with the functions not built, the app makes the
// placeholder stack, naming the build that is missing.
func TestFunctionsNotBuilt(t *testing.T) {
	s, err := synth(map[string]any{"house": "nofns", "repository": "https://git.example.com/house.git",
		"assetDir": filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatalf("synth without the functions: %v, want a placeholder stack", err)
	}
	assertPlaceholder(t, s, "galley-nofns", "make lambdas")
}

// assertPlaceholder checks that s is the placeholder stack: the galley
// stack's name, an error annotation containing why, the failing rule, and
// no resource that a deploy could put in place of the real ones.
func assertPlaceholder(t *testing.T, s *synthed, name, why string) {
	t.Helper()
	if got := *s.g.Stack.StackName(); got != name {
		t.Errorf("placeholder stack name %q, want %q", got, name)
	}
	if !slices.ContainsFunc(s.g.Missing, func(m string) bool { return strings.Contains(m, why) }) {
		t.Errorf("Missing = %q, want one containing %q", s.g.Missing, why)
	}
	check(t, "the placeholder's error annotation", func() {
		assertions.Annotations_FromStack(s.g.Stack).HasError(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String(regexp.QuoteMeta(why))))
	})
	rule, _ := s.json["Rules"].(map[string]any)[stack.PlaceholderRule].(map[string]any)
	if rule == nil {
		t.Fatalf("placeholder template has no rule %s: %v", stack.PlaceholderRule, s.json["Rules"])
	}
	if a := list(rule["Assertions"]); len(a) != 1 || !jsonEq(a[0].(map[string]any)["Assert"], map[string]any{"Fn::Equals": []any{"placeholder", "deployable"}}) {
		t.Errorf("placeholder rule asserts %v, want an assertion that always fails", rule["Assertions"])
	}
	for id, r := range s.json["Resources"].(map[string]any) {
		if typ := r.(map[string]any)["Type"]; typ != "AWS::CDK::Metadata" && typ != "AWS::CloudFormation::WaitConditionHandle" {
			t.Errorf("placeholder template has resource %s (%v)", id, typ)
		}
	}
}
