package stack

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsroute53resolver"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// Subnet group names of the VPC.
const (
	// WorkerSubnetGroup holds the worker tasks, the EFS mount targets and
	// the interface endpoints: isolated, with no route to an internet or
	// NAT gateway. It keeps the name (and so the subnets' logical IDs and
	// CIDR blocks) of the public subnets the workers had before.
	WorkerSubnetGroup = "workers"
	// EgressSubnetGroup holds the egress proxy: public, and the only
	// subnets with a route to the internet gateway.
	EgressSubnetGroup = "egress"
)

// Interface endpoints the worker tasks need with no route out, by short
// name: Fargate pulls the image (ECR's API and registry), writes the
// container's log (CloudWatch Logs) and reads the container's secrets
// (Secrets Manager) through the task's own network interface. ECS itself,
// STS and SQS get none: Fargate reaches ECS by its own channel, the task
// calls no STS, and the harness reaches SQS through the egress proxy.
const (
	EndpointECRAPI  = "ecr-api"
	EndpointECRDKR  = "ecr-dkr"
	EndpointLogs    = "logs"
	EndpointSecrets = "secretsmanager"
)

// EndpointNames lists the interface endpoints in order.
var EndpointNames = []string{EndpointECRAPI, EndpointECRDKR, EndpointLogs, EndpointSecrets}

// addNetwork makes the VPC and the security groups of the workers, the
// egress proxy and the interface endpoints, and the rules between them.
//
// The workers' subnets are isolated: no internet gateway, no NAT. A
// worker task gets no public IP and reaches exactly the egress proxy
// (the house's allowlist, and the deployment's own destinations for the
// harness), the interface endpoints (limited by their policies to this
// stack's image, logs and secrets), S3 through its gateway endpoint (ECR's
// layer bucket only) and EFS. The proxy alone sits in public subnets with
// a public IP; a NAT gateway would forward anything and enforce nothing
// (docs/cost.md).
func (g *Galley) addNetwork() {
	g.Vpc = awsec2.NewVpc(g.Stack, jsii.String("Vpc"), &awsec2.VpcProps{
		IpAddresses: awsec2.IpAddresses_Cidr(jsii.String("10.64.0.0/16")),
		MaxAzs:      jsii.Number(float64(g.Config.AvailabilityZones)),
		NatGateways: jsii.Number(0),
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{{
			// First, so that it keeps the CIDR blocks it had.
			Name:       jsii.String(WorkerSubnetGroup),
			SubnetType: awsec2.SubnetType_PRIVATE_ISOLATED,
			CidrMask:   jsii.Number(20),
		}, {
			Name:                jsii.String(EgressSubnetGroup),
			SubnetType:          awsec2.SubnetType_PUBLIC,
			CidrMask:            jsii.Number(24),
			MapPublicIpOnLaunch: jsii.Bool(false), // the service assigns it to its task
		}},
		RestrictDefaultSecurityGroup: jsii.Bool(true),
	})
	g.WorkerSubnets = &awsec2.SubnetSelection{SubnetGroupName: jsii.String(WorkerSubnetGroup)}
	g.EgressSubnets = &awsec2.SubnetSelection{SubnetGroupName: jsii.String(EgressSubnetGroup)}
	g.Vpc.AddFlowLog(jsii.String("FlowLog"), &awsec2.FlowLogOptions{
		Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(g.logGroup("FlowLogs"), nil),
		TrafficType: awsec2.FlowLogTrafficType_ALL,
	})
	sg := func(id, desc string) awsec2.SecurityGroup {
		return awsec2.NewSecurityGroup(g.Stack, jsii.String(id), &awsec2.SecurityGroupProps{
			Vpc:              g.Vpc,
			Description:      jsii.String(desc),
			AllowAllOutbound: jsii.Bool(false),
		})
	}
	g.WorkerSG = sg("WorkerSecurityGroup", "galley workers: no inbound; out only to the egress proxy, the VPC endpoints, S3 (ECR layers) and the workspaces file system")
	g.EgressSG = sg("EgressSecurityGroup", "galley egress proxy: in from the workers on its port; HTTPS and HTTP out")
	g.EndpointsSG = sg("EndpointsSecurityGroup", "galley VPC interface endpoints: HTTPS in from the workers and the egress proxy")
	// EC2 gives a group that the template creates without inline egress
	// rules its default rule, all traffic out, and CDK drops its own
	// placeholder as soon as any rule is added, even one it writes as a
	// resource of its own, as every rule of the workers' group is (they
	// name other groups, or a looked-up prefix list). So the group keeps
	// CDK's placeholder, which matches no traffic, as its one inline rule.
	g.WorkerSG.Node().DefaultChild().(awsec2.CfnSecurityGroup).AddPropertyOverride(jsii.String("SecurityGroupEgress"), []any{matchNoTraffic})

	port := awsec2.Port_Tcp(jsii.Number(contract.EgressPort))
	g.WorkerSG.AddEgressRule(g.EgressSG, port, jsii.String("the egress proxy"), nil)
	g.EgressSG.AddIngressRule(g.WorkerSG, port, jsii.String("galley workers"), nil)
	https := awsec2.Port_Tcp(jsii.Number(443))
	g.WorkerSG.AddEgressRule(g.EndpointsSG, https, jsii.String("the VPC interface endpoints (ECR, Logs, Secrets Manager)"), nil)
	g.EndpointsSG.AddIngressRule(g.WorkerSG, https, jsii.String("galley workers"), nil)
	// The proxy's own task resolves ECR, Logs and Secrets Manager to the
	// endpoints too (private DNS holds for the whole VPC).
	g.EndpointsSG.AddIngressRule(g.EgressSG, https, jsii.String("the egress proxy task: its image, log and secret"), nil)
	// HTTP too: an allowlisted host may serve plain HTTP (Debian's package
	// mirrors do), and the proxy allows by host whatever the port, so port
	// 80 reaches no host that 443 does not.
	g.EgressSG.AddEgressRule(awsec2.Peer_AnyIpv4(), https, jsii.String("HTTPS to the allowlisted hosts and the deployment destinations"), nil)
	g.EgressSG.AddEgressRule(awsec2.Peer_AnyIpv4(), awsec2.Port_Tcp(jsii.Number(80)),
		jsii.String("HTTP to allowlisted hosts that serve plain HTTP"), nil)
}

