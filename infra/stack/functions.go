package stack

import (
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// fnSpec is one function's size and bound. The mailbox function outlives
// the await cap but not the gateway's 30 s; the worker API's inbox is a
// long poll too.
type fnSpec struct {
	memory  float64
	timeout float64 // seconds
	desc    string
}

var fnSpecs = map[string]fnSpec{
	contract.FnEffects:    {256, 20, "galley effects: launch, message, reply, cancel, release; lookup"},
	contract.FnReads:      {256, 10, "galley reads: descriptor, inventory, observe, usage"},
	contract.FnMailbox:    {256, 29, "galley mailbox: deliveries next/acknowledge/await, runs/adopt"},
	contract.FnWorkerAPI:  {256, 29, "galley worker API for the harness (per-worker tokens)"},
	contract.FnReconciler: {256, 30, "galley reconciler: ECS task state changes settle workers; every 5 minutes, gauges and (hourly) idle doorbell queues"},
	// A long poll on a worker's events holds up to 25 s, below the
	// gateway's 30 s.
	contract.FnOperator: {256, 29, "galley operator API and console: workers, events (long poll), cancel, revoke (operator token)"},
}

// subnetIDs are the workers' (isolated) subnets, for RunTask.
func (g *Galley) subnetIDs() *string {
	var ids []string
	for _, sn := range *g.Vpc.SelectSubnets(g.WorkerSubnets).Subnets {
		ids = append(ids, *sn.SubnetId())
	}
	return jsii.String(strings.Join(ids, ","))
}

// addFunctions makes the six functions (contract.FunctionNames), each with
// its own role.
func (g *Galley) addFunctions() {
	cfg := g.Config
	env := map[string]*string{
		contract.EnvTable:           g.Table.TableName(),
		contract.EnvHouse:           jsii.String(cfg.House),
		contract.EnvBackend:         jsii.String(cfg.Backend),
		contract.EnvCredential:      jsii.String(cfg.Credential),
		contract.EnvQueuePrefix:     jsii.String(cfg.Prefix()),
		contract.EnvCluster:         g.Cluster.ClusterArn(),
		contract.EnvTaskDefinition:  g.TaskDefinition.TaskDefinitionArn(),
		contract.EnvSubnets:         g.subnetIDs(),
		contract.EnvSecurityGroup:   g.WorkerSG.SecurityGroupId(),
		contract.EnvAwaitCapMs:      jsii.String(strconv.Itoa(cfg.AwaitCapMs)),
		contract.EnvMaxWorkers:      jsii.String(strconv.Itoa(cfg.MaxWorkers)),
		contract.EnvAgentFamilies:   jsii.String(strings.Join(cfg.AgentFamilies, ",")),
		contract.EnvRepository:      jsii.String(cfg.Repository),
		contract.EnvWorkerEndpoint:  g.Endpoint,
		contract.EnvWorkerContainer: jsii.String(contract.WorkerContainer),
		// The workers' subnets have no route out: a public IP would reach
		// nothing.
		contract.EnvAssignPublicIP: jsii.String("DISABLED"),
	}
	// Each agent family's own task definition (its image holds its CLI
	// alone); GALLEY_TASK_DEFINITION, the first family's, runs the others.
	for family, td := range g.TaskDefinitions {
		env[contract.EnvTaskDefinitionFor(family)] = td.TaskDefinitionArn()
	}
	for _, name := range contract.FunctionNames {
		spec := fnSpecs[name]
		id := titled(name)
		role := awsiam.NewRole(g.Stack, jsii.String(id+"Role"), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String("galley " + name + " function"),
		})
		logs := g.logGroup(id + "Logs")
		logs.GrantWrite(role)
		fenv := map[string]*string{}
		for k, v := range env {
			fenv[k] = v
		}
		// kitchn's token is checked only by the functions kitchn calls.
		if name != contract.FnWorkerAPI && name != contract.FnReconciler && name != contract.FnOperator {
			fenv[contract.EnvTokenSecretArn] = g.TokenSecret.SecretArn()
		}
		// The operator token is read by the operator function alone.
		if name == contract.FnOperator {
			fenv[contract.EnvOperatorTokenSecretArn] = g.OperatorTokenSecret.SecretArn()
		}
		if name == contract.FnEffects || name == contract.FnReads {
			// Launch creates the worker's branch in the house repository;
			// reads checks that branches are still there (liveness), which
			// a private repository answers only with the credential.
			fenv[contract.EnvSecretGit] = g.ProviderSecrets[SecretGit].SecretArn()
			fenv[contract.EnvGitUsername] = jsii.String(cfg.GitUsername)
		}
		if name == contract.FnEffects || name == contract.FnOperator || name == contract.FnReconciler {
			// A worktree's release deletes its snapshot (effects), a
			// settled worker its session archive (docs/parking.md).
			fenv[contract.EnvSnapshotBucket] = g.Snapshots.BucketName()
		}
		if name == contract.FnEffects {
			if cfg.ScriptAgent {
				fenv[contract.EnvDefaultAgent] = jsii.String("script")
			}
		}
		// The reconciler starts owed resumes of parked workers, whose
		// tasks' bootstrap codes are derived from the signing key.
		if name == contract.FnEffects || name == contract.FnWorkerAPI || name == contract.FnReconciler {
			fenv[contract.EnvWorkerSecretArn] = g.WorkerSecret.SecretArn()
		}
		if name == contract.FnReconciler {
			fenv[contract.EnvQueueIdleHours] = jsii.String(strconv.Itoa(cfg.QueueIdleHours))
		}
		var reserved *float64
		if name == contract.FnEffects && cfg.EffectsReservedConcurrency > 0 {
			// Launches and cancels never queue behind awaits or anything
			// else for the account's concurrency (docs/deploy.md, Quotas).
			reserved = jsii.Number(float64(cfg.EffectsReservedConcurrency))
		}
		fn := awslambda.NewFunction(g.Stack, jsii.String(id), &awslambda.FunctionProps{
			Description:   jsii.String(spec.desc),
			Runtime:       awslambda.Runtime_PROVIDED_AL2023(),
			Architecture:  g.lambdaArchitecture(),
			Handler:       jsii.String("bootstrap"),
			Code:          awslambda.Code_FromAsset(jsii.String(filepath.Join(cfg.AssetDir, name)), nil),
			Role:          role,
			MemorySize:    jsii.Number(spec.memory),
			Timeout:       awscdk.Duration_Seconds(jsii.Number(spec.timeout)),
			Environment:   &fenv,
			LogGroup:      logs,
			LoggingFormat: awslambda.LoggingFormat_JSON,

			ReservedConcurrentExecutions: reserved,
		})
		g.Functions[name] = fn
		g.FunctionLogs[name] = logs
		g.Roles[name] = role
	}
	g.addWakeRole()
	g.Functions[contract.FnWorkerAPI].AddEnvironment(jsii.String(contract.EnvWakeRoleArn), g.WakeRole.RoleArn(), nil)
	g.grantFunctions()
}

func (g *Galley) lambdaArchitecture() awslambda.Architecture {
	if g.Config.LambdaArchitecture == ArchX8664 {
		return awslambda.Architecture_X86_64()
	}
	return awslambda.Architecture_ARM_64()
}

func titled(name string) string {
	switch name {
	case contract.FnWorkerAPI:
		return "WorkerApi"
	}
	return strings.ToUpper(name[:1]) + name[1:]
}
