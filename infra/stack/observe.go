package stack

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// Alarm names (the suffix after "galley-<house>-"), which tests and
// docs/deploy.md refer to.
const (
	AlarmAPI5xx          = "api-5xx"
	AlarmAwaitFailures   = "await-failures"
	AlarmStuckWorkers    = "stuck-workers"
	AlarmWorkersOverCap  = "workers-over-cap"
	AlarmReconcilerDLQ   = "reconciler-dead-letters"
	AlarmReconcilerFails = "reconciler-failures"
	alarmFnErrorsSuffix  = "-errors"
	alarmFnThrottlesSuff = "-throttles"
)

// MetricAwaitFailures counts the await calls the gateway answered 5xx: a
// metric filter on the API's access log makes it, in galley's namespace
// with the house dimension (contract.MetricNamespace, MetricDimHouse).
const MetricAwaitFailures = "AwaitFailures"

func fiveMinutes() awscdk.Duration { return awscdk.Duration_Minutes(jsii.Number(5)) }

// awaitFailures counts await calls that the gateway answered with a 5xx:
// a function error, a function timeout, or the gateway's own 30 s limit.
func (g *Galley) awaitFailures() awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(contract.MetricNamespace),
		MetricName:    jsii.String(MetricAwaitFailures),
		DimensionsMap: &map[string]*string{contract.MetricDimHouse: jsii.String(g.Config.House)},
		Statistic:     jsii.String("Sum"),
		Period:        fiveMinutes(),
	})
}

// gauge is one of the gauges the reconciler emits on every housekeeping
// tick (embedded metric format, docs/deploy.md), at its 5-minute maximum.
func (g *Galley) gauge(name string) awscloudwatch.Metric {
	return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace:     jsii.String(contract.MetricNamespace),
		MetricName:    jsii.String(name),
		DimensionsMap: &map[string]*string{contract.MetricDimHouse: jsii.String(g.Config.House)},
		Statistic:     jsii.String("Maximum"),
		Period:        fiveMinutes(),
	})
}

func (g *Galley) stuckWorkers() awscloudwatch.Metric { return g.gauge(contract.MetricStuckWorkers) }

// liveWorkers counts the unsettled workers, which the launch cap counts.
// (The worker cluster runs no ECS service, the egress proxy's being in a
// cluster of its own, so Container Insights' per-service task counts never
// exist for it.)
func (g *Galley) liveWorkers() awscloudwatch.Metric { return g.gauge(contract.MetricLiveWorkers) }