// matchNoTraffic is CDK's egress rule that matches nothing: no address is
// 255.255.255.255 and ICMP has no type 252 code 86.
var matchNoTraffic = map[string]any{
	"CidrIp": "255.255.255.255/32", "Description": "Disallow all traffic",
	"IpProtocol": "icmp", "FromPort": 252, "ToPort": 86,
}

// addEndpoints makes the interface endpoints (private DNS, in the
// workers' subnets, behind EndpointsSG) and the S3 gateway endpoint on the
// workers' route tables, each with a policy that lets only this stack's
// execution roles use it, and only on this stack's resources: an agent
// holding credentials of its own (another account's) can neither push its
// data into its own log group, secret or repository through them nor
// reach any other resource of this account. The S3 gateway endpoint
// allows reading ECR's layer bucket alone (ECR hands out presigned URLs
// signed by ECR, so its principal cannot be named).
func (g *Galley) addEndpoints() error {
	execRoles := []awsiam.IPrincipal{
		awsiam.NewArnPrincipal(g.ExecutionRole.RoleArn()),
		awsiam.NewArnPrincipal(g.EgressExecutionRole.RoleArn()),
	}
	allow := func(sid string, actions []string, resources ...*string) awsiam.PolicyStatement {
		return awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:        jsii.String(sid),
			Principals: &execRoles,
			Actions:    jsii.Strings(actions...),
			Resources:  &resources,
		})
	}
	repo := g.WorkerImage.Repository().RepositoryArn()
	pull := []string{"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}
	ecr := []awsiam.PolicyStatement{
		// It names no repository: AWS requires Resource *.
		allow("GetAuthorizationToken", []string{"ecr:GetAuthorizationToken"}, jsii.String("*")),
		allow("PullTheWorkerImage", pull, repo),
	}
	logs := []awsiam.PolicyStatement{allow("WriteTheTasksLogs", []string{"logs:CreateLogStream", "logs:PutLogEvents"},
		g.WorkerLogs.LogGroupArn(), g.EgressLogs.LogGroupArn())}
	var secrets []*string
	for _, name := range []string{SecretAnthropic, SecretGit, SecretOpenAI} {
		secrets = append(secrets, g.ProviderSecrets[name].SecretArn())
	}
	secrets = append(secrets, g.EgressSecret.SecretArn())
	secretsPolicy := []awsiam.PolicyStatement{allow("ReadTheTasksSecrets",
		[]string{"secretsmanager:DescribeSecret", "secretsmanager:GetSecretValue"}, secrets...)}

	services := map[string]struct {
		id       string
		service  awsec2.InterfaceVpcEndpointAwsService
		policies []awsiam.PolicyStatement
	}{
		EndpointECRAPI:  {"EcrApiEndpoint", awsec2.InterfaceVpcEndpointAwsService_ECR(), ecr},
		EndpointECRDKR:  {"EcrDockerEndpoint", awsec2.InterfaceVpcEndpointAwsService_ECR_DOCKER(), ecr},
		EndpointLogs:    {"LogsEndpoint", awsec2.InterfaceVpcEndpointAwsService_CLOUDWATCH_LOGS(), logs},
		EndpointSecrets: {"SecretsManagerEndpoint", awsec2.InterfaceVpcEndpointAwsService_SECRETS_MANAGER(), secretsPolicy},
	}
	g.Endpoints = map[string]awsec2.InterfaceVpcEndpoint{}
	for _, name := range EndpointNames {
		s := services[name]
		ep := awsec2.NewInterfaceVpcEndpoint(g.Stack, jsii.String(s.id), &awsec2.InterfaceVpcEndpointProps{
			Vpc:               g.Vpc,
			Service:           s.service,
			Subnets:           g.WorkerSubnets,
			SecurityGroups:    &[]awsec2.ISecurityGroup{g.EndpointsSG},
			PrivateDnsEnabled: jsii.Bool(true),
			// The rules are the security groups' above, not the VPC's CIDR.
			Open: jsii.Bool(false),
		})
		for _, st := range s.policies {
			ep.AddToPolicy(st)
		}
		g.Endpoints[name] = ep
	}

	// ECR keeps image layers in a bucket of its own per region.
	layers := awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":s3:::prod-"), awscdk.Aws_REGION(), jsii.String("-starport-layer-bucket/*"),
	})
	g.S3Endpoint = g.Vpc.AddGatewayEndpoint(jsii.String("S3Endpoint"), &awsec2.GatewayVpcEndpointOptions{
		Service: awsec2.GatewayVpcEndpointAwsService_S3(),
		// Not the egress subnets': the proxy reaches S3 hosts a house
		// allows over the internet, not through this policy.
		Subnets: &[]*awsec2.SubnetSelection{g.WorkerSubnets},
	})
	g.S3Endpoint.AddToPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("ReadEcrLayers"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewAnyPrincipal()},
		Actions:    jsii.Strings("s3:GetObject"),
		Resources:  &[]*string{layers},
	}))
	// The harness keeps worktree snapshots in the house's bucket, with the
	// task role (addSnapshots).
	for _, st := range g.snapshotStatements([]awsiam.IPrincipal{awsiam.NewArnPrincipal(g.TaskRole.RoleArn())}) {
		g.S3Endpoint.AddToPolicy(st)
	}
	// Fargate downloads the layers through the task's network interface,
	// so the workers' group must let HTTPS out to S3's addresses: AWS's
	// managed prefix list for S3 in the region, whose ID CloudFormation
	// cannot look up (S3PrefixList below). Through the gateway endpoint,
	// the only route to them, those addresses serve the layer bucket alone.
	prefixList, err := g.s3PrefixList()
	if err != nil {
		return err
	}
	awsec2.NewCfnSecurityGroupEgress(g.Stack, jsii.String("WorkerSecurityGroupToS3"), &awsec2.CfnSecurityGroupEgressProps{
		GroupId:                 g.WorkerSG.SecurityGroupId(),
		IpProtocol:              jsii.String("tcp"),
		FromPort:                jsii.Number(443),
		ToPort:                  jsii.Number(443),
		DestinationPrefixListId: prefixList,
		Description:             jsii.String("S3 through its gateway endpoint: the ECR image layers, the worktree snapshots"),
	})
	return nil
}

