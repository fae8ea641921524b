package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// addReconcilerRule sends the worker cluster's task state changes to the
// reconciler. Two layers of retry, each with a queue for what is left:
// EventBridge retries a failed delivery (throttling, the function
// unreachable) for up to 6 hours, then puts the event in a TLS-only
// dead-letter queue; a delivered invocation is asynchronous, so the
// function's own errors are retried twice by Lambda and then go to the
// on-failure queue, instead of being dropped. Both queues are alarmed.
func (g *Galley) addReconcilerRule() {
	queue := func(id string) awssqs.Queue {
		return awssqs.NewQueue(g.Stack, jsii.String(id), &awssqs.QueueProps{
			Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:      jsii.Bool(true),
			RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		})
	}
	g.ReconcilerDLQ = queue("ReconcilerDeadLetters")
	g.ReconcilerFailures = queue("ReconcilerFailures")
	reconciler := g.Functions[contract.FnReconciler]
	// The destination grants the reconciler's role sqs:SendMessage on the
	// queue; it applies to every asynchronous invocation, so to both rules.
	reconciler.ConfigureAsyncInvoke(&awslambda.EventInvokeConfigOptions{
		OnFailure:     awslambdadestinations.NewSqsDestination(g.ReconcilerFailures),
		RetryAttempts: jsii.Number(2),
		MaxEventAge:   awscdk.Duration_Hours(jsii.Number(6)),
	})
	g.TaskStateRule = awsevents.NewRule(g.Stack, jsii.String("TaskStateChanges"), &awsevents.RuleProps{
		Description: jsii.String("galley worker tasks' state changes to the reconciler"),
		EventPattern: &awsevents.EventPattern{
			Source:     jsii.Strings("aws.ecs"),
			DetailType: jsii.Strings("ECS Task State Change"),
			Detail: &map[string]any{
				"clusterArn": []*string{g.Cluster.ClusterArn()},
			},
		},
	})
	g.TaskStateRule.AddTarget(awseventstargets.NewLambdaFunction(reconciler, &awseventstargets.LambdaFunctionProps{
		DeadLetterQueue: g.ReconcilerDLQ,
		MaxEventAge:     awscdk.Duration_Hours(jsii.Number(6)),
		RetryAttempts:   jsii.Number(20),
	}))
}

// HousekeepingRate is the reconciler's housekeeping tick.
const HousekeepingRate = "rate(5 minutes)"

// addHousekeepingRule ticks the reconciler every five minutes: on every
// tick it emits the StuckWorkers and LiveWorkers gauges the alarms watch,
// and at most hourly it deletes the idle doorbell queues. A missed tick
// costs nothing (the next one comes), so the target gets no dead-letter
// queue and a delivery is not tried past the next tick.
func (g *Galley) addHousekeepingRule() {
	g.HousekeepingRule = awsevents.NewRule(g.Stack, jsii.String("Housekeeping"), &awsevents.RuleProps{
		Description: jsii.String(fmt.Sprintf("galley: every 5 minutes the reconciler emits its worker gauges; "+
			"hourly it deletes doorbell queues idle for %d hours", g.Config.QueueIdleHours)),
		Schedule: awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(5))),
	})
	g.HousekeepingRule.AddTarget(awseventstargets.NewLambdaFunction(g.Functions[contract.FnReconciler], &awseventstargets.LambdaFunctionProps{
		MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(4)),
		RetryAttempts: jsii.Number(2),
	}))
}
