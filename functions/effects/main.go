// Command effects is galley's effects Lambda function: POST /v1/effects and /v1/effects/lookup,
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
	app := lambdaapp.MustFromEnv(lambdaapp.Effects)
	lambda.Start(httpadapter.NewV2(app.Handler(api.WithEffects(app.Service))).ProxyWithContext)
}