// S3PrefixListType is the custom resource that looks up the ID of AWS's
// managed prefix list for S3 in the stack's region.
const S3PrefixListType = "Custom::S3PrefixList"

//go:embed s3prefixlist/index.js
var s3PrefixListHandler []byte

// s3PrefixList is the ID of the region's S3 prefix list
// ("com.amazonaws.<region>.s3"), from a custom resource: an
// environment-agnostic stack cannot look it up at synth, and
// CloudFormation has no intrinsic for it. The handler (s3prefixlist,
// embedded) runs on Lambda at deploy time with
// ec2:DescribeManagedPrefixLists only.
func (g *Galley) s3PrefixList() (*string, error) {
	code, err := handlerDir("s3prefixlist", s3PrefixListHandler)
	if err != nil {
		return nil, err
	}
	provider := awscdk.CustomResourceProvider_GetOrCreateProvider(g.Stack, jsii.String("S3PrefixListProvider"), &awscdk.CustomResourceProviderProps{
		CodeDirectory: jsii.String(code),
		Runtime:       awscdk.CustomResourceProviderRuntime_NODEJS_22_X,
		Description:   jsii.String("galley: looks up the region's S3 prefix list for the workers' security group"),
		PolicyStatements: &[]any{map[string]any{
			"Effect": "Allow", "Action": "ec2:DescribeManagedPrefixLists", "Resource": "*",
		}},
	})
	g.S3PrefixList = awscdk.NewCustomResource(g.Stack, jsii.String("S3PrefixList"), &awscdk.CustomResourceProps{
		ServiceToken: provider.ServiceToken(),
		ResourceType: jsii.String(S3PrefixListType),
		Properties: &map[string]any{
			"PrefixListName": awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("com.amazonaws."), awscdk.Aws_REGION(), jsii.String(".s3")}),
		},
	})
	return g.S3PrefixList.GetAttString(jsii.String("PrefixListId")), nil
}

