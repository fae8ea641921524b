package stack_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// render resolves the few intrinsics the containers' environment uses
// (Fn::Join, Fn::Select, Fn::Split, Ref of pseudo parameters, Fn::GetAtt)
// against values the caller gives, by "Ref" name or "<id>.<attribute>".
func render(t *testing.T, v any, values map[string]string) string {
	t.Helper()
	switch v := v.(type) {
	case string:
		return v
	case map[string]any:
		for fn, arg := range v {
			switch fn {
			case "Ref":
				if s, ok := values[arg.(string)]; ok {
					return s
				}
			case "Fn::GetAtt":
				a := arg.([]any)
				if s, ok := values[fmt.Sprint(a[0])+"."+fmt.Sprint(a[1])]; ok {
					return s
				}
			case "Fn::Join":
				a := arg.([]any)
				var parts []string
				for _, p := range list(a[1]) {
					parts = append(parts, render(t, p, values))
				}
				return strings.Join(parts, a[0].(string))
			case "Fn::Select":
				a := arg.([]any)
				split := a[1].(map[string]any)["Fn::Split"].([]any)
				parts := strings.Split(render(t, split[1], values), split[0].(string))
				return parts[int(a[0].(float64))]
			}
		}
	}
	t.Fatalf("cannot render %v", v)
	return ""
}

// containerOf is a task definition's one container, with its environment
// as a map and its secrets by name.
func (s *synthed) containerOf(t *testing.T, tdID string) (c map[string]any, env map[string]any, secrets map[string]any) {
	t.Helper()
	cs := list(props(s.resources("AWS::ECS::TaskDefinition")[tdID])["ContainerDefinitions"])
	if len(cs) != 1 {
		t.Fatalf("task definition %s has %d containers, want 1", tdID, len(cs))
	}
	c = cs[0].(map[string]any)
	env, secrets = map[string]any{}, map[string]any{}
	for _, kv := range list(c["Environment"]) {
		env[fmt.Sprint(kv.(map[string]any)["Name"])] = kv.(map[string]any)["Value"]
	}
	for _, kv := range list(c["Secrets"]) {
		secrets[fmt.Sprint(kv.(map[string]any)["Name"])] = kv.(map[string]any)["ValueFrom"]
	}
	return c, env, secrets
}

