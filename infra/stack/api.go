package stack

import (
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscertificatemanager"
	"github.com/aws/jsii-runtime-go"
	"github.com/galley-run/galley/pkg/contract"
)

// Route is one API route and the function that serves it.
type Route struct {
	Method   string
	Path     string
	Function string
}

// Key is the route key as API Gateway writes it ("POST /v1/effects").
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes are the HTTP API's routes: kitchn's (contract.KitchnRoutes),
// then the others. Every /v1/ request that none of kitchn's routes takes
// (an unknown path, or a known path with another method) takes the
// catch-all ANY /v1/{proxy+} to the reads function, which authenticates it
// before anything else, as the protocol asks: 401 without kitchn's token,
// 404 with it. API Gateway prefers a full match to the greedy route, so the
// catch-all shadows none of them. Paths outside /v1/ that no route takes
// answer 404 from the gateway without invoking anything. The worker-facing
// API (package workerapi) all goes to one function, by two routes: the one
// call made without a worker token, the bootstrap-code exchange, has a
// route of its own so that it has a throttle of its own (API Gateway
// prefers it to the greedy route), and every other worker call takes the
// greedy route.
var Routes = slices.Concat(kitchnRoutes(), []Route{
	{"POST", contract.WorkerAPIPrefix + greedy, contract.FnWorkerAPI},
	// After the greedy route, so that the integration they share keeps
	// the logical ID it had before this route (order decides nothing in
	// API Gateway, which prefers the exact route).
	{"POST", contract.PathWorkerCredential, contract.FnWorkerAPI},
	// Last, so that every other route keeps its logical ID; the reads
	// function reads the bearer token already, and serves it through its
	// one integration.
	{"ANY", contract.KitchnPrefix + greedy, contract.FnReads},
	// The operator's routes (package operator): the API, the console's
	// files, and /operator, which redirects to the console (a greedy
	// route takes no empty path). kitchn's token opens none of them.
	{"ANY", contract.OperatorPrefix + greedy, contract.FnOperator},
	{"GET", contract.PathOperator, contract.FnOperator},
	// The console's login, exact so that it has a throttle of its own
	// (API Gateway prefers it to the greedy route; same function and
	// integration). Last, so that every other route keeps its logical ID.
	{"POST", contract.PathOperatorLogin, contract.FnOperator},
})

// greedy is API Gateway's greedy path variable: every path below.
const greedy = "{proxy+}"

// kitchnRoutes are kitchn's routes as the stack's.
func kitchnRoutes() []Route {
	rs := make([]Route, len(contract.KitchnRoutes))
	for i, r := range contract.KitchnRoutes {
		rs[i] = Route(r)
	}
	return rs
}

// Route keys throttled apart from the stage's default (Config's
// RouteThrottles).
const (
	// CredentialRouteKey is the one route a caller takes without a token.
	CredentialRouteKey = "POST " + contract.PathWorkerCredential
	// WorkerRouteKey is every other call of the workers.
	WorkerRouteKey = "POST " + contract.WorkerAPIPrefix + greedy
	// CatchAllRouteKey is every /v1/ request no route of kitchn's takes.
	CatchAllRouteKey = "ANY " + contract.KitchnPrefix + greedy
	// OperatorRouteKey is every call of the operator API and console,
	// and OperatorRedirectRouteKey the redirect to the console.
	OperatorRouteKey         = "ANY " + contract.OperatorPrefix + greedy
	OperatorRedirectRouteKey = "GET " + contract.PathOperator
	// OperatorLoginRouteKey is the console's login, the one operator call
	// made without a session: a guessed token costs a request.
	OperatorLoginRouteKey = "POST " + contract.PathOperatorLogin
)

// OperatorLoginThrottle is the login route's throttle: a person logs in a
// few times a day, so one a second with a burst of five leaves them room
// and holds a guesser to 86,400 tries a day, in a bucket of its own (the
// operator function throttles logins again, per client).
var OperatorLoginThrottle = Throttle{Rate: 1, Burst: 5}

// OperatorThrottle is the operator routes' throttle: one person's
// console (a list every 2 s, a long poll per open worker) and commands
// fit well within it, and a flood on them spends none of kitchn's budget.
var OperatorThrottle = Throttle{Rate: 10, Burst: 20}

// CatchAllThrottle is the catch-all route's throttle. kitchn never calls a
// path galley does not serve, so only strangers take that route: a tight
// bucket of its own keeps a flood of them from spending kitchn's budget,
// whether API Gateway counts the stage's default per route or for the
// whole stage.
var CatchAllThrottle = Throttle{Rate: 5, Burst: 10}

// Throttle is a route's throttle: a token bucket of Burst requests that
// refills at Rate requests a second.
type Throttle struct {
	Rate  int
	Burst int
}

