package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// taskArnPattern names every task of the worker cluster.
func (g *Galley) taskArnPattern() *string {
	return g.Stack.FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("ecs"),
		Resource:     jsii.String("task"),
		ResourceName: jsii.String(*g.Cluster.ClusterName() + "/*"),
		ArnFormat:    awscdk.ArnFormat_SLASH_RESOURCE_NAME,
	})
}

// queueArnPattern names every doorbell queue of this house.
func (g *Galley) queueArnPattern() *string {
	return g.Stack.FormatArn(&awscdk.ArnComponents{
		Service:   jsii.String("sqs"),
		Resource:  jsii.String(g.Config.QueuePrefix() + "*"),
		ArnFormat: awscdk.ArnFormat_NO_RESOURCE_NAME,
	})
}

// addWakeRole makes the role whose sessions wait on one worker's doorbell
// queue each: the worker API assumes it with a session policy naming the
// worker's queue and hands the session to that worker's harness, so an
// idle worker waits on SQS, not in a Lambda invocation. Only the worker
// API's role may assume it; a session lasts at most an hour (role
// chaining), and the harness asks again before it ends.
func (g *Galley) addWakeRole() {
	g.WakeRole = awsiam.NewRole(g.Stack, jsii.String("WorkerWakeRole"), &awsiam.RoleProps{
		AssumedBy:          awsiam.NewArnPrincipal(g.Roles[contract.FnWorkerAPI].RoleArn()),
		Description:        jsii.String("galley: one worker's harness waits on its own doorbell queue (session policy names it)"),
		MaxSessionDuration: awscdk.Duration_Hours(jsii.Number(1)),
	})
}

