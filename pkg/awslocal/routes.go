package awslocal

import (
	"time"

	"github.com/galley-run/galley/local/gateway"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

// Routes are the HTTP API's routes and their functions, as infra/stack
// declares them (stack.Routes; the CDK app is another module, so this is a
// copy: keep both in step).
var Routes = []gateway.Route{
	{Method: "POST", Path: "/v1/effects", Function: string(lambdaapp.Effects)},
	{Method: "POST", Path: "/v1/effects/lookup", Function: string(lambdaapp.Effects)},
	{Method: "GET", Path: "/v1/descriptor", Function: string(lambdaapp.Reads)},
	{Method: "GET", Path: "/v1/inventory", Function: string(lambdaapp.Reads)},
	{Method: "POST", Path: "/v1/workers/observe", Function: string(lambdaapp.Reads)},
	{Method: "POST", Path: "/v1/workers/usage", Function: string(lambdaapp.Reads)},
	{Method: "POST", Path: "/v1/deliveries/next", Function: string(lambdaapp.Mailbox)},
	{Method: "POST", Path: "/v1/deliveries/acknowledge", Function: string(lambdaapp.Mailbox)},
	{Method: "POST", Path: "/v1/deliveries/await", Function: string(lambdaapp.Mailbox)},
	{Method: "POST", Path: "/v1/runs/adopt", Function: string(lambdaapp.Mailbox)},
	{Method: "POST", Path: "/worker/v1/{proxy+}", Function: string(lambdaapp.WorkerAPI)},
}

// FunctionSpec is how one function runs here: its timeout (as the CDK app
// sets it) and how many instances (emulators) it may scale to.
type FunctionSpec struct {
	Timeout time.Duration
	// MaxInstances bounds the function's emulators, started on demand as
	// concurrent requests need them. The worker API holds one long poll per
	// running worker, and the mailbox one per waiting coordinator.
	MaxInstances int
}

// Functions are the five functions' specs.
var Functions = map[lambdaapp.Function]FunctionSpec{
	lambdaapp.Effects:    {Timeout: 20 * time.Second, MaxInstances: 6},
	lambdaapp.Reads:      {Timeout: 10 * time.Second, MaxInstances: 6},
	lambdaapp.Mailbox:    {Timeout: 29 * time.Second, MaxInstances: 8},
	lambdaapp.WorkerAPI:  {Timeout: 29 * time.Second, MaxInstances: 32},
	lambdaapp.Reconciler: {Timeout: 30 * time.Second, MaxInstances: 1},
}
