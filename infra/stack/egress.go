package stack

import (
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsservicediscovery"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// EgressContainerName is the egress proxy task definition's only
// container.
const EgressContainerName = "egress-proxy"

// EgressCommand is the proxy container's command: the worker image's
// entrypoint (galley-worker) with this subcommand.
var EgressCommand = []string{contract.EgressProxyCommand}

// EgressUser is the user the proxy runs as: nobody. It needs no
// privilege, no capability and no file.
const EgressUser = "65534:65534"

// egressCPU and egressMemory are Fargate's smallest task: 0.25 vCPU and
// 512 MiB. The proxy relays bytes; a house whose agents move enough to
// need more raises them here.
const (
	egressCPU    = 256
	egressMemory = 512
)

// egressDNSTTL is how long (seconds) resolvers keep the proxy's address:
// short, so that workers find a replaced proxy task within seconds.
const egressDNSTTL = 10

// addEgressProxy makes the egress proxy: an ECS service on Fargate (one
// task, ARM64, the smallest size) running the worker image as
// `galley-worker egress-proxy`, in the public subnets with a public IP,
// behind EgressSG, in a cluster of its own (the worker cluster's task
// events, which the reconciler settles workers by, and the functions'
// ecs:cluster conditions stay the workers' alone). The workers reach it
// by a name in a Cloud Map private DNS namespace (EgressHost): ECS
// registers the task's address there as an A record, which any task of
// the VPC resolves through the VPC resolver. Service Connect would not
// do: it serves only tasks that ECS services start, and the workers are
// standalone RunTask tasks; an internal load balancer would cost about
// $16 a month before traffic against Cloud Map's cents (docs/cost.md).
func (g *Galley) addEgressProxy() {
	cfg := g.Config
	g.EgressCluster = awsecs.NewCluster(g.Stack, jsii.String("EgressCluster"), &awsecs.ClusterProps{
		Vpc: g.Vpc,
	})
	g.EgressNamespace = awsservicediscovery.NewPrivateDnsNamespace(g.Stack, jsii.String("EgressNamespace"), &awsservicediscovery.PrivateDnsNamespaceProps{
		Name:        jsii.String(cfg.EgressNamespace()),
		Vpc:         g.Vpc,
		Description: jsii.String("galley house " + cfg.House + ": the name of the egress proxy for the worker tasks"),
	})
	g.EgressTaskRole = awsiam.NewRole(g.Stack, jsii.String("EgressTaskRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
		Description: jsii.String("galley egress proxy task: no permission at all"),
	})
	g.EgressExecutionRole = awsiam.NewRole(g.Stack, jsii.String("EgressExecutionRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ecs-tasks.amazonaws.com"), nil),
		Description: jsii.String("galley egress proxy task execution: pulls the image, writes the proxy's logs, injects the egress secret"),
	})
	g.EgressTaskDefinition = awsecs.NewFargateTaskDefinition(g.Stack, jsii.String("EgressTask"), &awsecs.FargateTaskDefinitionProps{
		Family:         jsii.String(cfg.Prefix() + "-egress"),
		Cpu:            jsii.Number(egressCPU),
		MemoryLimitMiB: jsii.Number(egressMemory),
		RuntimePlatform: &awsecs.RuntimePlatform{
			CpuArchitecture:       awsecs.CpuArchitecture_ARM64(),
			OperatingSystemFamily: awsecs.OperatingSystemFamily_LINUX(),
		},
		TaskRole:      g.EgressTaskRole,
		ExecutionRole: g.EgressExecutionRole,
	})
	linux := awsecs.NewLinuxParameters(g.Stack, jsii.String("EgressLinux"), &awsecs.LinuxParametersProps{})
	linux.DropCapabilities(awsecs.Capability_ALL)
	g.EgressLogs = g.logGroup("EgressLogs")
	g.EgressTaskDefinition.AddContainer(jsii.String(EgressContainerName), &awsecs.ContainerDefinitionOptions{
		ContainerName:          jsii.String(EgressContainerName),
		Image:                  awsecs.ContainerImage_FromDockerImageAsset(g.WorkerImage),
		Command:                jsii.Strings(EgressCommand...),
		Essential:              jsii.Bool(true),
		User:                   jsii.String(EgressUser),
		ReadonlyRootFilesystem: jsii.Bool(true),
		LinuxParameters:        linux,
		PortMappings: &[]*awsecs.PortMapping{{
			ContainerPort: jsii.Number(contract.EgressPort),
			Protocol:      awsecs.Protocol_TCP,
		}},
		Logging: awsecs.LogDriver_AwsLogs(&awsecs.AwsLogDriverProps{
			StreamPrefix: jsii.String("egress"),
			LogGroup:     g.EgressLogs,
		}),
		Environment: &map[string]*string{
			contract.EnvEgressListen:       jsii.String(":" + strconv.Itoa(contract.EgressPort)),
			contract.EnvEgressAllow:        jsii.String(strings.Join(cfg.EgressAllowlist, ",")),
			contract.EnvEgressHarnessAllow: g.harnessDestinations(),
		},
		Secrets: &map[string]awsecs.Secret{
			contract.EnvEgressSecret: awsecs.Secret_FromSecretsManager(g.EgressSecret, nil),
		},
	})
	g.EgressService = awsecs.NewFargateService(g.Stack, jsii.String("EgressService"), &awsecs.FargateServiceProps{
		Cluster:        g.EgressCluster,
		TaskDefinition: g.EgressTaskDefinition,
		DesiredCount:   jsii.Number(1),
		// A replacement starts before the old task stops, so workers are
		// never left without a proxy by a deployment.
		MinHealthyPercent: jsii.Number(100),
		MaxHealthyPercent: jsii.Number(200),
		CircuitBreaker:    &awsecs.DeploymentCircuitBreaker{Enable: jsii.Bool(true), Rollback: jsii.Bool(true)},
		AssignPublicIp:    jsii.Bool(true),
		VpcSubnets:        g.EgressSubnets,
		SecurityGroups:    &[]awsec2.ISecurityGroup{g.EgressSG},
		CloudMapOptions: &awsecs.CloudMapOptions{
			Name:              jsii.String(EgressService),
			CloudMapNamespace: g.EgressNamespace,
			DnsRecordType:     awsservicediscovery.DnsRecordType_A,
			DnsTtl:            awscdk.Duration_Seconds(jsii.Number(egressDNSTTL)),
		},
		EnableECSManagedTags: jsii.Bool(true),
		PropagateTags:        awsecs.PropagatedTagSource_SERVICE,
	})
}