// grantFunctions gives each function's role exactly what its routes need.
func (g *Galley) grantFunctions() {
	stmt := func(role awsiam.Role, sid string, actions []string, resources []*string, conditions map[string]any) {
		p := &awsiam.PolicyStatementProps{
			Sid:       jsii.String(sid),
			Actions:   jsii.Strings(actions...),
			Resources: &resources,
		}
		if conditions != nil {
			p.Conditions = &conditions
		}
		role.AddToPolicy(awsiam.NewPolicyStatement(p))
	}
	tls := map[string]any{"Bool": map[string]any{"aws:SecureTransport": "true"}}
	inCluster := map[string]any{"ArnEquals": map[string]any{"ecs:cluster": g.Cluster.ClusterArn()}}
	queues := []*string{g.queueArnPattern()}
	tasks := []*string{g.taskArnPattern()}
	token := []*string{g.TokenSecret.SecretArn()}
	// The doorbell (pkg/doorbell/sqsbell) makes a topic's queue on first
	// use, tagged (tagging on create needs TagQueue); it never calls
	// GetQueueUrl. DeleteMessage also authorizes DeleteMessageBatch.
	ring := []string{"sqs:CreateQueue", "sqs:TagQueue", "sqs:SendMessage"}
	listen := []string{"sqs:CreateQueue", "sqs:TagQueue", "sqs:ReceiveMessage", "sqs:DeleteMessage"}
	workerKey := []*string{g.WorkerSecret.SecretArn()}
	// ListTasks (finding a worker's task by startedBy) has no task resource
	// to name: AWS requires Resource "*"; the condition keeps it to the
	// worker cluster.
	listTasks := func(role awsiam.Role) {
		stmt(role, "ListWorkerTasks", []string{"ecs:ListTasks"}, []*string{jsii.String("*")}, inCluster)
	}
	// runTasks lets role start worker tasks: a launch's, or a parked
	// worker's resumed one (docs/parking.md), of the worker task
	// definition in the worker cluster, with their tags, passing the
	// task's two roles to ECS only.
	runTasks := func(role awsiam.Role) {
		stmt(role, "RunWorkerTasks", []string{"ecs:RunTask"}, g.workerTaskDefinitionArns(), inCluster)
		// RunTask's tags (house, run, worker, key) need TagResource on create.
		stmt(role, "TagWorkerTasksOnRun", []string{"ecs:TagResource"}, tasks,
			map[string]any{"StringEquals": map[string]any{"ecs:CreateAction": "RunTask"}})
		stmt(role, "PassWorkerRolesToEcsTasks", []string{"iam:PassRole"},
			[]*string{g.TaskRole.RoleArn(), g.ExecutionRole.RoleArn()},
			map[string]any{"StringEquals": map[string]any{"iam:PassedToService": "ecs-tasks.amazonaws.com"}})
	}
	// houseSnapshots are the house's objects in the snapshot bucket: a
	// released worktree's snapshot, a settled worker's session archive
	// (service.WithSnapshots, service.WithParkedFiles). S3 answers a
	// missing key's delete with success, so no list right is needed.
	houseSnapshots := []*string{g.Snapshots.ArnForObjects(jsii.String(g.Config.House + "/*"))}

	effects := g.Roles[contract.FnEffects]
	g.Table.GrantReadWriteData(effects)
	runTasks(effects)
	stmt(effects, "StopAndDescribeWorkerTasks", []string{"ecs:StopTask", "ecs:DescribeTasks"}, tasks, inCluster)
	listTasks(effects)
	stmt(effects, "RingDoorbells", ring, queues, tls)
	stmt(effects, "ReadBearerToken", []string{"secretsmanager:GetSecretValue"}, token, nil)
	stmt(effects, "ReadGitCredential", []string{"secretsmanager:GetSecretValue"},
		[]*string{g.ProviderSecrets[SecretGit].SecretArn()}, nil)
	stmt(effects, "ReadWorkerSigningKey", []string{"secretsmanager:GetSecretValue"}, workerKey, nil)
	// A worktree's release deletes its snapshot, a settle of a parked
	// worker its session archive, below the house's prefix only.
	stmt(effects, "DeleteReleasedWorktreesSnapshots", []string{"s3:DeleteObject"}, houseSnapshots, nil)

	reads := g.Roles[contract.FnReads]
	g.Table.GrantReadData(reads)
	stmt(reads, "DescribeWorkerTasks", []string{"ecs:DescribeTasks"}, tasks, inCluster)
	listTasks(reads)
	stmt(reads, "ReadBearerToken", []string{"secretsmanager:GetSecretValue"}, token, nil)
	stmt(reads, "ReadGitCredential", []string{"secretsmanager:GetSecretValue"},
		[]*string{g.ProviderSecrets[SecretGit].SecretArn()}, nil)

	mailbox := g.Roles[contract.FnMailbox]
	g.Table.GrantReadWriteData(mailbox)
	stmt(mailbox, "ListenOnDoorbells", listen, queues, tls)
	stmt(mailbox, "ReadBearerToken", []string{"secretsmanager:GetSecretValue"}, token, nil)

	// The worker API rings its coordinator's doorbell (questions, reports)
	// and makes each worker's inbox doorbell when it grants the worker's
	// harness its wait; it never listens (an idle worker holds no
	// invocation). It never reads kitchn's token: workers authenticate
	// with their own.
	worker := g.Roles[contract.FnWorkerAPI]
	g.Table.GrantReadWriteData(worker)
	stmt(worker, "RingAndMakeDoorbells", ring, queues, tls)
	stmt(worker, "ReadWorkerSigningKey", []string{"secretsmanager:GetSecretValue"}, workerKey, nil)
	stmt(worker, "GrantWorkersTheirWait", []string{"sts:AssumeRole"}, []*string{g.WakeRole.RoleArn()}, nil)
	// A parking report that input raced resumes the worker at once: a
	// new task (docs/parking.md), after reading the parked one; a resume
	// whose worker settled meanwhile stops what it started.
	runTasks(worker)
	stmt(worker, "StopAndDescribeWorkerTasks", []string{"ecs:StopTask", "ecs:DescribeTasks"}, tasks, inCluster)
	listTasks(worker)

	// A grant's session may receive only what both the wake role and the
	// grant's session policy (one queue) allow.
	stmt(g.WakeRole, "WaitOnDoorbells", []string{"sqs:ReceiveMessage", "sqs:DeleteMessage"}, queues, tls)

	// The reconciler settles workers; a settled worker's report rings the
	// coordinator's doorbell so a waiting await wakes at once. It also
	// stops a task that outlives its settled worker (found by startedBy),
	// settles a worker whose task is gone,
	// and at most hourly deletes the doorbell queues nobody listened on for
	// queueIdleHours (sqsbell's Sweep). ListQueues names no queue, so AWS
	// requires Resource "*" (it only lists names); reading tags and
	// deleting stay on this house's queues.
	reconciler := g.Roles[contract.FnReconciler]
	g.Table.GrantReadWriteData(reconciler)
	stmt(reconciler, "RingDoorbells", ring, queues, tls)
	stmt(reconciler, "ListDoorbellQueues", []string{"sqs:ListQueues"}, []*string{jsii.String("*")}, tls)
	stmt(reconciler, "SweepIdleDoorbells", []string{"sqs:ListQueueTags", "sqs:DeleteQueue"}, queues, tls)
	// Housekeeping reads the tasks of unsettled workers (DescribeTasks) to
	// settle those whose task is gone, a lost STOPPED event.
	stmt(reconciler, "StopAndDescribeWorkerTasks", []string{"ecs:StopTask", "ecs:DescribeTasks"}, tasks, inCluster)
	listTasks(reconciler)
	// It starts a parked worker's resumed task when the parked task's end
	// lets an owed resume start, or housekeeping finds input waiting
	// (docs/parking.md); no other task: worktrees live on the tasks' own
	// storage, so a release leaves no cleanup task to start again. It
	// deletes a worker's session archive once its compute has ended after
	// its settle.
	// The resumed task's bootstrap code is derived from the worker
	// signing key, as a launch's is.
	runTasks(reconciler)
	stmt(reconciler, "ReadWorkerSigningKey", []string{"secretsmanager:GetSecretValue"}, workerKey, nil)
	stmt(reconciler, "DeleteSettledWorkersSessions", []string{"s3:DeleteObject"}, houseSnapshots, nil)

	// The operator function lists workers and reads their event logs,
	// long polls a worker's event doorbell (woken by each append), and
	// acts through the service's own paths: a cancel settles the worker
	// (ringing its coordinator's doorbell) and stops its task, a revoke
	// writes the worker record. It reads the operator token only: neither
	// kitchn's token nor the signing key, and it starts no task (a cancel
	// resumes nothing).
	operator := g.Roles[contract.FnOperator]
	g.Table.GrantReadWriteData(operator)
	stmt(operator, "ListenAndRingDoorbells", []string{"sqs:CreateQueue", "sqs:TagQueue", "sqs:SendMessage",
		"sqs:ReceiveMessage", "sqs:DeleteMessage"}, queues, tls)
	stmt(operator, "ReadOperatorToken", []string{"secretsmanager:GetSecretValue"},
		[]*string{g.OperatorTokenSecret.SecretArn()}, nil)
	stmt(operator, "StopAndDescribeWorkerTasks", []string{"ecs:StopTask", "ecs:DescribeTasks"}, tasks, inCluster)
	listTasks(operator)
	// Its cancel of a parked worker deletes the worker's session archive.
	stmt(operator, "DeleteSettledWorkersSessions", []string{"s3:DeleteObject"}, houseSnapshots, nil)
}