// RouteThrottles are the throttles of the routes that do not take the
// stage's default (ThrottleRate, ThrottleBurst), by route key: the stage's
// RouteSettings.
func (c Config) RouteThrottles() map[string]Throttle {
	return map[string]Throttle{
		CredentialRouteKey: {c.CredentialThrottleRate, c.CredentialThrottleBurst},
		WorkerRouteKey:     {c.WorkerThrottleRate, c.WorkerThrottleBurst},
		CatchAllRouteKey:   CatchAllThrottle,
		OperatorRouteKey:   OperatorThrottle,
		// Its own bucket too: only kitchn's routes take the default.
		OperatorRedirectRouteKey: OperatorThrottle,
		OperatorLoginRouteKey:    OperatorLoginThrottle,
	}
}

// AwaitRouteKey is the long-poll route whose failures have their own alarm.
var AwaitRouteKey = contract.RouteAwait.Pattern()

// addAPI makes the HTTP API with a throttled, access-logged default stage.
func (g *Galley) addAPI() {
	cfg := g.Config
	var domain awsapigatewayv2.DomainName
	if cfg.DomainName != "" {
		domain = awsapigatewayv2.NewDomainName(g.Stack, jsii.String("Domain"), &awsapigatewayv2.DomainNameProps{
			DomainName:  jsii.String(cfg.DomainName),
			Certificate: awscertificatemanager.Certificate_FromCertificateArn(g.Stack, jsii.String("Certificate"), jsii.String(cfg.CertificateArn)),
		})
	}
	g.API = awsapigatewayv2.NewHttpApi(g.Stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(cfg.Prefix()),
		Description:        jsii.String("galley HTTP worker protocol for kitchn house " + cfg.House),
		CreateDefaultStage: jsii.Bool(false),
		// With a custom domain, kitchn and the workers use only it.
		DisableExecuteApiEndpoint: jsii.Bool(domain != nil),
	})
	stageOpts := &awsapigatewayv2.HttpStageOptions{
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(float64(cfg.ThrottleRate)),
			BurstLimit: jsii.Number(float64(cfg.ThrottleBurst)),
		},
	}
	if domain != nil {
		stageOpts.DomainMapping = &awsapigatewayv2.DomainMappingOptions{DomainName: domain}
	}
	stage := g.API.AddStage(jsii.String("DefaultStage"), stageOpts)
	g.Stage = stage

	// Access logs as JSON, with no header, body or query: handles and
	// tokens travel in bodies and headers only. "house" is a literal so the
	// await-failure metric filter can carry it as a dimension; status is a
	// number so filters can compare it.
	g.AccessLogs = g.logGroup("AccessLogs")
	format := `{"requestId":"$context.requestId","requestTime":"$context.requestTime","ip":"$context.identity.sourceIp",` +
		`"userAgent":"$context.identity.userAgent","routeKey":"$context.routeKey","status":$context.status,` +
		`"protocol":"$context.protocol","responseLength":"$context.responseLength","responseLatency":"$context.responseLatency",` +
		`"integrationStatus":"$context.integrationStatus","integrationLatency":"$context.integrationLatency",` +
		`"integrationError":"$context.integrationErrorMessage","error":"$context.error.message",` +
		`"house":"` + cfg.House + `"}`
	cfnStage := stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	cfnStage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: g.AccessLogs.LogGroupArn(),
		Format:         jsii.String(format),
	})

	if domain != nil {
		g.Endpoint = jsii.String("https://" + cfg.DomainName)
		awscdk.NewCfnOutput(g.Stack, jsii.String("CustomDomainTarget"), &awscdk.CfnOutputProps{
			Description: jsii.String("Point a DNS CNAME (or Route 53 alias) for " + cfg.DomainName + " at this name"),
			Value:       domain.RegionalDomainName(),
		})
	} else {
		// ApiEndpoint has no trailing slash; kitchn appends /v1/...
		g.Endpoint = g.API.ApiEndpoint()
	}
}

// addRoutes wires each route to its function, and gives the routes of
// RouteThrottles their own throttles: kitchn's routes alone take the
// stage's default, so whether API Gateway counts that default per route or
// for the whole stage, a flood on the workers' routes or the catch-all
// spends none of it.
func (g *Galley) addRoutes() {
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	routes := map[string]awsapigatewayv2.HttpRoute{}
	for _, r := range Routes {
		in, ok := integrations[r.Function]
		if !ok {
			in = awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(titled(r.Function)+"Integration"),
				g.Functions[r.Function], &awsapigatewayv2integrations.HttpLambdaIntegrationProps{
					PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
				})
			integrations[r.Function] = in
		}
		added := g.API.AddRoutes(&awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: in,
		})
		routes[r.Key()] = (*added)[0]
	}
	throttles := g.Config.RouteThrottles()
	settings := map[string]any{}
	for _, key := range sortedKeys(throttles) {
		t := throttles[key]
		// RouteSettings is free-form JSON to CloudFormation, so CDK would
		// write a typed property's keys as Go gives them
		// (throttlingRateLimit), not as API Gateway documents them.
		settings[key] = map[string]any{
			"ThrottlingRateLimit":  t.Rate,
			"ThrottlingBurstLimit": t.Burst,
		}
		// API Gateway refuses settings for a route it does not have yet.
		g.Stage.Node().AddDependency(routes[key])
	}
	g.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage).SetRouteSettings(settings)
}
