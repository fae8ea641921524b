package stack_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/galley-run/galley/infra/stack"
	"github.com/galley-run/galley/pkg/contract"
)

// groupID is how the template names a security group's ID.
func groupID(id string) map[string]any { return map[string]any{"Fn::GetAtt": []any{id, "GroupId"}} }

// rule is one security group rule, the peer written as the template has
// it (a CIDR, a group's GroupId, a prefix list's ID).
type rule struct {
	Protocol string
	From, To float64
	Peer     string
}

func (r rule) String() string { return fmt.Sprintf("%s %v-%v %s", r.Protocol, r.From, r.To, r.Peer) }

func peerOf(p map[string]any, keys ...string) string {
	for _, k := range keys {
		if v, ok := p[k]; ok {
			raw := fmt.Sprint(v)
			if m, ok := v.(map[string]any); ok {
				raw = fmt.Sprint(m)
			}
			return k + "=" + raw
		}
	}
	return "?"
}

func ruleOf(p map[string]any, keys ...string) rule {
	from, _ := p["FromPort"].(float64)
	to, _ := p["ToPort"].(float64)
	return rule{Protocol: fmt.Sprint(p["IpProtocol"]), From: from, To: to, Peer: peerOf(p, keys...)}
}

var (
	egressPeers  = []string{"CidrIp", "CidrIpv6", "DestinationSecurityGroupId", "DestinationPrefixListId"}
	ingressPeers = []string{"CidrIp", "CidrIpv6", "SourceSecurityGroupId", "SourcePrefixListId"}
)

// egressOf is every egress rule of a security group: inline in the
// group, and the resources of their own that name it. inline says which
// were inline.
func (s *synthed) egressOf(sgID string) (all, inline []rule) {
	for _, e := range list(props(s.resources("AWS::EC2::SecurityGroup")[sgID])["SecurityGroupEgress"]) {
		r := ruleOf(e.(map[string]any), egressPeers...)
		all, inline = append(all, r), append(inline, r)
	}
	for _, e := range s.resources("AWS::EC2::SecurityGroupEgress") {
		if jsonEq(props(e)["GroupId"], groupID(sgID)) {
			all = append(all, ruleOf(props(e), egressPeers...))
		}
	}
	sortRules(all)
	return all, inline
}

// ingressOf is every ingress rule of a security group.
func (s *synthed) ingressOf(sgID string) []rule {
	var out []rule
	for _, e := range list(props(s.resources("AWS::EC2::SecurityGroup")[sgID])["SecurityGroupIngress"]) {
		out = append(out, ruleOf(e.(map[string]any), ingressPeers...))
	}
	for _, e := range s.resources("AWS::EC2::SecurityGroupIngress") {
		if jsonEq(props(e)["GroupId"], groupID(sgID)) {
			out = append(out, ruleOf(props(e), ingressPeers...))
		}
	}
	sortRules(out)
	return out
}

func sortRules(rs []rule) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].String() < rs[j].String() })
}

func sgPeer(key, sgID string) string { return key + "=" + fmt.Sprint(groupID(sgID)) }

// noTraffic is CDK's inline placeholder egress rule that matches nothing.
var noTraffic = rule{Protocol: "icmp", From: 252, To: 86, Peer: "CidrIp=255.255.255.255/32"}

// routeTableOf is the route table a subnet is associated with.
func (s *synthed) routeTableOf(subnetID string) string {
	for _, a := range s.resources("AWS::EC2::SubnetRouteTableAssociation") {
		if jsonEq(props(a)["SubnetId"], ref(subnetID)) {
			rt, _ := props(a)["RouteTableId"].(map[string]any)["Ref"].(string)
			return rt
		}
	}
	return ""
}

// routesOf are the routes of a route table.
func (s *synthed) routesOf(rtID string) []map[string]any {
	var out []map[string]any
	for _, r := range s.resources("AWS::EC2::Route") {
		if jsonEq(props(r)["RouteTableId"], ref(rtID)) {
			out = append(out, props(r))
		}
	}
	return out
}

