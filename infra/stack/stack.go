package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecrassets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsecs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsefs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsroute53resolver"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsservicediscovery"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// Galley is the synthesized deployment, with the constructs tests inspect.
type Galley struct {
	Stack  awscdk.Stack
	Config Config

	Table awsdynamodb.Table
	// WakeRole is assumed, per worker and scoped to its queue, for the
	// worker's harness to wait on (addWakeRole).
	WakeRole     awsiam.Role
	API          awsapigatewayv2.HttpApi
	Stage        awsapigatewayv2.HttpStage
	AccessLogs   awslogs.LogGroup
	Functions    map[string]awslambda.Function
	FunctionLogs map[string]awslogs.LogGroup
	Roles        map[string]awsiam.Role
	Vpc          awsec2.Vpc
	// WorkerSubnets are the isolated subnets the worker tasks, the EFS
	// mount targets and the interface endpoints sit in; EgressSubnets the
	// public ones of the egress proxy.
	WorkerSubnets *awsec2.SubnetSelection
	EgressSubnets *awsec2.SubnetSelection
	// WorkerSG admits nothing and lets out only what addNetwork and
	// addEndpoints name; EgressSG is the proxy's, EndpointsSG the
	// interface endpoints'.
	WorkerSG    awsec2.SecurityGroup
	EgressSG    awsec2.SecurityGroup
	EndpointsSG awsec2.SecurityGroup
	Cluster     awsecs.Cluster
	// TaskDefinitions and WorkerImages are each agent family's worker task
	// definition and its image asset (worker/Dockerfile's target
	// WorkerTarget(family)); TaskDefinition and WorkerImage are the first
	// family's: the default task definition (GALLEY_TASK_DEFINITION, for
	// the scripted agent) and the egress proxy's image.
	TaskDefinitions map[string]awsecs.FargateTaskDefinition
	WorkerImages    map[string]awsecrassets.DockerImageAsset
	TaskDefinition  awsecs.FargateTaskDefinition
	WorkerImage     awsecrassets.DockerImageAsset
	TaskRole        awsiam.Role
	ExecutionRole   awsiam.Role
	// WorkerLogs is the worker containers' log group.
	WorkerLogs awslogs.LogGroup
	// Endpoints are the interface endpoints by EndpointNames' names, and
	// S3Endpoint the gateway endpoint for ECR's layers; S3PrefixList looks
	// up the prefix list the workers' group sends layers' HTTPS to.
	Endpoints    map[string]awsec2.InterfaceVpcEndpoint
	S3Endpoint   awsec2.GatewayVpcEndpoint
	S3PrefixList awscdk.CustomResource
	// The egress proxy (addEgressProxy): its cluster, service, task
	// definition, roles, logs and Cloud Map namespace, and the secret the
	// harnesses prove themselves with (read by the two execution roles
	// only).
	EgressCluster        awsecs.Cluster
	EgressService        awsecs.FargateService
	EgressTaskDefinition awsecs.FargateTaskDefinition
	EgressTaskRole       awsiam.Role
	EgressExecutionRole  awsiam.Role
	EgressLogs           awslogs.LogGroup
	EgressNamespace      awsservicediscovery.PrivateDnsNamespace
	EgressSecret         awssecretsmanager.Secret
	// DNSFirewall is the VPC's DNS Firewall rule group (nil with context
	// dnsFirewall=false).
	DNSFirewall awsroute53resolver.CfnFirewallRuleGroup
	// Workspaces is the file system of the git object cache (mounted at
	// contract.GitCacheMount in the worker container, through
	// GitCacheAccessPoint only); its name is its history's (it held the
	// worktrees). Worktrees live on each task's own storage.
	Workspaces          awsefs.FileSystem
	GitCacheAccessPoint awsefs.AccessPoint
	WorkspacesSG        awsec2.SecurityGroup
	// Snapshots keeps each worktree's snapshot when worktrees live on the
	// tasks' own storage (addSnapshots).
	Snapshots   awss3.Bucket
	TokenSecret awssecretsmanager.Secret
	// OperatorTokenSecret opens the operator routes (/operator/); only
	// the operator function reads it.
	OperatorTokenSecret awssecretsmanager.Secret
	// WorkerSecret signs the workers' own credentials (effects signs, the
	// worker API verifies); no worker task can read it.
	WorkerSecret awssecretsmanager.Secret
	// ProviderSecrets by short name (anthropic, openai, git-credential).
	ProviderSecrets map[string]awssecretsmanager.Secret
	TaskStateRule   awsevents.Rule
	// ReconcilerDLQ keeps the task state changes EventBridge could not
	// deliver to the reconciler.
	ReconcilerDLQ awssqs.Queue
	// ReconcilerFailures keeps the reconciler's asynchronous invocations
	// (both rules') that failed in the function after Lambda's retries.
	ReconcilerFailures awssqs.Queue
	// HousekeepingRule ticks the reconciler every five minutes: it emits
	// the StuckWorkers and LiveWorkers gauges, and at most hourly deletes
	// idle doorbell queues.
	HousekeepingRule awsevents.Rule
	Alarms           map[string]awscloudwatch.Alarm
	Dashboard        awscloudwatch.Dashboard
	// Endpoint is the https URL kitchn binds to (a token until deploy).
	Endpoint *string
	// Missing, when not empty, says why Build made a placeholder stack
	// (Stack and Config only) instead of the deployment.
	Missing []string
}

