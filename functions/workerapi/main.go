// Command workerapi is galley's workerapi Lambda function: the worker harness's /worker/v1/ API,
// behind API Gateway (HTTP API, payload format 2.0). All logic is in
// package lambdaapp and the packages it wires; see docs/architecture.md.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/pkg/api"
	"github.com/galley-run/galley/pkg/lambdaapp"
)

func main() {
	app := lambdaapp.MustFromEnv(lambdaapp.WorkerAPI)
	lambda.Start(httpadapter.NewV2(app.Handler(api.WithWorkers(app.Service))).ProxyWithContext)
}