func (s *synthed) subnetIDs(group string) []string {
	var out []string
	for id, sn := range s.resources("AWS::EC2::Subnet") {
		for _, tag := range list(props(sn)["Tags"]) {
			if tag := tag.(map[string]any); tag["Key"] == "aws-cdk:subnet-name" && tag["Value"] == group {
				out = append(out, id)
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestWorkerSubnetsHaveNoRouteOut: the workers' subnets have no route to
// an internet or NAT gateway (no route at all: the S3 gateway endpoint's
// is the only way anywhere, and it is an endpoint's), assign no public
// IP, and are the subnets RunTask gets, without a public IP; the egress
// subnets, the control, do route to the internet gateway.
func TestWorkerSubnetsHaveNoRouteOut(t *testing.T) {
	s := deployment(t)
	check(t, "no NAT gateway", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0)) })
	check(t, "no egress-only gateway", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::EgressOnlyInternetGateway"), jsii.Number(0))
	})
	workers, egress := s.subnetIDs(stack.WorkerSubnetGroup), s.subnetIDs(stack.EgressSubnetGroup)
	if len(workers) != 2 || len(egress) != 2 {
		t.Fatalf("worker subnets %v, egress subnets %v: want two of each", workers, egress)
	}
	for _, id := range workers {
		sn := props(s.resources("AWS::EC2::Subnet")[id])
		if sn["MapPublicIpOnLaunch"] != false {
			t.Errorf("worker subnet %s maps public IPs: %v", id, sn["MapPublicIpOnLaunch"])
		}
		rt := s.routeTableOf(id)
		if rt == "" {
			t.Fatalf("worker subnet %s has no route table", id)
		}
		for _, r := range s.routesOf(rt) {
			t.Errorf("worker subnet %s has a route %v", id, r)
		}
		// Other route tables may be shared: none of a worker subnet's
		// holds a gateway by any other resource either.
		for _, typ := range []string{"AWS::EC2::VPCGatewayAttachment", "AWS::EC2::TransitGatewayRouteTableAssociation"} {
			for gid, g := range s.resources(typ) {
				if jsonEq(props(g)["RouteTableId"], ref(rt)) {
					t.Errorf("worker route table %s is attached to %s %s", rt, typ, gid)
				}
			}
		}
	}
	igw := ""
	for id := range s.resources("AWS::EC2::InternetGateway") {
		igw = id
	}
	for _, id := range egress {
		routes := s.routesOf(s.routeTableOf(id))
		if len(routes) != 1 || routes[0]["DestinationCidrBlock"] != "0.0.0.0/0" || !jsonEq(routes[0]["GatewayId"], ref(igw)) {
			t.Errorf("egress subnet %s routes %v, want 0.0.0.0/0 to the internet gateway %s", id, routes, igw)
		}
	}
	// RunTask puts workers in the worker subnets, without a public IP.
	var refs []string
	for _, id := range workers {
		refs = append(refs, fmt.Sprint(ref(id)))
	}
	for _, name := range contract.FunctionNames {
		env := props(s.resources("AWS::Lambda::Function")[s.id(s.g.Functions[name])])["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env[contract.EnvAssignPublicIP] != "DISABLED" {
			t.Errorf("%s: %s = %v, want DISABLED", name, contract.EnvAssignPublicIP, env[contract.EnvAssignPublicIP])
		}
		values := map[string]string{}
		for _, id := range append(workers, egress...) {
			values[id] = fmt.Sprint(ref(id))
		}
		got := strings.Split(render(t, env[contract.EnvSubnets], values), ",")
		sort.Strings(got)
		if !slices.Equal(got, refs) {
			t.Errorf("%s: %s names %v, want the worker subnets %v", name, contract.EnvSubnets, got, refs)
		}
	}
}

