// Command operator is galley's operator Lambda function: the operator API
// and console under /operator/ (package operator, long poll only), behind
// API Gateway (HTTP API, payload format 2.0), with the operator token. All
// logic is in package lambdaapp and the packages it wires; see
// docs/operations.md.
package main

import (
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/galley-run/galley/pkg/lambdaapp"
)

func main() {
	app := lambdaapp.MustFromEnv(lambdaapp.Operator)
	h, err := app.OperatorHandler()
	if err != nil {
		app.Log.Error("function init failed", "err", err.Error())
		os.Exit(1)
	}
	lambda.Start(httpadapter.NewV2(h).ProxyWithContext)
}
