package awslocal

import "github.com/galley-run/galley/pkg/lambdaapp"

// FunctionSpec is what the template does not say of a function and the
// local stack must: how many instances (emulators) it may scale to, as
// Lambda scales a function to its concurrent requests. Everything else —
// routes, timeouts, memory, environment, role — comes from the template.
type FunctionSpec struct {
	// MaxInstances bounds the function's emulators, started on demand as
	// concurrent requests need them. The mailbox holds one per waiting
	// coordinator; the worker API holds none (harnesses wait on their own
	// doorbell queues), but a burst of launches calls it from every new
	// harness at once.
	MaxInstances int
}

// Functions are the six functions' specs, by galley's name for them.
var Functions = map[lambdaapp.Function]FunctionSpec{
	lambdaapp.Effects:    {MaxInstances: 6},
	lambdaapp.Reads:      {MaxInstances: 6},
	lambdaapp.Mailbox:    {MaxInstances: 8},
	lambdaapp.WorkerAPI:  {MaxInstances: 32},
	lambdaapp.Reconciler: {MaxInstances: 2},
	// One per open long poll on a worker's events, and the console's list.
	lambdaapp.Operator: {MaxInstances: 6},
}