// TestWorkerSecurityGroupLetsOutOnlyWhatItNeeds: the workers' group
// admits nothing, and lets out exactly the egress proxy's port (to the
// proxy's group), HTTPS to the endpoints' group, HTTPS to S3's prefix
// list (the gateway endpoint: ECR's layers) and NFS to the workspaces'
// group; nothing to 0.0.0.0/0 or ::/0. Its one inline rule matches no
// traffic, which keeps EC2 from giving the group its default all-out
// rule. The proxy's group, the control, lets HTTPS and HTTP out to
// anywhere and admits the workers on its port only.
func TestWorkerSecurityGroupLetsOutOnlyWhatItNeeds(t *testing.T) {
	s := deployment(t)
	worker, proxy, endpoints := s.id(s.g.WorkerSG), s.id(s.g.EgressSG), s.id(s.g.EndpointsSG)
	workspaces := s.id(s.g.WorkspacesSG)
	all, inline := s.egressOf(worker)
	want := []rule{
		{"tcp", 2049, 2049, sgPeer("DestinationSecurityGroupId", workspaces)},
		{"tcp", contract.EgressPort, contract.EgressPort, sgPeer("DestinationSecurityGroupId", proxy)},
		{"tcp", 443, 443, sgPeer("DestinationSecurityGroupId", endpoints)},
		{"tcp", 443, 443, "DestinationPrefixListId=" + fmt.Sprint(map[string]any{"Fn::GetAtt": []any{s.id(s.g.S3PrefixList), "PrefixListId"}})},
		noTraffic,
	}
	sortRules(want)
	if !slices.Equal(all, want) {
		t.Errorf("worker egress\n got %v\nwant %v", all, want)
	}
	if !slices.Equal(inline, []rule{noTraffic}) {
		t.Errorf("worker inline egress %v, want only the rule that matches nothing (else EC2 adds all traffic out)", inline)
	}
	for _, r := range all {
		if strings.Contains(r.Peer, "0.0.0.0/0") || strings.Contains(r.Peer, "::/0") || r.Protocol == "-1" {
			t.Errorf("worker egress %v reaches anywhere", r)
		}
	}
	if in := s.ingressOf(worker); len(in) != 0 {
		t.Errorf("worker group admits %v", in)
	}

	// The proxy: in from the workers on its port, out HTTPS and HTTP.
	if in := s.ingressOf(proxy); !slices.Equal(in, []rule{{"tcp", contract.EgressPort, contract.EgressPort, sgPeer("SourceSecurityGroupId", worker)}}) {
		t.Errorf("proxy ingress %v, want only the workers on %d", in, contract.EgressPort)
	}
	out, _ := s.egressOf(proxy)
	wantOut := []rule{{"tcp", 443, 443, "CidrIp=0.0.0.0/0"}, {"tcp", 80, 80, "CidrIp=0.0.0.0/0"}}
	sortRules(wantOut)
	if !slices.Equal(out, wantOut) {
		t.Errorf("proxy egress %v, want %v", out, wantOut)
	}
	// The endpoints: HTTPS in from the workers and the proxy's task, and
	// nothing out.
	in := s.ingressOf(endpoints)
	wantIn := []rule{{"tcp", 443, 443, sgPeer("SourceSecurityGroupId", worker)}, {"tcp", 443, 443, sgPeer("SourceSecurityGroupId", proxy)}}
	sortRules(wantIn)
	if !slices.Equal(in, wantIn) {
		t.Errorf("endpoints ingress %v, want %v", in, wantIn)
	}
	if out, _ := s.egressOf(endpoints); !slices.Equal(out, []rule{noTraffic}) {
		t.Errorf("endpoints egress %v, want none", out)
	}
	// Every security group rule's description is one EC2 takes (letters,
	// digits, spaces and ._-:/()#,@[]+=&;{}!$*).
	for _, typ := range []string{"AWS::EC2::SecurityGroup", "AWS::EC2::SecurityGroupEgress", "AWS::EC2::SecurityGroupIngress"} {
		for id, r := range s.resources(typ) {
			descs := []any{props(r)["Description"], props(r)["GroupDescription"]}
			for _, e := range append(list(props(r)["SecurityGroupEgress"]), list(props(r)["SecurityGroupIngress"])...) {
				descs = append(descs, e.(map[string]any)["Description"])
			}
			for _, d := range descs {
				if d, ok := d.(string); ok && strings.Trim(d, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._-:/()#,@[]+=&;{}!$*") != "" {
					t.Errorf("%s: description %q has a character EC2 refuses", id, d)
				}
			}
		}
	}
}