// addAlarms makes one alarm per failure an operator must hear about.
func (g *Galley) addAlarms() {
	var topic awssns.ITopic
	if g.Config.AlarmTopicArn != "" {
		topic = awssns.Topic_FromTopicArn(g.Stack, jsii.String("AlarmTopic"), jsii.String(g.Config.AlarmTopicArn))
	}
	alarm := func(id, name, desc string, metric awscloudwatch.IMetric, threshold, periods float64, op awscloudwatch.ComparisonOperator) {
		a := awscloudwatch.NewAlarm(g.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(g.Config.Prefix() + "-" + name),
			AlarmDescription:   jsii.String(desc),
			Metric:             metric,
			Threshold:          jsii.Number(threshold),
			EvaluationPeriods:  jsii.Number(periods),
			ComparisonOperator: op,
			// No data means nothing happened: not an alarm.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		if topic != nil {
			a.AddAlarmAction(awscloudwatchactions.NewSnsAction(topic))
			a.AddOkAction(awscloudwatchactions.NewSnsAction(topic))
		}
		g.Alarms[name] = a
	}
	ge := awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
	sum5 := &awscloudwatch.MetricOptions{Period: fiveMinutes(), Statistic: jsii.String("Sum")}

	for _, name := range contract.FunctionNames {
		fn := g.Functions[name]
		alarm(titled(name)+"ErrorsAlarm", name+alarmFnErrorsSuffix,
			fmt.Sprintf("galley %s function: invocations failed (errors or timeouts)", name),
			fn.MetricErrors(sum5), 1, 1, ge)
		alarm(titled(name)+"ThrottlesAlarm", name+alarmFnThrottlesSuff,
			fmt.Sprintf("galley %s function: invocations throttled (account or function concurrency)", name),
			fn.MetricThrottles(sum5), 1, 1, ge)
	}
	alarm("Api5xxAlarm", AlarmAPI5xx, "galley API answered 5xx (kitchn reads these as failed or uncertain calls)",
		g.API.MetricServerError(sum5), 3, 1, ge)

	// The access log carries the await route's status; count its 5xx.
	awslogs.NewMetricFilter(g.Stack, jsii.String("AwaitFailuresFilter"), &awslogs.MetricFilterProps{
		LogGroup: g.AccessLogs,
		FilterPattern: awslogs.FilterPattern_Literal(jsii.String(
			fmt.Sprintf(`{ ($.routeKey = "%s") && ($.status >= 500) }`, AwaitRouteKey))),
		MetricNamespace: jsii.String(contract.MetricNamespace),
		MetricName:      jsii.String(MetricAwaitFailures),
		MetricValue:     jsii.String("1"),
		Dimensions:      &map[string]*string{contract.MetricDimHouse: jsii.String("$.house")},
		Unit:            awscloudwatch.Unit_COUNT,
	})
	alarm("AwaitFailuresAlarm", AlarmAwaitFailures,
		"galley deliveries/await failed (5xx, function timeout or the gateway's 30 s limit): coordinators stop hearing their workers",
		g.awaitFailures(), 1, 1, ge)

	alarm("StuckWorkersAlarm", AlarmStuckWorkers,
		"galley workers live without a heartbeat for 15 minutes (metric galley/StuckWorkers, emitted by the service)",
		g.stuckWorkers(), 1, 3, ge)

	alarm("WorkersOverCapAlarm", AlarmWorkersOverCap,
		fmt.Sprintf("live workers at maxWorkers (%d) for 10 minutes (metric galley/LiveWorkers): launches are refused "+
			"as rate-limited; raise maxWorkers, or look for workers that do not settle", g.Config.MaxWorkers),
		g.liveWorkers(), float64(g.Config.MaxWorkers), 2, ge)

	alarm("ReconcilerDeadLettersAlarm", AlarmReconcilerDLQ,
		"ECS task state changes EventBridge could not deliver to the reconciler for 6 hours: workers may not settle until the next observe",
		g.ReconcilerDLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: fiveMinutes(), Statistic: jsii.String("Maximum")}),
		1, 1, ge)

	alarm("ReconcilerFailuresAlarm", AlarmReconcilerFails,
		"reconciler invocations that failed in the function after Lambda's 2 retries (kept in the ReconcilerFailures queue): "+
			"a task state change not settled, or a housekeeping tick lost",
		g.ReconcilerFailures.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: fiveMinutes(), Statistic: jsii.String("Maximum")}),
		0, 1, awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD)
}

// addDashboard makes one dashboard with the API, the functions, the table,
// the workers, and every alarm's state.
func (g *Galley) addDashboard() {
	sum := func(m awscloudwatch.Metric, label string) awscloudwatch.IMetric {
		return m.With(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Label: jsii.String(label), Period: fiveMinutes()})
	}
	graph := func(title string, left []awscloudwatch.IMetric, right []awscloudwatch.IMetric) awscloudwatch.GraphWidget {
		p := &awscloudwatch.GraphWidgetProps{Title: jsii.String(title), Left: &left, Width: jsii.Number(12), Height: jsii.Number(6)}
		if right != nil {
			p.Right = &right
		}
		return awscloudwatch.NewGraphWidget(p)
	}
	var invocations, errors, throttles, durations []awscloudwatch.IMetric
	for _, name := range contract.FunctionNames {
		fn := g.Functions[name]
		invocations = append(invocations, sum(fn.MetricInvocations(nil), name))
		errors = append(errors, sum(fn.MetricErrors(nil), name+" errors"))
		throttles = append(throttles, sum(fn.MetricThrottles(nil), name+" throttles"))
		durations = append(durations, fn.MetricDuration(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Label: jsii.String(name + " p99"), Period: fiveMinutes()}))
	}
	api := g.API
	var alarms []interfacesawscloudwatch.IAlarmRef
	for _, name := range sortedKeys(g.Alarms) {
		alarms = append(alarms, g.Alarms[name])
	}
	g.Dashboard = awscloudwatch.NewDashboard(g.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(g.Config.Prefix()),
		Widgets: &[]*[]awscloudwatch.IWidget{
			{awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
				Title: jsii.String("galley " + g.Config.House + ": alarms"), Alarms: &alarms, Width: jsii.Number(24), Height: jsii.Number(4),
			})},
			{
				graph("API requests and errors", []awscloudwatch.IMetric{
					sum(api.MetricCount(nil), "requests"), sum(api.MetricClientError(nil), "4xx"), sum(api.MetricServerError(nil), "5xx"),
				}, nil),
				graph("API latency (p99)", []awscloudwatch.IMetric{
					api.MetricLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Label: jsii.String("latency p99")}),
					api.MetricIntegrationLatency(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Label: jsii.String("integration p99")}),
				}, nil),
			},
			{graph("Function invocations", invocations, nil), graph("Function duration (p99)", durations, nil)},
			{graph("Function errors", errors, nil), graph("Function throttles", throttles, nil)},
			{
				graph("Workers", []awscloudwatch.IMetric{g.liveWorkers().With(&awscloudwatch.MetricOptions{Label: jsii.String("live workers")})},
					[]awscloudwatch.IMetric{g.stuckWorkers().With(&awscloudwatch.MetricOptions{Label: jsii.String("stuck workers")})}),
				graph("await failures and reconciler failures", []awscloudwatch.IMetric{
					g.awaitFailures().With(&awscloudwatch.MetricOptions{Label: jsii.String("await 5xx")}),
					g.ReconcilerDLQ.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Label: jsii.String("undelivered events")}),
					g.ReconcilerFailures.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Label: jsii.String("failed invocations")}),
				}, nil),
			},
			{
				graph("DynamoDB capacity consumed", []awscloudwatch.IMetric{
					sum(g.Table.MetricConsumedReadCapacityUnits(nil), "read units"),
					sum(g.Table.MetricConsumedWriteCapacityUnits(nil), "write units"),
				}, nil),
				graph("DynamoDB conditional check failures and user errors", []awscloudwatch.IMetric{
					sum(g.Table.MetricConditionalCheckFailedRequests(nil), "conditional check failed"),
					sum(g.Table.MetricUserErrors(nil), "user errors"),
				}, nil),
			},
		},
	})
}