// TestEgressProxyService: the proxy is one Fargate task (ARM64, 0.25 vCPU,
// 512 MiB) of an ECS service in a cluster of its own, in the public
// subnets with a public IP, behind its own group, registered as an A
// record "egress" in the Cloud Map namespace that EgressHost names. It
// runs the worker image as `galley-worker egress-proxy`, as nobody, with
// no capability and a read-only root, its log in a group of its own, its
// task role with no permission, and the egress secret as its one secret.
func TestEgressProxyService(t *testing.T) {
	s := deployment(t)
	services := s.resources("AWS::ECS::Service")
	if len(services) != 1 {
		t.Fatalf("%d ECS services, want the egress proxy's", len(services))
	}
	svc := props(services[s.id(s.g.EgressService)])
	if svc["DesiredCount"] != 1.0 || svc["LaunchType"] != "FARGATE" || !jsonEq(svc["Cluster"], ref(s.id(s.g.EgressCluster))) {
		t.Errorf("service %v %v %v, want one Fargate task in the egress cluster", svc["DesiredCount"], svc["LaunchType"], svc["Cluster"])
	}
	if s.id(s.g.EgressCluster) == s.id(s.g.Cluster) {
		t.Error("the proxy runs in the worker cluster")
	}
	var egressSubnets []any
	for _, id := range s.subnetIDs(stack.EgressSubnetGroup) {
		egressSubnets = append(egressSubnets, ref(id))
	}
	wantNet := map[string]any{"AwsvpcConfiguration": map[string]any{"AssignPublicIp": "ENABLED",
		"SecurityGroups": []any{groupID(s.id(s.g.EgressSG))}, "Subnets": egressSubnets}}
	if !jsonEq(svc["NetworkConfiguration"], wantNet) {
		t.Errorf("service network %v, want %v", svc["NetworkConfiguration"], wantNet)
	}
	dc := svc["DeploymentConfiguration"].(map[string]any)
	if dc["MinimumHealthyPercent"] != 100.0 || dc["MaximumPercent"] != 200.0 {
		t.Errorf("deployment %v: a replacement must start before the old task stops", dc)
	}
	// Discovery: an A record in the namespace, which the workers resolve.
	regs := list(svc["ServiceRegistries"])
	if len(regs) != 1 {
		t.Fatalf("service registries %v", regs)
	}
	cmID := regs[0].(map[string]any)["RegistryArn"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	cm := props(s.resources("AWS::ServiceDiscovery::Service")[cmID])
	nsID := s.id(s.g.EgressNamespace)
	if cm["Name"] != stack.EgressService || !jsonEq(cm["DnsConfig"].(map[string]any)["DnsRecords"], []any{map[string]any{"TTL": 10.0, "Type": "A"}}) ||
		!jsonEq(cm["NamespaceId"], map[string]any{"Fn::GetAtt": []any{nsID, "Id"}}) {
		t.Errorf("Cloud Map service %v, want an A record %q with a short TTL in the namespace", cm, stack.EgressService)
	}
	ns := props(s.resources("AWS::ServiceDiscovery::PrivateDnsNamespace")[nsID])
	if ns["Name"] != "galley-kitchen-1.internal" || !jsonEq(ns["Vpc"], ref(s.id(s.g.Vpc))) {
		t.Errorf("namespace %v, want galley-kitchen-1.internal in the VPC", ns)
	}
	if got := s.g.Config.EgressHost(); got != stack.EgressService+"."+fmt.Sprint(ns["Name"]) {
		t.Errorf("EgressHost %s is not the service's name in the namespace", got)
	}

	tdID := s.id(s.g.EgressTaskDefinition)
	td := props(s.resources("AWS::ECS::TaskDefinition")[tdID])
	if td["Cpu"] != "256" || td["Memory"] != "512" || !jsonEq(td["RuntimePlatform"], map[string]any{"CpuArchitecture": "ARM64", "OperatingSystemFamily": "LINUX"}) {
		t.Errorf("proxy task %v %v %v, want 256/512 ARM64", td["Cpu"], td["Memory"], td["RuntimePlatform"])
	}
	if !jsonEq(td["TaskRoleArn"], getArn(s.id(s.g.EgressTaskRole))) || !jsonEq(td["ExecutionRoleArn"], getArn(s.id(s.g.EgressExecutionRole))) {
		t.Errorf("proxy roles %v %v", td["TaskRoleArn"], td["ExecutionRoleArn"])
	}
	c, env, secrets := s.containerOf(t, tdID)
	worker, _, _ := s.containerOf(t, s.id(s.g.TaskDefinition))
	if !jsonEq(c["Image"], worker["Image"]) {
		t.Errorf("proxy image %v, want the worker's %v", c["Image"], worker["Image"])
	}
	if !jsonEq(c["Command"], []any{"egress-proxy"}) || c["User"] != "65534:65534" || c["ReadonlyRootFilesystem"] != true ||
		!jsonEq(c["LinuxParameters"], map[string]any{"Capabilities": map[string]any{"Drop": []any{"ALL"}}}) {
		t.Errorf("proxy container %v %v %v %v, want egress-proxy as nobody, read-only, no capability",
			c["Command"], c["User"], c["ReadonlyRootFilesystem"], c["LinuxParameters"])
	}
	if !jsonEq(c["PortMappings"], []any{map[string]any{"ContainerPort": 3128.0, "Protocol": "tcp"}}) {
		t.Errorf("proxy ports %v", c["PortMappings"])
	}
	logs := c["LogConfiguration"].(map[string]any)["Options"].(map[string]any)["awslogs-group"]
	if !jsonEq(logs, ref(s.id(s.g.EgressLogs))) || s.id(s.g.EgressLogs) == s.id(s.g.WorkerLogs) {
		t.Errorf("proxy logs to %v, want a group of its own", logs)
	}
	if !jsonEq(secrets, map[string]any{contract.EnvEgressSecret: ref(s.id(s.g.EgressSecret))}) {
		t.Errorf("proxy secrets %v, want only %s", secrets, contract.EnvEgressSecret)
	}
	names := slices.Sorted(maps.Keys(env))
	if want := []string{contract.EnvEgressAllow, contract.EnvEgressHarnessAllow, contract.EnvEgressListen}; !slices.Equal(names, want) {
		t.Errorf("proxy environment %v, want %v", names, want)
	}
	if env[contract.EnvEgressListen] != ":3128" || env[contract.EnvEgressAllow] != "" {
		t.Errorf("proxy listens on %v, allows %q, want :3128 and no host by default", env[contract.EnvEgressListen], env[contract.EnvEgressAllow])
	}
	harness := render(t, env[contract.EnvEgressHarnessAllow], map[string]string{
		s.id(s.g.API) + ".ApiEndpoint": "https://abc123.execute-api.eu-west-1.amazonaws.com",
		"AWS::Region":                  "eu-west-1", "AWS::URLSuffix": "amazonaws.com",
	})
	if want := "abc123.execute-api.eu-west-1.amazonaws.com,git.example.com,api.anthropic.com,api.openai.com,sqs.eu-west-1.amazonaws.com"; harness != want {
		t.Errorf("%s = %q, want %q", contract.EnvEgressHarnessAllow, harness, want)
	}
	// The proxy's task role holds nothing at all.
	if sts := s.statements(s.id(s.g.EgressTaskRole)); len(sts) != 0 {
		t.Errorf("proxy task role may %+v", sts)
	}
}

// TestWorkerEgressEnvironment: the worker's container has its way out
// (the proxy's URL), the house's allowlist, the network mode and the
// egress secret, and no model cap unless context sets one; with the
// options, the allowlist and caps reach it, the proxy's lists follow the
// custom domain, the base URLs and the families, and the DNS Firewall the
// allowlist.
func TestWorkerEgressEnvironment(t *testing.T) {
	d := deployment(t)
	_, env, secrets := d.containerOf(t, d.id(d.g.TaskDefinition))
	want := map[string]any{
		contract.EnvEgressUpstream: "http://egress.galley-kitchen-1.internal:3128",
		contract.EnvEgressAllow:    "",
		contract.EnvAgentNetwork:   "task",
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("worker %s = %v (set %v), want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{contract.EnvModelCapTokens, contract.EnvModelCapUSD} {
		if v, ok := env[k]; ok {
			t.Errorf("worker %s = %v without a cap in context", k, v)
		}
	}
	if !jsonEq(secrets[contract.EnvEgressSecret], ref(d.id(d.g.EgressSecret))) {
		t.Errorf("worker secret %s = %v", contract.EnvEgressSecret, secrets[contract.EnvEgressSecret])
	}

	s, err := synth(map[string]any{"house": "caps", "repository": "https://git.example.com/house.git",
		"egressAllowlist": []any{"pypi.org", "*.pythonhosted.org"}, "modelCapTokens": "2500000", "modelCapUsd": "12.50",
		"agentFamilies": "codex", "openaiBaseUrl": "https://llm.example/openai/v1",
		"domainName": "galley.example.com", "certificateArn": "arn:aws:acm:us-east-1:111111111111:certificate/abc"})
	if err != nil {
		t.Fatal(err)
	}
	_, env, _ = s.containerOf(t, s.id(s.g.TaskDefinition))
	want = map[string]any{
		contract.EnvEgressUpstream: "http://egress.galley-caps.internal:3128",
		contract.EnvEgressAllow:    "pypi.org,*.pythonhosted.org",
		contract.EnvModelCapTokens: "2500000",
		contract.EnvModelCapUSD:    "12.50",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("worker %s = %v, want %q", k, env[k], v)
		}
	}
	_, penv, _ := s.containerOf(t, s.id(s.g.EgressTaskDefinition))
	if penv[contract.EnvEgressAllow] != "pypi.org,*.pythonhosted.org" {
		t.Errorf("proxy %s = %v", contract.EnvEgressAllow, penv[contract.EnvEgressAllow])
	}
	harness := render(t, penv[contract.EnvEgressHarnessAllow], map[string]string{"AWS::Region": "us-east-1", "AWS::URLSuffix": "amazonaws.com"})
	if want := "galley.example.com,git.example.com,llm.example,sqs.us-east-1.amazonaws.com"; harness != want {
		t.Errorf("proxy %s = %q, want %q (the custom domain, the git host, the codex gateway, SQS)", contract.EnvEgressHarnessAllow, harness, want)
	}
	var names []string
	for _, n := range s.g.DNSAllowList() {
		names = append(names, *n)
	}
	if !slices.Contains(names, "pypi.org") || !slices.Contains(names, "*.pythonhosted.org") {
		t.Errorf("DNS allow list %v lacks the allowlist", names)
	}
	// A bad value is refused before anything is built.
	if _, err := synth(map[string]any{"house": "bad", "repository": "https://git.example.com/house.git", "egressAllowlist": "pypi.org:443"}); err == nil ||
		!strings.Contains(err.Error(), `egressAllowlist: entry "pypi.org:443"`) {
		t.Errorf("synth with a port in the allowlist: err %v, want one naming egressAllowlist", err)
	}
	if _, err := synth(map[string]any{"house": "bad", "repository": "https://git.example.com/house.git", "modelCapUsd": "lots"}); err == nil ||
		!strings.Contains(err.Error(), "modelCapUsd") {
		t.Errorf("synth with modelCapUsd=lots: err %v, want one naming modelCapUsd", err)
	}
}