// endpointPolicy is an endpoint's one statement per Sid.
func endpointPolicy(t *testing.T, ep map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	doc, _ := props(ep)["PolicyDocument"].(map[string]any)
	if doc == nil {
		t.Fatalf("endpoint %v has no policy", props(ep)["ServiceName"])
	}
	for _, st := range list(doc["Statement"]) {
		st := st.(map[string]any)
		out[fmt.Sprint(st["Sid"])] = st
	}
	return out
}

// TestEndpointsAndTheirPolicies: an interface endpoint each for ECR's API
// and registry, CloudWatch Logs and Secrets Manager (private DNS, in the
// worker subnets, behind the endpoints' group) and the S3 gateway
// endpoint on the worker subnets' route tables; none for SQS, STS or ECS.
// Each policy lets only the two execution roles (the workers' and the
// proxy's) do only what ECS does for a task, on this stack's resources
// only: pull the worker image, write the two tasks' log groups, read the
// tasks' secrets; S3 reads ECR's layer bucket, nothing else.
func TestEndpointsAndTheirPolicies(t *testing.T) {
	s := deployment(t)
	eps := s.resources("AWS::EC2::VPCEndpoint")
	byService := map[string]map[string]any{}
	for _, ep := range eps {
		parts := props(ep)["ServiceName"].(map[string]any)["Fn::Join"].([]any)[1].([]any)
		byService[fmt.Sprint(parts[len(parts)-1])] = ep
	}
	var services []string
	for k := range byService {
		services = append(services, k)
	}
	sort.Strings(services)
	if want := []string{".ecr.api", ".ecr.dkr", ".logs", ".s3", ".secretsmanager"}; !slices.Equal(services, want) {
		t.Fatalf("endpoints for %v, want exactly %v (SQS goes through the proxy; Fargate needs no ECS or STS endpoint)", services, want)
	}
	var workerSubnets []any
	for _, id := range s.subnetIDs(stack.WorkerSubnetGroup) {
		workerSubnets = append(workerSubnets, ref(id))
	}
	principals := map[string]any{"AWS": []any{getArn(s.id(s.g.EgressExecutionRole)), getArn(s.id(s.g.ExecutionRole))}}
	for _, svc := range []string{".ecr.api", ".ecr.dkr", ".logs", ".secretsmanager"} {
		p := props(byService[svc])
		if p["VpcEndpointType"] != "Interface" || p["PrivateDnsEnabled"] != true ||
			!jsonEq(p["SubnetIds"], workerSubnets) || !jsonEq(p["SecurityGroupIds"], []any{groupID(s.id(s.g.EndpointsSG))}) {
			t.Errorf("%s: %v, want an interface endpoint with private DNS in the worker subnets behind the endpoints' group", svc, p)
		}
		for sid, st := range endpointPolicy(t, byService[svc]) {
			if st["Effect"] != "Allow" || !jsonEq(st["Principal"], principals) || st["Condition"] != nil {
				t.Errorf("%s %s: %v by %v, want Allow to the two execution roles only", svc, sid, st["Effect"], st["Principal"])
			}
		}
	}
	repo := map[string]any{"Fn::Join": []any{"", []any{"arn:", ref("AWS::Partition"), ":ecr:", ref("AWS::Region"), ":", ref("AWS::AccountId"),
		":repository/", map[string]any{"Fn::Sub": "cdk-hnb659fds-container-assets-${AWS::AccountId}-${AWS::Region}"}}}}
	ecr := map[string][2]any{
		"GetAuthorizationToken": {"ecr:GetAuthorizationToken", "*"},
		"PullTheWorkerImage":    {[]any{"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}, repo},
	}
	wants := map[string]map[string][2]any{
		".ecr.api": ecr, ".ecr.dkr": ecr,
		".logs": {"WriteTheTasksLogs": {[]any{"logs:CreateLogStream", "logs:PutLogEvents"},
			[]any{getArn(s.id(s.g.EgressLogs)), getArn(s.id(s.g.WorkerLogs))}}},
		".secretsmanager": {"ReadTheTasksSecrets": {[]any{"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"},
			[]any{ref(s.id(s.g.ProviderSecrets[stack.SecretAnthropic])), ref(s.id(s.g.EgressSecret)),
				ref(s.id(s.g.ProviderSecrets[stack.SecretGit])), ref(s.id(s.g.ProviderSecrets[stack.SecretOpenAI]))}}},
	}
	for svc, want := range wants {
		got := endpointPolicy(t, byService[svc])
		if len(got) != len(want) {
			t.Errorf("%s: statements %v, want %v", svc, got, want)
		}
		for sid, w := range want {
			if st := got[sid]; !jsonEq(st["Action"], w[0]) || !jsonEq(st["Resource"], w[1]) {
				t.Errorf("%s %s: %v on %v, want %v on %v", svc, sid, st["Action"], st["Resource"], w[0], w[1])
			}
		}
	}
	// No secret of the functions (kitchn's token, the signing key, the
	// operator token) through the endpoint: ECS reads only the tasks'.
	s3 := props(byService[".s3"])
	var workerTables []any
	for _, id := range s.subnetIDs(stack.WorkerSubnetGroup) {
		workerTables = append(workerTables, ref(s.routeTableOf(id)))
	}
	if s3["VpcEndpointType"] != "Gateway" || !jsonEq(s3["RouteTableIds"], workerTables) {
		t.Errorf("S3 endpoint %v, want a gateway endpoint on the worker subnets' route tables only", s3)
	}
	layers := map[string]any{"Fn::Join": []any{"", []any{"arn:", ref("AWS::Partition"), ":s3:::prod-", ref("AWS::Region"), "-starport-layer-bucket/*"}}}
	got := endpointPolicy(t, byService[".s3"])
	if st := got["ReadEcrLayers"]; len(got) != 3 || st["Effect"] != "Allow" || st["Action"] != "s3:GetObject" || !jsonEq(st["Resource"], layers) {
		t.Errorf("S3 endpoint policy %v, want s3:GetObject on ECR's layer bucket and the snapshots' statements (TestSnapshotsBucket) only", got)
	}
}

// TestS3PrefixListLookup: the prefix list the workers' group sends layers
// to is looked up at deploy by the region's name, by a provider that may
// only describe managed prefix lists, and whose code is the handler in
// s3prefixlist/ (it runs on CDK's entrypoint, which answers
// CloudFormation).
func TestS3PrefixListLookup(t *testing.T) {
	s := deployment(t)
	cr := s.resources(stack.S3PrefixListType)
	if len(cr) != 1 {
		t.Fatalf("%d %s resources, want 1", len(cr), stack.S3PrefixListType)
	}
	p := props(cr[s.id(s.g.S3PrefixList)])
	wantName := map[string]any{"Fn::Join": []any{"", []any{"com.amazonaws.", ref("AWS::Region"), ".s3"}}}
	if !jsonEq(p["PrefixListName"], wantName) {
		t.Errorf("prefix list name %v, want com.amazonaws.<region>.s3", p["PrefixListName"])
	}
	fnID, _ := p["ServiceToken"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	fn := props(s.resources("AWS::Lambda::Function")[fnID])
	roleID, _ := fn["Role"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
	role := props(s.resources("AWS::IAM::Role")[roleID])
	var actions []any
	for _, pol := range list(role["Policies"]) {
		for _, st := range list(pol.(map[string]any)["PolicyDocument"].(map[string]any)["Statement"]) {
			actions = append(actions, st.(map[string]any)["Action"])
		}
	}
	if !jsonEq(actions, []any{"ec2:DescribeManagedPrefixLists"}) {
		t.Errorf("the provider's role may %v, want ec2:DescribeManagedPrefixLists only", actions)
	}
	if fn["Handler"] != "__entrypoint__.handler" || !strings.HasPrefix(fmt.Sprint(fn["Runtime"]), "nodejs") {
		t.Errorf("provider %v %v, want CDK's entrypoint on Node.js", fn["Handler"], fn["Runtime"])
	}
	// The staged code is the handler's.
	src, err := os.ReadFile(filepath.Join("s3prefixlist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := fn["Code"].(map[string]any)["S3Key"].(string)
	staged, err := os.ReadFile(filepath.Join(*awscdk.Stage_Of(s.g.Stack).Outdir(), "asset."+strings.TrimSuffix(key, ".zip"), "index.js"))
	if err != nil || string(staged) != string(src) {
		t.Errorf("the staged handler (%v) is not s3prefixlist/index.js", err)
	}
	if !strings.Contains(string(src), "DescribeManagedPrefixListsCommand") || !strings.Contains(string(src), "PrefixListId") {
		t.Errorf("the handler does not look the prefix list up")
	}
}

// TestDNSFirewall: by default a rule group on the VPC allows the names the
// deployment needs and the house's allowlist (trusting their CNAME
// chains), then blocks every other name with NXDOMAIN; dnsFirewall=false
// makes none.
func TestDNSFirewall(t *testing.T) {
	s, err := synth(map[string]any{"house": "dns", "repository": "https://git.example.com/house.git",
		"egressAllowlist": "pypi.org,*.pythonhosted.org", "agentFamilies": "claude", "anthropicBaseUrl": "https://llm.example/anthropic",
		"domainName": "galley.example.com", "certificateArn": "arn:aws:acm:us-east-1:111111111111:certificate/abc"})
	if err != nil {
		t.Fatal(err)
	}
	lists := s.resources("AWS::Route53Resolver::FirewallDomainList")
	groups := s.resources("AWS::Route53Resolver::FirewallRuleGroup")
	assocs := s.resources("AWS::Route53Resolver::FirewallRuleGroupAssociation")
	if len(lists) != 2 || len(groups) != 1 || len(assocs) != 1 {
		t.Fatalf("%d domain lists, %d rule groups, %d associations, want 2, 1, 1", len(lists), len(groups), len(assocs))
	}
	groupID := s.id(s.g.DNSFirewall)
	rules := list(props(groups[groupID])["FirewallRules"])
	if len(rules) != 2 {
		t.Fatalf("rules %v, want allow then block", rules)
	}
	allow, block := rules[0].(map[string]any), rules[1].(map[string]any)
	if allow["Priority"].(float64) >= block["Priority"].(float64) {
		t.Errorf("allow priority %v, block %v: the allow list must come first", allow["Priority"], block["Priority"])
	}
	if allow["Action"] != "ALLOW" || allow["FirewallDomainRedirectionAction"] != "TRUST_REDIRECTION_DOMAIN" {
		t.Errorf("allow rule %v", allow)
	}
	if block["Action"] != "BLOCK" || block["BlockResponse"] != "NXDOMAIN" {
		t.Errorf("block rule %v", block)
	}
	listOf := func(r map[string]any) []any {
		id := r["FirewallDomainListId"].(map[string]any)["Fn::GetAtt"].([]any)[0].(string)
		return list(props(lists[id])["Domains"])
	}
	if !jsonEq(listOf(block), []any{"*"}) {
		t.Errorf("block list %v, want every name", listOf(block))
	}
	wantAllowed := []any{"*.compute.internal", "*.ec2.internal", "*.galley-dns.internal", "*.pythonhosted.org", "galley-dns.internal",
		"galley.example.com", "git.example.com", "llm.example", "pypi.org",
		map[string]any{"Fn::Join": []any{"", []any{"*.", ref("AWS::URLSuffix")}}}}
	if !jsonEq(listOf(allow), wantAllowed) {
		t.Errorf("allowed names %v, want %v", listOf(allow), wantAllowed)
	}
	a := props(assocs[func() string {
		for id := range assocs {
			return id
		}
		return ""
	}()])
	if !jsonEq(a["FirewallRuleGroupId"], map[string]any{"Fn::GetAtt": []any{groupID, "Id"}}) || !jsonEq(a["VpcId"], ref(s.id(s.g.Vpc))) ||
		a["MutationProtection"] != "DISABLED" {
		t.Errorf("association %v, want the rule group on the VPC", a)
	}
	if p := a["Priority"].(float64); p < 101 || p > 9900 {
		t.Errorf("association priority %v, want 101 to 9900", p)
	}

	off, err := synth(map[string]any{"house": "nodns", "repository": "https://git.example.com/house.git", "dnsFirewall": "false"})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"AWS::Route53Resolver::FirewallDomainList", "AWS::Route53Resolver::FirewallRuleGroup",
		"AWS::Route53Resolver::FirewallRuleGroupAssociation"} {
		if n := len(off.resources(typ)); n != 0 {
			t.Errorf("dnsFirewall=false: %d %s", n, typ)
		}
	}
	if off.g.DNSFirewall != nil {
		t.Error("dnsFirewall=false: Galley.DNSFirewall set")
	}
	// Everything else of the network is the same.
	if n := len(off.resources("AWS::EC2::VPCEndpoint")); n != 5 {
		t.Errorf("dnsFirewall=false: %d endpoints, want 5", n)
	}
}

// TestOneAvailabilityZone: availabilityZones=1 makes one subnet of each
// kind, so one interface per endpoint and one mount target.
func TestOneAvailabilityZone(t *testing.T) {
	s, err := synth(map[string]any{"house": "oneaz", "repository": "https://git.example.com/house.git", "availabilityZones": 1})
	if err != nil {
		t.Fatal(err)
	}
	workers, egress := s.subnetIDs(stack.WorkerSubnetGroup), s.subnetIDs(stack.EgressSubnetGroup)
	if len(workers) != 1 || len(egress) != 1 {
		t.Fatalf("worker subnets %v, egress subnets %v: want one of each", workers, egress)
	}
	for id, ep := range s.resources("AWS::EC2::VPCEndpoint") {
		if p := props(ep); p["VpcEndpointType"] == "Interface" && !jsonEq(p["SubnetIds"], []any{ref(workers[0])}) {
			t.Errorf("endpoint %s in %v, want the one worker subnet", id, p["SubnetIds"])
		}
	}
	check(t, "one mount target", func() { s.tmpl.ResourceCountIs(jsii.String("AWS::EFS::MountTarget"), jsii.Number(1)) })
	check(t, "still no NAT", func() {
		s.tmpl.ResourceCountIs(jsii.String("AWS::EC2::NatGateway"), jsii.Number(0))
		s.tmpl.HasResourceProperties(jsii.String("AWS::EC2::Subnet"), map[string]any{"CidrBlock": "10.64.0.0/20", "MapPublicIpOnLaunch": false})
		s.tmpl.HasResourceProperties(jsii.String("AWS::EC2::VPCEndpoint"), map[string]any{"VpcEndpointType": "Gateway",
			"RouteTableIds": assertions.Match_ArrayWith(&[]any{ref(s.routeTableOf(workers[0]))})})
	})
}