// addOutputs gives the operator the endpoint, the binding, and the token.
func (g *Galley) addOutputs() {
	out := func(id, desc string, value *string) {
		awscdk.NewCfnOutput(g.Stack, jsii.String(id), &awscdk.CfnOutputProps{Description: jsii.String(desc), Value: value})
	}
	cfg := g.Config
	out("Endpoint", "galley's HTTPS endpoint for kitchn", g.Endpoint)
	// The binding's endpoint is a token: build the JSON around it.
	binding := fmt.Sprintf(`{"backend":{"kind":"http","backend":%q,"credential":%q,"endpoint":"%s"}}`,
		cfg.Backend, cfg.Credential, *g.Endpoint)
	out("KitchnBinding", "paste into the house policy: the house's worker backend binding", jsii.String(binding))
	out("TokenSecretArn", "Secrets Manager secret holding kitchn's bearer token", g.TokenSecret.SecretArn())
	read := fmt.Sprintf("aws secretsmanager get-secret-value --region %s --secret-id %s --query SecretString --output text",
		*awscdk.Aws_REGION(), *g.TokenSecret.SecretArn())
	out("ReadTokenCommand", fmt.Sprintf("prints the token: write it to <registry>/private/%s/credentials/%s (mode 600)", cfg.House, cfg.Credential),
		jsii.String(read))
	out("AnthropicKeySecretArn", "fill in: aws secretsmanager put-secret-value --secret-id <arn> --secret-string <key>", g.ProviderSecrets[SecretAnthropic].SecretArn())
	out("OpenAIKeySecretArn", "fill in: aws secretsmanager put-secret-value --secret-id <arn> --secret-string <key>", g.ProviderSecrets[SecretOpenAI].SecretArn())
	out("GitCredentialSecretArn", "fill in: aws secretsmanager put-secret-value --secret-id <arn> --secret-string <token>", g.ProviderSecrets[SecretGit].SecretArn())
	out("TableName", "DynamoDB table with every galley record (retained on teardown)", g.Table.TableName())
	out("ClusterName", "ECS cluster running one task per worker", g.Cluster.ClusterName())
	out("EgressClusterName", "ECS cluster running the egress proxy", g.EgressCluster.ClusterName())
	out("EgressServiceName", "the egress proxy's ECS service (a new deployment restarts it: docs/deploy.md, Rotating)", g.EgressService.ServiceName())
	out("WorkspacesFileSystemId", "EFS file system of the git object cache, and of the worktrees of a stack deployed before they moved to the tasks' own storage (retained on teardown)", g.Workspaces.FileSystemId())
	out("DashboardName", "CloudWatch dashboard", g.Dashboard.DashboardName())
}
