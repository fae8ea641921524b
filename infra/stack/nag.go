package stack

import (
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
	"github.com/galley-run/galley/pkg/contract"
)

// suppress records one cdk-nag finding as accepted on a construct (and its
// children), with the reason, limited to appliesTo findings when given.
func suppress(c constructs.IConstruct, id, reason string, appliesTo ...any) {
	s := &cdknag.NagPackSuppression{Id: jsii.String(id), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		s.AppliesTo = &appliesTo
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{s}, jsii.Bool(true))
}

func regex(re string) any { return &cdknag.RegexAppliesTo{Regex: jsii.String(re)} }

// Patterns of the wildcard resources cdk-nag reports (IAM5), as regular
// expressions over its "Resource::<...>" findings.
const (
	nagTableIndexes = `/^Resource::<Table[A-Za-z0-9]+\.Arn>\/index\/\*$/g`
	nagClusterTasks = `/^Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task\/<Cluster[A-Za-z0-9]+>\/\*$/g`
)

// addNagSuppressions accepts the AwsSolutions findings that are deliberate,
// each narrowed to the finding it covers and with the reason.
func (g *Galley) addNagSuppressions() {
	queues := "Resource::arn:<AWS::Partition>:sqs:<AWS::Region>:<AWS::AccountId>:" + g.Config.QueuePrefix() + "*"

	const (
		whyIndexes = "The table is named; the /index/* pattern covers only its own global secondary indexes (gsi1), " +
			"which queries by the secondary key need."
		whyQueues = "Doorbell queues are made at run time, one per topic (a run's mailbox, a worker's inbox), so their " +
			"names are unknown at deploy; the pattern confines access to this house's prefix, and every statement " +
			"requires aws:SecureTransport."
		whyTasks = "ECS assigns task IDs at RunTask, so tasks cannot be named at deploy; the pattern covers only this " +
			"cluster's tasks and every statement also requires ecs:cluster to be this cluster."
	)
	for _, name := range contract.FunctionNames {
		suppress(g.Roles[name], "AwsSolutions-IAM5", whyIndexes, regex(nagTableIndexes))
	}
	for _, name := range []string{contract.FnEffects, contract.FnMailbox, contract.FnWorkerAPI, contract.FnReconciler, contract.FnOperator} {
		suppress(g.Roles[name], "AwsSolutions-IAM5", whyQueues, queues)
	}
	suppress(g.WakeRole, "AwsSolutions-IAM5", whyQueues+" Each session of this role carries a session policy "+
		"naming one worker's queue, so what a session may receive is that queue alone.", queues)
	for _, name := range []string{contract.FnEffects, contract.FnReads, contract.FnWorkerAPI, contract.FnReconciler, contract.FnOperator} {
		suppress(g.Roles[name], "AwsSolutions-IAM5", whyTasks, regex(nagClusterTasks))
	}
	const whyListTasks = "ecs:ListTasks names no task (it lists a cluster's tasks by startedBy), so AWS requires " +
		"Resource *; the statement's ecs:cluster condition keeps it to the worker cluster."
	for _, name := range []string{contract.FnEffects, contract.FnReads, contract.FnWorkerAPI, contract.FnOperator} {
		suppress(g.Roles[name], "AwsSolutions-IAM5", whyListTasks, "Resource::*")
	}
	// One finding covers every Resource * statement of a role.
	suppress(g.Roles[contract.FnReconciler], "AwsSolutions-IAM5", whyListTasks+" sqs:ListQueues (the hourly sweep of idle "+
		"doorbell queues) supports no resource-level permission either, so AWS requires Resource * too; it only "+
		"lists queue names, and the sweep's sqs:ListQueueTags and sqs:DeleteQueue stay on this house's queue prefix.",
		"Resource::*")
	suppress(g.Roles[contract.FnEffects], "AwsSolutions-IAM5",
		"Snapshots are named by worktree at run time (snapshot.WorktreeKey: house/worktree/worktree), session "+
			"archives by worker (snapshot.SessionKey: house/worker/session); a release deletes its worktree's, a "+
			"settle a parked worker's archive, and the pattern confines the effects function to this house's prefix.",
		regex(g.nagSnapshots()))
	for _, name := range []string{contract.FnReconciler, contract.FnOperator} {
		suppress(g.Roles[name], "AwsSolutions-IAM5",
			"Session archives are named by worker at run time (snapshot.SessionKey: house/worker/session); a "+
				"settle deletes a parked worker's (docs/parking.md), and the pattern confines the function to "+
				"this house's prefix.", regex(g.nagSnapshots()))
	}
	suppress(g.ExecutionRole, "AwsSolutions-IAM5",
		"ecr:GetAuthorizationToken supports no resource-level permission (AWS requires Resource *); "+
			"the image pull itself is scoped to the asset repository.", "Resource::*")

	suppress(g.EgressExecutionRole, "AwsSolutions-IAM5",
		"ecr:GetAuthorizationToken supports no resource-level permission (AWS requires Resource *); "+
			"the image pull itself is scoped to the asset repository.", "Resource::*")

	suppress(g.TokenSecret, "AwsSolutions-SMG4",
		"kitchn reads the token from a file in its registry, so a rotation must write the new token there too: "+
			"the operator rotates with put-secret-value (docs/deploy.md), and galley accepts the current and the "+
			"previous version while kitchn's copy changes.")
	suppress(g.WorkerSecret, "AwsSolutions-SMG4",
		"The key signs the credentials of running workers: a scheduled rotation would cut every running worker "+
			"off its worker API; the operator rotates it between workloads (docs/deploy.md).")
	suppress(g.OperatorTokenSecret, "AwsSolutions-SMG4",
		"The operator holds the token in a file for the galley commands and types it into the console: a "+
			"scheduled rotation would lock them out unannounced; the operator rotates with put-secret-value "+
			"(docs/operations.md), taking effect within the token cache.")
	suppress(g.EgressSecret, "AwsSolutions-SMG4",
		"ECS injects the secret into the egress proxy and each worker at task start: a scheduled rotation would "+
			"leave the running workers holding a value the proxy no longer takes; the operator rotates it between "+
			"workloads (put-secret-value, then a new deployment of the proxy service: docs/deploy.md).")
	for _, name := range sortedKeys(g.ProviderSecrets) {
		suppress(g.ProviderSecrets[name], "AwsSolutions-SMG4",
			"The value is issued by an outside provider (Anthropic, OpenAI, the git host), which no rotation "+
				"function can reissue; the operator rotates it there and puts the new value (docs/deploy.md).")
	}

	suppress(g.API, "AwsSolutions-APIG4",
		"Every route authenticates in its function before doing anything: kitchn's routes and the /v1/ catch-all "+
			"compare the bearer token with the Secrets Manager secret (401 otherwise), the worker routes check "+
			"per-worker tokens, the operator routes compare the operator token with its own secret. "+
			"IAM, Cognito and JWT authorizers cannot verify either token, and a Lambda authorizer would repeat the "+
			"same check in a second invocation per call.")

	for _, family := range g.Config.AgentFamilies {
		suppress(g.TaskDefinitions[family], "AwsSolutions-ECS2",
			"The container environment holds configuration only (house, repository URL, API endpoint, workspace paths, "+
				"git user name); the provider keys and the git credential are container secrets that ECS reads from "+
				"Secrets Manager with the execution role at task start, so no secret value is in the task definition or "+
				"RunTask's overrides (asserted by the infra tests).")
	}

	suppress(g.EgressTaskDefinition, "AwsSolutions-ECS2",
		"The container environment holds configuration only (listen address, the house's allowlist, the "+
			"deployment's own destinations); the egress secret is a container secret that ECS reads from Secrets "+
			"Manager with the execution role at task start (asserted by the infra tests).")
	suppress(g.EgressCluster, "AwsSolutions-ECS4",
		"The cluster runs the one egress proxy task; ECS's own service metrics (CPUUtilization, "+
			"MemoryUtilization in AWS/ECS, free) and the proxy's log cover it, and Container Insights would bill "+
			"custom metrics for a single task.")

	suppress(g.ReconcilerDLQ, "AwsSolutions-SQS3",
		"This queue is itself the dead-letter queue of the EventBridge rule's Lambda target; cdk-nag recognizes "+
			"only SQS redrive policies as dead-letter use.")
	suppress(g.ReconcilerFailures, "AwsSolutions-SQS3",
		"This queue is itself the on-failure destination of the reconciler's asynchronous invocations (a "+
			"dead-letter queue in all but name); cdk-nag recognizes only SQS redrive policies as dead-letter use.")
}