// harnessDestinations is the proxy's GALLEY_EGRESS_HARNESS_ALLOW: the
// hosts the harness itself must reach, derived from the deployment: the
// API's host (the custom domain, or the HTTP API's execute-api host, known
// only at deploy), the house repository's git host, the model providers'
// hosts (or their base URLs' hosts) for the allowed families, and SQS's
// regional host (the harness waits on its doorbell queue there).
func (g *Galley) harnessDestinations() *string {
	cfg := g.Config
	var api *string
	if cfg.DomainName != "" {
		api = jsii.String(cfg.DomainName)
	} else {
		// "https://<id>.execute-api.<region>.amazonaws.com": the third
		// part of the URL split at "/".
		api = awscdk.Fn_Select(jsii.Number(2), awscdk.Fn_Split(jsii.String("/"), g.Endpoint, nil))
	}
	parts := []*string{api, jsii.String(cfg.GitHost())}
	for _, h := range cfg.ProviderHosts() {
		parts = append(parts, jsii.String(h))
	}
	parts = append(parts, awscdk.Fn_Join(jsii.String(""), &[]*string{
		jsii.String("sqs."), awscdk.Aws_REGION(), jsii.String("."), awscdk.Aws_URL_SUFFIX(),
	}))
	return awscdk.Fn_Join(jsii.String(","), &parts)
}
