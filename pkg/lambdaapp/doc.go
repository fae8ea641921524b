// Package lambdaapp is everything a galley Lambda function needs besides
// its few lines of wiring in functions/: the configuration from environment
// variables (the names infra/stack sets), the service built on AWS clients
// (DynamoDB, the SQS doorbell, ECS, Secrets Manager) with only the
// dependencies the function's role may use, kitchn's bearer token checked
// against a Secrets Manager secret cached with a bounded age (current and
// previous versions accepted during a rotation), request arrival taken from
// API Gateway's clock, every call bounded by the invocation's deadline, and
// JSON logs carrying the Lambda request id and never a secret.
package lambdaapp