// handlerDir writes an embedded handler to a folder of its own, named by
// its content, for CDK to stage as the provider's code (it stages a
// folder's contents, hashed, so the folder's place does not matter).
func handlerDir(name string, code []byte) (string, error) {
	sum := sha256.Sum256(code)
	dir := filepath.Join(os.TempDir(), "galley-"+name+"-"+hex.EncodeToString(sum[:8]))
	if b, err := os.ReadFile(filepath.Join(dir, "index.js")); err == nil && slices.Equal(b, code) {
		return dir, nil
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("galley: staging the %s handler for CDK: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	// Written whole beside the folder, then renamed into it: a synth
	// beside this one never stages half a file, nor a temporary one.
	tmp, err := os.CreateTemp(filepath.Dir(dir), "galley-"+name+"-*.js.tmp")
	if err != nil {
		return fail(err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(code); err != nil {
		tmp.Close()
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, "index.js")); err != nil {
		return fail(err)
	}
	return dir, nil
}

// DNS Firewall rule priorities: the allow list first, then everything.
const (
	dnsAllowPriority = 100
	dnsBlockPriority = 200
	// dnsAssociationPriority is the rule group's place among the VPC's
	// (101 to 9900 are the customer's).
	dnsAssociationPriority = 101
)

// DNSAllowList is what the DNS Firewall lets the VPC resolve: the house's
// allowlist (the proxy resolves those hosts for agents), the deployment's
// own destinations (the git host, the providers, a custom domain), AWS's
// service names (*.amazonaws.com: the endpoints, ECR's layer bucket, EFS,
// SQS, the API's execute-api host), the proxy's namespace and EC2's
// internal host names. Sorted, no repeats; the AWS entry follows the
// partition's URL suffix.
func (g *Galley) DNSAllowList() []*string {
	cfg := g.Config
	names := slices.Clone(cfg.EgressAllowlist)
	names = append(names, cfg.GitHost())
	names = append(names, cfg.ProviderHosts()...)
	if cfg.DomainName != "" {
		names = append(names, cfg.DomainName)
	}
	names = append(names, cfg.EgressNamespace(), "*."+cfg.EgressNamespace())
	// EC2's own names of the VPC's addresses (a task's host name is one;
	// tools that look their host up get an answer): the VPC resolver
	// answers them itself and forwards them nowhere.
	names = append(names, "*.ec2.internal", "*.compute.internal")
	slices.Sort(names)
	names = slices.Compact(names)
	out := jsii.Strings(names...)
	return append(*out, awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String("*."), awscdk.Aws_URL_SUFFIX()}))
}

// addDNSFirewall associates a Route 53 Resolver DNS Firewall rule group
// with the VPC (context dnsFirewall): DNSAllowList resolves, every other
// name is answered NXDOMAIN. Security groups do not see DNS: without it an
// agent could carry data out as names it asks the VPC resolver for (a
// resolver forwards them to the name's own servers). The allow rule trusts
// what an allowed name's CNAME chain leads to (an allowed host behind a
// CDN resolves), which the block rule would otherwise refuse. Resolver
// fails closed by default (FirewallFailOpen DISABLED): if the firewall
// cannot answer, nothing resolves.
func (g *Galley) addDNSFirewall() {
	if !g.Config.DNSFirewall {
		return
	}
	domains := g.DNSAllowList()
	allowed := awsroute53resolver.NewCfnFirewallDomainList(g.Stack, jsii.String("DnsAllowed"), &awsroute53resolver.CfnFirewallDomainListProps{
		Name:    jsii.String(g.Config.Prefix() + "-allowed"),
		Domains: &domains,
	})
	everything := awsroute53resolver.NewCfnFirewallDomainList(g.Stack, jsii.String("DnsEverything"), &awsroute53resolver.CfnFirewallDomainListProps{
		Name:    jsii.String(g.Config.Prefix() + "-everything"),
		Domains: jsii.Strings("*"),
	})
	g.DNSFirewall = awsroute53resolver.NewCfnFirewallRuleGroup(g.Stack, jsii.String("DnsFirewall"), &awsroute53resolver.CfnFirewallRuleGroupProps{
		Name: jsii.String(g.Config.Prefix() + "-dns"),
		FirewallRules: &[]any{
			&awsroute53resolver.CfnFirewallRuleGroup_FirewallRuleProperty{
				FirewallDomainListId:            allowed.AttrId(),
				Priority:                        jsii.Number(dnsAllowPriority),
				Action:                          jsii.String("ALLOW"),
				FirewallDomainRedirectionAction: jsii.String("TRUST_REDIRECTION_DOMAIN"),
			},
			&awsroute53resolver.CfnFirewallRuleGroup_FirewallRuleProperty{
				FirewallDomainListId: everything.AttrId(),
				Priority:             jsii.Number(dnsBlockPriority),
				Action:               jsii.String("BLOCK"),
				BlockResponse:        jsii.String("NXDOMAIN"),
			},
		},
	})
	awsroute53resolver.NewCfnFirewallRuleGroupAssociation(g.Stack, jsii.String("DnsFirewallAssociation"), &awsroute53resolver.CfnFirewallRuleGroupAssociationProps{
		Name:                jsii.String(g.Config.Prefix() + "-dns"),
		FirewallRuleGroupId: g.DNSFirewall.AttrId(),
		VpcId:               g.Vpc.VpcId(),
		Priority:            jsii.Number(dnsAssociationPriority),
		// The stack must be able to change and remove it.
		MutationProtection: jsii.String("DISABLED"),
	})
}
