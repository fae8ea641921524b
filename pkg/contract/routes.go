package contract

// The Lambda functions, six: each is a folder functions/<name> built to
// <asset dir>/<name>/bootstrap, with a role of its own, and serves one
// group of routes (docs/architecture.md).
const (
	FnEffects = "effects" // kitchn's effects and their lookup
	// FnReads answers kitchn's reads, and every /v1/ call no other route
	// takes (API Gateway's catch-all), which it authenticates first.
	FnReads   = "reads"
	FnMailbox = "mailbox" // the coordinator's mailbox: deliveries and runs/adopt
	// FnWorkerAPI serves the harnesses' calls (WorkerAPIPrefix).
	FnWorkerAPI = "workerapi"
	// FnReconciler takes ECS task state changes (settling workers) and,
	// every five minutes, the housekeeping: the metrics' gauges and, at
	// most hourly, the sweep of idle doorbell queues.
	FnReconciler = "reconciler"
	// FnOperator serves the operator API and console (OperatorPrefix),
	// with the operator token.
	FnOperator = "operator"
)

// FunctionNames lists every function, in the stack's order.
var FunctionNames = []string{FnEffects, FnReads, FnMailbox, FnWorkerAPI, FnReconciler, FnOperator}

// Route is one of kitchn's routes: a method, a path below the endpoint,
// and the function that serves it.
type Route struct {
	Method   string
	Path     string
	Function string
}

// Pattern is the route as net/http's ServeMux and API Gateway's route keys
// write it: "POST /v1/effects".
func (r Route) Pattern() string { return r.Method + " " + r.Path }

// KitchnPrefix is where kitchn's routes live: every call below it is
// authenticated by kitchn's bearer token before it is routed.
const KitchnPrefix = "/v1/"

// The paths of kitchn's routes, below the endpoint.
const (
	PathEffects     = "/v1/effects"
	PathLookup      = "/v1/effects/lookup"
	PathDescriptor  = "/v1/descriptor"
	PathInventory   = "/v1/inventory"
	PathObserve     = "/v1/workers/observe"
	PathUsage       = "/v1/workers/usage"
	PathNext        = "/v1/deliveries/next"
	PathAcknowledge = "/v1/deliveries/acknowledge"
	PathAwait       = "/v1/deliveries/await"
	PathAdopt       = "/v1/runs/adopt"
)

// kitchn's routes. A GET carries no body; every POST carries one JSON
// object.
var (
	RouteEffects     = Route{"POST", PathEffects, FnEffects}
	RouteLookup      = Route{"POST", PathLookup, FnEffects}
	RouteDescriptor  = Route{"GET", PathDescriptor, FnReads}
	RouteInventory   = Route{"GET", PathInventory, FnReads}
	RouteObserve     = Route{"POST", PathObserve, FnReads}
	RouteUsage       = Route{"POST", PathUsage, FnReads}
	RouteNext        = Route{"POST", PathNext, FnMailbox}
	RouteAcknowledge = Route{"POST", PathAcknowledge, FnMailbox}
	RouteAwait       = Route{"POST", PathAwait, FnMailbox}
	RouteAdopt       = Route{"POST", PathAdopt, FnMailbox}
)

// KitchnRoutes lists kitchn's routes, in the stack's order (which keeps
// each API Gateway route's logical ID).
var KitchnRoutes = []Route{
	RouteEffects, RouteLookup, RouteDescriptor, RouteInventory, RouteObserve, RouteUsage,
	RouteNext, RouteAcknowledge, RouteAwait, RouteAdopt,
}

// The worker API (package workerapi), which the harnesses call with their
// own credentials, never kitchn's token: every call is a POST below
// WorkerAPIPrefix. PathWorkerCredential, the exchange of a bootstrap code,
// is the one call made without a credential, and has a throttle of its
// own on AWS.
const (
	WorkerAPIPrefix      = "/worker/v1/"
	PathWorkerCredential = WorkerAPIPrefix + "credential"
)

// The operator API and console (package operator), below OperatorPrefix;
// PathOperator itself redirects to the console. PathOperatorLogin, the
// one operator call made without a session, has a throttle of its own on
// AWS. kitchn's token opens none of them.
const (
	PathOperator      = "/operator"
	OperatorPrefix    = PathOperator + "/"
	PathOperatorLogin = OperatorPrefix + "v1/login"
)