// UntaggedTypes are the resource types the stack does not tag (see
// NewGalleyStack).
var UntaggedTypes = []string{"AWS::CloudWatch::Dashboard"}

// NewGalleyStack builds the whole deployment in one environment-agnostic
// stack (no account or region lookups at synth).
func NewGalleyStack(scope constructs.Construct, id string, cfg Config, props *awscdk.StackProps) (*Galley, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if props == nil {
		props = &awscdk.StackProps{}
	}
	if props.Description == nil {
		props.Description = jsii.String(fmt.Sprintf("galley: kitchn HTTP worker backend %q for house %q", cfg.Backend, cfg.House))
	}
	s := awscdk.NewStack(scope, jsii.String(id), props)
	g := &Galley{
		Stack:           s,
		Config:          cfg,
		Functions:       map[string]awslambda.Function{},
		FunctionLogs:    map[string]awslogs.LogGroup{},
		Roles:           map[string]awsiam.Role{},
		ProviderSecrets: map[string]awssecretsmanager.Secret{},
		Alarms:          map[string]awscloudwatch.Alarm{},
	}
	// Every resource is tagged but the dashboard: CloudWatch took dashboard
	// tags only in 2026, and the resource schema cfn-lint has for
	// us-east-1, the default region, still has no Tags on
	// AWS::CloudWatch::Dashboard (E3002) while other regions' have. A
	// property CloudFormation does not know fails the deploy, and the
	// dashboard's name (galley-<house>) already says whose it is.
	untagged := &awscdk.TagProps{ExcludeResourceTypes: jsii.Strings(UntaggedTypes...)}
	awscdk.Tags_Of(s).Add(jsii.String(contract.TagHouse), jsii.String(cfg.House), untagged)
	awscdk.Tags_Of(s).Add(jsii.String("galley:backend"), jsii.String(cfg.Backend), untagged)
	if cfg.ScriptAgent {
		awscdk.Annotations_Of(s).AddWarningV2(jsii.String("galley:scriptAgent"), jsii.String(
			"context scriptAgent is on: launches that name no agent run the scripted test agent "+
				"(GALLEY_DEFAULT_AGENT=script on the effects function); for smoke tests, not for production"), nil)
	}

	g.addTable()
	g.addSecrets()
	g.addAPI()
	if err := g.addWorkers(); err != nil {
		return nil, err
	}
	g.addEgressProxy()
	if err := g.addEndpoints(); err != nil {
		return nil, err
	}
	// The proxy's first task pulls its image through the endpoints.
	for _, name := range EndpointNames {
		g.EgressService.Node().AddDependency(g.Endpoints[name])
	}
	g.addDNSFirewall()
	g.addFunctions()
	g.addRoutes()
	g.addReconcilerRule()
	g.addHousekeepingRule()
	g.addAlarms()
	g.addDashboard()
	g.addOutputs()
	g.addNagSuppressions()
	g.addLintSuppressions()
	return g, nil
}

func (g *Galley) retention() awslogs.RetentionDays {
	days := map[int]awslogs.RetentionDays{
		1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
		7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
		60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
		150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
		400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
		1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
		2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
		3653: awslogs.RetentionDays_TEN_YEARS,
	}
	return days[g.Config.LogRetentionDays]
}

// logGroup makes a log group with the deployment's retention. Log groups
// are retained on teardown: they may be evidence, and they expire anyway.
func (g *Galley) logGroup(id string) awslogs.LogGroup {
	return awslogs.NewLogGroup(g.Stack, jsii.String(id), &awslogs.LogGroupProps{
		Retention:     g.retention(),
		RemovalPolicy: awscdk.RemovalPolicy_RETAIN,
	})
}
